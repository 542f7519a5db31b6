"""Argument types for the ``fa4num`` command line: each turns one option's text into a checked value or raises
:class:`argparse.ArgumentTypeError` with a message saying what was expected, so that a mistyped option is
reported in one line before any work starts.

A leaf module (standard library only): every ``_cli.py`` may use it, and importing it costs nothing.

Examples
--------
>>> positive_int("3")
3
>>> finite_float("1e-3")
0.001
"""
from __future__ import annotations

import argparse
import math
import re

from fa4num import polys


def _err(expected: str, text: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")


def finite_float(text: str) -> float:
    """A finite real number (NaN and infinities are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise _err("a finite number", text) from None
    if not math.isfinite(value):
        raise _err("a finite number", text)
    return value


def not_nan_float(text: str) -> float:
    """A number or +-inf, not NaN (for range ends: ``-inf`` means unbounded)."""
    try:
        value = float(text)
    except ValueError:
        raise _err("a number", text) from None
    if math.isnan(value):
        raise _err("a number (not NaN)", text)
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = finite_float(text)
    if value <= 0:
        raise _err("a finite number > 0", text)
    return value


def _int(text: str, lo: int, what: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise _err(what, text) from None
    if value < lo:
        raise _err(what, text)
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (decimal, or 0x... hex)."""
    return _int(text, 1, "an integer >= 1")


def nonneg_int(text: str) -> int:
    """An integer >= 0."""
    return _int(text, 0, "an integer >= 0")


def any_int(text: str) -> int:
    """Any integer (decimal, or 0x... hex)."""
    try:
        return int(text, 0)
    except ValueError:
        raise _err("an integer", text) from None


def path_arg(text: str) -> str:
    """A file or folder path: not empty (an empty --out would silently mean the current folder) and no NUL.

    Examples
    --------
    >>> path_arg("out/run1")
    'out/run1'
    """
    if not text.strip() or "\0" in text:
        raise argparse.ArgumentTypeError(f"expected a file or folder path, got {text!r}")
    return text


def int_tuple(names: tuple, *, lo: int = 1):
    """A type for comma-separated integers, one per name, each >= lo: ``int_tuple(("batch", "seqlen"))``."""
    what = f"{','.join(names)} ({len(names)} integers >= {lo})"

    def parse(text: str) -> tuple:
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != len(names):
            raise argparse.ArgumentTypeError(f"expected {','.join(names)}, got {text!r}")
        try:
            values = tuple(int(p) for p in parts)
        except ValueError:
            raise _err(what, text) from None
        if any(v < lo for v in values):
            raise _err(what, text)
        return values

    parse.__name__ = "shape"
    return parse


def key_value(text: str) -> tuple:
    """``KEY=VALUE`` (an ``--opt``): the value parsed as JSON where it is (numbers, true/false, lists), else
    kept as text; the consumer checks it.

    Examples
    --------
    >>> key_value("rescale_threshold=4"), key_value("gemm=wgmma")
    (('rescale_threshold', 4), ('gemm', 'wgmma'))
    """
    import json
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def coeffs(text: str):
    """``--coeffs``: a set name (kept as text: it is looked up with the command's ``--registry``, see
    :func:`fa4num.polys.resolve`) or "c0,c1,..." of decimals / 0x fp32 bit patterns, each exact in fp32
    (returned as a :class:`fa4num.polys.PolySet`)."""
    text = text.strip()
    if polys.is_name(text):
        return text
    try:
        return polys.resolve(text)
    except (ValueError, TypeError) as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("coeffs: ")) from None


COEFFS_HELP = ("a coefficient set: a polys name (fa4num polys list; --registry and $FA4NUM_POLYS are searched "
               "too) or c0,c1,... as decimals or 0x fp32 bit patterns, each exact in fp32")


def add_registry_option(parser, *, help: str | None = None) -> None:
    """The ``--registry PATH`` option of every command that takes a set name (repeatable; searched first, before
    ``$FA4NUM_POLYS``, the user registry and the shipped sets: :func:`fa4num.polys.search_path`)."""
    parser.add_argument("--registry", metavar="PATH", action="append", default=None,
                        help=help or "a polys registry (folder of set files or registry .json) to search first; "
                                     "repeatable; $FA4NUM_POLYS (':'-separated) is searched next")


def fa4_release(text: str) -> str:
    """A flash-attn-4 release name, "4.0.0bNN" (whether fa4num has its profile is checked where the call is
    planned: fa4num.attention.releases, one message for the API and the CLI)."""
    if not re.fullmatch(r"4\.0\.0b\d+", text):
        raise _err("a flash-attn-4 release such as 4.0.0b36", text)
    return text


def add_release_option(parser) -> None:
    """``--fa4-release``: the release whose numerics a command emulates (``plan(..., fa4_release=...)``), the one
    option every command that plans an FA4 call shares."""
    parser.add_argument("--fa4-release", type=fa4_release, default=None, metavar="RELEASE",
                        help="flash-attn-4 release whose numerics to emulate (default 4.0.0b36; the profiles: "
                             "fa4num.attention.releases.known(), or `fa4num upstream diff` on a wheel)")
