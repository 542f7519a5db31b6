"""The ``fa4num`` command. Each subpackage that has commands owns a ``_cli.py`` with ``register(subparsers)``;
this module only collects them, so a command lives next to the code it drives.

Start-up is lazy: the table below names each command, the module that registers it and a one-line help, so
``fa4num --help`` imports nothing heavy and ``fa4num CMD ...`` imports only CMD's module. Errors are one line
(``fa4num: error: --shape: expected ...``), exit status 2 for a bad argument or value, 1 for a failure while
working, 130 for Ctrl-C and 143 for SIGTERM (both clean up first: no temporary folder is left, finished study
rows are stored); ``--debug`` (anywhere on the line) shows the traceback instead.
"""
from __future__ import annotations

import argparse
import importlib
import re
import signal
import sys

# (command, module holding register(), one-line help) -- order is the order of `fa4num --help`. A module may
# register several commands; it is imported only when one of its commands runs.
_COMMANDS = (
    ("report", "fa4num.report", "write the FA4 accuracy report (Markdown + JSON + PNG) from embedded defaults"),
    ("sweep", "fa4num.ex2._cli", "ulp/bf16 error statistics of an exp2 implementation over fp32 inputs"),
    ("fit", "fa4num.fit._cli", "fit 2^x coefficients, compare with FA4's set, optionally register them"),
    ("polys", "fa4num._polys_cli", "list, show and export coefficient sets of the polys registry"),
    ("mufu", "fa4num.gpu._cli", "MUFU ex2/rcp/lg2 table models: info, or build on a GPU"),
    ("attention", "fa4num.attention._cli", "emulated FA4 forward: accuracy runs and golden checks"),
    ("bounds", "fa4num.bounds._cli", "rigorous error bounds of the exp2 and the attention forward vs observed"),
    ("study", "fa4num.study._cli", "studies at scale on Dask: run grids, list them, summarise results"),
    ("gpu", "fa4num.gpu._cli", "run the real instructions and kernels on a GPU and compare with the emulators"),
    ("upstream", "fa4num.upstream", "compare a flash-attn-4 wheel's numerics constants and rules with fa4num's"),
)


_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-inf(inity)?$", re.IGNORECASE)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt, so that the same clean-up runs
    (temporary output folders removed, finished study rows stored) before the one-line message."""


def _terminate(signum, frame):
    raise Terminated()


class UsageError(ValueError):
    """A bad argument found by a command after parsing (exit status 2, one line)."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``fa4num: error: --opt: message``, exit status 2; and ``-1e9``, ``-inf``
    read as negative numbers (argparse itself takes only ``-1`` or ``-1.5`` for a value, anything else for an
    option: ``--range -inf 0`` and ``--lo -1e9`` failed with "expected 2 arguments")."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message):
        message = re.sub(r"^argument (\S+?)(/\S+)?: ", r"\1: ", message)
        sys.stderr.write(f"fa4num: error: {message} (see `{self.prog} --help`)\n")
        sys.exit(2)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with ``command``'s module registered in full and every other command as a help-only stub."""
    parser = _Parser(
        prog="fa4num",
        description="fa4num: bit-exact numerics of FlashAttention-4 (software exp2, lazy rescaling, MUFU models, "
                    "polynomial fitting, forward-pass emulation). Start with `fa4num report`.")
    parser.add_argument("--debug", action="store_true", help="on an error, show the Python traceback")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    chosen = next((mod for name, mod, _ in _COMMANDS if name == command), None)
    registered = False
    for name, module, help_text in _COMMANDS:
        if module != chosen:
            sub.add_parser(name, help=help_text)
        elif not registered:
            importlib.import_module(module).register(sub)
            registered = True
    return parser


def _command_of(argv: list) -> str | None:
    """The first word that is not an option: the command (the top level has only flags)."""
    return next((a for a in argv if not a.startswith("-")), None)


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    import threading
    main_thread = threading.current_thread() is threading.main_thread()   # signal handlers: main thread only
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        # inside the try: building the parser imports the command's module (a second or more for the numerics),
        # and a Ctrl-C or SIGTERM then must be one line too, not an import traceback
        parser = build_parser(_command_of(argv))
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        status = int(args.func(args) or 0)
        sys.stdout.flush()   # here, not at exit: a closed pipe (`fa4num ... | head`) is then caught below
        return status
    except BrokenPipeError:
        # the reader went away (`| head`): stop quietly, as a shell tool does; output still buffered goes nowhere
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141   # 128 + SIGPIPE, the status a shell reports for a tool killed by the closed pipe
    except KeyboardInterrupt as err:
        if debug:
            raise
        term = isinstance(err, Terminated)
        sys.stderr.write(f"fa4num: {'terminated (SIGTERM)' if term else 'interrupted'}\n")
        return 143 if term else 130
    except (ValueError, TypeError) as err:   # bad values found by the library (it names the argument)
        if debug:
            raise
        sys.stderr.write(f"fa4num: error: {_one_line(err)}\n")
        return 2
    except Exception as err:  # noqa: BLE001 -- one line instead of a traceback; --debug shows it
        if debug:
            raise
        what = _one_line(err) if isinstance(err, OSError) else f"{type(err).__name__}: {_one_line(err)}"
        sys.stderr.write(f"fa4num: error: {what} (run with --debug for the traceback)\n")
        return 1
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
