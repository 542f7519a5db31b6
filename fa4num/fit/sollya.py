"""Sollya (https://www.sollya.org, 8.0) driven as a subprocess: the anchor that regenerates FA4's POLY_EX2
and cross-checks our certified bounds. Nothing here is needed when Sollya is absent; callers check
:func:`available` first. Public: the tests, experiments/fit_suite.py and benchmarks/bench_fit.py drive Sollya
through it.

FA4's coefficients come from the Sollya call quoted in ``flash_attn/cute/utils.py`` (POLY_EX2 comment):
``fpminimax(exp(x*log(2.0)), n, [|1,24...|], [0;1], relative)``.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from fractions import Fraction

_HEX = re.compile(r"^-?0x[0-9a-f]+(\.[0-9a-f]*)?p[-+]?\d+$|^0$", re.IGNORECASE)


def available() -> bool:
    """Whether a ``sollya`` executable is on PATH.

    Parameters
    ----------
    None

    Returns
    -------
    bool

    Examples
    --------
    >>> isinstance(available(), bool)
    True
    """
    return shutil.which("sollya") is not None


def run(script: str, *, timeout: float = 120.0) -> str:
    """Run a Sollya script (fed on stdin) and return its stdout.

    Parameters
    ----------
    script : str
        Sollya statements; ``quit;`` is appended.
    timeout : float
        Seconds before the subprocess is killed (subprocess.TimeoutExpired).

    Returns
    -------
    str
        What Sollya printed on stdout.

    Raises
    ------
    RuntimeError
        When Sollya is not installed, exits non-zero or prints an error message.

    Examples
    --------
    >>> run("print(1 + 1);").strip() if available() else "2"
    '2'
    """
    exe = shutil.which("sollya")
    if exe is None:
        raise RuntimeError("sollya is not installed (Debian/Ubuntu: apt-get install sollya)")
    proc = subprocess.run([exe, "--warnonstderr"], input=script + "\nquit;\n", capture_output=True, text=True,
                          timeout=timeout)
    errors = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.lower().startswith("error")]
    if proc.returncode != 0 or errors:
        raise RuntimeError(f"sollya failed (rc {proc.returncode}): {' | '.join(errors) or proc.stderr.strip()}")
    return proc.stdout


def fit_and_supnorm(fpminimax: str, function: str, interval: str, error: str, *, timeout: float = 300.0) -> dict:
    """Run Sollya's ``p = fpminimax(...)`` then ``supnorm(p, function, interval, error, 2^-30)`` and read back
    the sup norm's upper end and p's coefficients (hexadecimal, c0 first).

    Parameters
    ----------
    fpminimax : str
        The call's text, e.g. ``"fpminimax(2^x, [|0,1,2,3|], [|24...|], [0;1], relative)"``.
    function, interval, error : str
        Sollya's texts for the supnorm (the same function, "[a;b]", "relative" or "absolute").
    timeout : float
        Seconds.

    Returns
    -------
    dict
        ``error`` (float or None), ``coeffs`` (floats, c0 first), ``seconds``, and ``failed`` (a reason) when
        Sollya failed or printed something else.

    Examples
    --------
    >>> call = "fpminimax(2^x, 1, [|24...|], [0;1], relative)"      # a line through 2^x on [0, 1]
    >>> r = fit_and_supnorm(call, "2^x", "[0;1]", "relative") if available() else {"coeffs": [1.0, 1.0]}
    >>> len(r["coeffs"])
    2
    """
    import time
    script = (f"display=hexadecimal!; prec=200!;\np = {fpminimax};\n"
              f"s = supnorm(p, {function}, {interval}, {error}, 2^-30);\n"
              f"print(sup(s)); for i from 0 to degree(p) do print(coeff(p, i));\n")
    t0 = time.perf_counter()
    try:
        out = run(script, timeout=timeout)
    except (RuntimeError, OSError) as exc:
        return {"error": None, "coeffs": [], "seconds": time.perf_counter() - t0, "failed": str(exc)[:300]}
    seconds = time.perf_counter() - t0
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    try:
        return {"error": float.fromhex(lines[0]), "seconds": seconds,
                "coeffs": [float.fromhex(c) if c != "0" else 0.0 for c in lines[1:]]}
    except (ValueError, IndexError):
        return {"error": None, "coeffs": [], "seconds": seconds, "failed": f"unexpected output {lines[:3]!r}"}


def exact(value: float) -> str:
    """A float as an exact Sollya constant expression m*2^e (decimal literals would be rounded)."""
    fr = Fraction(value)
    num, den = fr.numerator, fr.denominator
    return f"({num})" if den == 1 else f"({num}*2^(-{den.bit_length() - 1}))"


def _parse_hex(token: str) -> float:
    token = token.strip()
    if not _HEX.match(token):
        raise RuntimeError(f"sollya: unexpected output {token!r}")
    return float.fromhex(token) if token != "0" else 0.0


def fpminimax_fa4(degree: int, *, interval=(0.0, 1.0), error: str = "relative", precision: int = 24,
                  c0_precision: int = 1, function: str = "exp(x*log(2.0))") -> list[float]:
    """FA4's call with its knobs exposed: ``fpminimax(function, degree, [|c0_precision, precision...|],
    [a;b], error)``; returns c0..cn as exact floats after checking each fits its precision."""
    a, b = interval
    script = (f"display=hexadecimal!;\n"
              f"p = fpminimax({function}, {degree}, [|{c0_precision},{precision}...|], "
              f"[{exact(a)};{exact(b)}], {error});\n"
              f"for i from 0 to {degree} do print(coeff(p, i));\n")
    lines = [ln for ln in run(script).splitlines() if ln.strip()]
    if len(lines) != degree + 1:
        raise RuntimeError(f"sollya: expected {degree + 1} coefficients, got {lines!r}")
    coeffs = [_parse_hex(ln) for ln in lines]
    for k, c in enumerate(coeffs):
        bits = c0_precision if k == 0 else precision
        if significand_bits(c) > bits:
            raise RuntimeError(f"sollya: c{k} = {c.hex()} does not fit {bits} bits")
    return coeffs


def significand_bits(value: float) -> int:
    """Bits of the odd significand of a float (0 for 0): the smallest precision that holds it exactly."""
    n = abs(Fraction(value).numerator)
    while n and n % 2 == 0:
        n //= 2
    return n.bit_length()


def supnorm(coeffs, function: str = "2^x", *, interval=(0.0, 1.0), error: str = "relative",
            accuracy: float = 2.0 ** -30) -> tuple[float, float]:
    """Sollya's certified enclosure [lower, upper] of sup |error| of the polynomial ``coeffs`` (c0 first)."""
    poly = " + ".join(f"{exact(c)}*x^{k}" for k, c in enumerate(coeffs))
    a, b = interval
    script = (f"display=hexadecimal!;\n"
              f"s = supnorm({poly}, {function}, [{exact(a)};{exact(b)}], {error}, {exact(accuracy)});\n"
              f"print(inf(s)); print(sup(s));\n")
    lines = [ln for ln in run(script).splitlines() if ln.strip()]
    if len(lines) != 2:
        raise RuntimeError(f"sollya: unexpected supnorm output {lines!r}")
    lo, hi = (_parse_hex(ln) for ln in lines)
    return lo, hi
