"""The ``fa4num`` command. Each subpackage that has commands owns a ``_cli.py`` with ``register(subparsers)``;
this module only collects them, so a command lives next to the code it drives."""
from __future__ import annotations

import argparse
import importlib
import sys

# (module holding register(), what it adds) -- order is the order of `fa4num --help`.
_COMMAND_MODULES = (
    "fa4num.ex2._cli",        # report, sweep
    "fa4num.fit._cli",        # fit, polys
    "fa4num.hw._cli",         # mufu (tables: build / info)
    "fa4num.attention._cli",  # attention
    "fa4num.study._cli",      # study run / list / summary (Dask imported only when running)
    "fa4num.gpu._cli",        # gpu ... (needs torch+CUDA+Triton at run time, not at import)
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fa4num",
        description="fa4num: bit-exact numerics of FlashAttention-4 (software exp2, lazy rescaling, MUFU models, "
                    "polynomial fitting, forward-pass emulation). Start with `fa4num report`.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # that subpackage has no commands (yet)
                continue
            raise
        mod.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
