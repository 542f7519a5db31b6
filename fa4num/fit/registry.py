"""The fitter's side of the polys registry: every metric of a coefficient set (:func:`describe`) and FA4's
shipped sets as entries. Reading, writing and exporting entries live in the leaf module :mod:`fa4num.polys`
(re-exported here), so that lower layers and ``fa4num polys`` resolve names without importing the fitter.
"""
from __future__ import annotations

import struct
import time

from fa4num.polys import (EXPORT_FORMATS, SCHEMA, PolySet, check_writable, export, fp32_bits,
                          load_poly, poly_entry, read, resolve, shipped_dir, user_dir, write_entry)

from . import _memo

__all__ = ["EXPORT_FORMATS", "FA4_RELEASE", "SCHEMA", "PolySet", "add_fa4_sets", "check_writable",
           "describe", "export", "fa4_sets", "fp32_bits", "load_poly", "poly_entry", "read",
           "resolve", "shipped_dir", "user_dir", "write_entry"]
FA4_RELEASE = "4.0.0b36"   # the flash-attn-4 release whose POLY_EX2 fa4num.constants holds
FA4_SOURCE = (f"FA4 POLY_EX2, flash-attn-4 {FA4_RELEASE} flash_attn/cute/utils.py (Sollya "
              "fpminimax(exp(x*log(2.0)), n, [|1,24...|], [0;1], relative))")


_BASE_METRICS = ("max_rel_error", "argmax", "certified_rel_bound", "max_abs_error")
_OPTIMUM_METRICS = ("rel_optimum", "ratio_to_optimum")
_EMULATION_METRICS = ("evaluated_rel_error", "evaluated_argmax", "bf16_mismatch_share",
                      "bf16_mismatch_share_with_subnormal")


def describe(coeffs, *, emulation: bool = True, degree_optimum: bool = True, stored: bool = False,
             rel_optimum: float | None = None, rel_error: tuple | None = None) -> dict:
    """Every metric of a 2^x coefficient set on [0, 1] (c0 first).

    The metrics::

        max_rel_error / argmax     sup |p/2^x - 1| in real arithmetic (scan of the error + Newton refinement)
        certified_rel_bound        rigorous upper bound (ball arithmetic, fa4num.fit certify)
        max_abs_error              sup |p - 2^x|
        rel_optimum, ratio_to_optimum   the p(0)=1 real-coefficient optimum of the same degree and the ratio
        evaluated_rel_error        (emulation) max rel. error of FA4's fp32 evaluation over every fp32 in [0, 1)
        bf16_mismatch_share(_with_subnormal)   (emulation) see fa4num.fit.bf16_mismatch_share

    What is measured is kept in the user cache (keyed by the bits, the options, fa4num's code and the packages'
    versions; ``FA4NUM_NO_CACHE=1`` turns it off), so a set is measured once: the same numbers, "seconds" being
    the time the measurement took.

    Parameters
    ----------
    coeffs : sequence of float
        c0 first, 2^x on [0, 1].
    emulation : bool
        Measure the emulation metrics (evaluated_rel_error, bf16_mismatch_share): exhaustive, seconds per set.
    degree_optimum : bool
        Compute rel_optimum and ratio_to_optimum (a Remez run unless ``rel_optimum`` is given).
    stored : bool
        Take the metrics from the registry shipped with fa4num when one of its 2^x entries on [0, 1] holds
        exactly these fp32 coefficients and every metric asked for (FA4's five sets are there, measured by
        this function); ``stored_in`` then names the entry. The metrics are functions of the bits, so they
        are the same numbers; the exhaustive emulation metrics cost seconds per set.
    rel_optimum : float, optional
        The p(0)=1 real-coefficient optimum's error when the caller has it (a fit computes it), instead of a
        Remez run.
    rel_error : (max_rel_error, argmax, certified_rel_bound), optional
        The set's own relative error on [0, 1] and a rigorous bound of it, when the caller has them (a fit
        of 2^x on [0, 1] with relative error computes them), instead of a second search and certificate.

    Returns
    -------
    dict
        The metrics of the table above that were asked for, plus "seconds" (time taken) and, with
        ``stored=True`` when the shipped registry had them, "stored_in" (the entry's name).

    Examples
    --------
    >>> m = describe(fa4_sets()[3], emulation=False, degree_optimum=False)
    >>> sorted(m), round(m["max_rel_error"], 9), m["max_rel_error"] <= m["certified_rel_bound"]
    (['argmax', 'certified_rel_bound', 'max_abs_error', 'max_rel_error', 'seconds'], 8.763e-05, True)
    >>> describe(fa4_sets()[3], stored=True)["stored_in"]
    'fa4-4.0.0b36-deg3'
    """
    coeffs = tuple(float(c) for c in coeffs)
    if stored:
        keys = _BASE_METRICS + (_OPTIMUM_METRICS if degree_optimum else ()) + \
            (_EMULATION_METRICS if emulation else ())
        found = _stored_metrics(coeffs, keys)
        if found is not None:
            return found
    # computed once per set and options: the user cache (fa4num.fit._memo) keeps the result, "seconds" included
    key = (_memo.plain(coeffs), emulation, degree_optimum, _memo.plain(rel_optimum), _memo.plain(rel_error))
    return _memo.remember("describe", key, lambda: _describe(coeffs, emulation, degree_optimum, rel_optimum,
                                                             rel_error))


def _describe(coeffs: tuple, emulation: bool, degree_optimum: bool, rel_optimum, rel_error) -> dict:
    from ._certify import certify   # here: reading or writing the registry needs no mpmath, flint or numpy
    from ._remez import Problem, remez, sup_error
    from ._target import EXP2
    n = len(coeffs) - 1
    t0 = time.perf_counter()
    rel = Problem(EXP2, 0.0, 1.0, n, {}, True)
    absolute = Problem(EXP2, 0.0, 1.0, n, {}, False)
    if rel_error is None:
        e_rel, x_rel = sup_error(rel, coeffs)
        rel_error = (e_rel, x_rel, certify(rel, coeffs, extrema=[x_rel]).upper)
    e_rel, x_rel, upper = rel_error
    e_abs, _ = sup_error(absolute, coeffs)
    out = {"max_rel_error": float(e_rel), "argmax": float(x_rel), "certified_rel_bound": float(upper),
           "max_abs_error": float(e_abs)}
    if degree_optimum:
        if rel_optimum is None:
            rel_optimum = remez(Problem(EXP2, 0.0, 1.0, n, {0: 1.0}, True)).max_error
        out["rel_optimum"] = float(rel_optimum)
        out["ratio_to_optimum"] = float(e_rel / rel_optimum)
    if emulation:
        from ._objectives import bf16_mismatch_share, evaluated_error
        ev = evaluated_error(coeffs)
        out["evaluated_rel_error"] = ev["value"]
        out["evaluated_argmax"] = ev["argmax"]
        b = bf16_mismatch_share(coeffs)
        out["bf16_mismatch_share"] = b["value"]
        out["bf16_mismatch_share_with_subnormal"] = b["value_with_subnormal"]
    out["seconds"] = time.perf_counter() - t0
    return out


def _stored_metrics(coeffs: tuple, keys) -> dict | None:
    """The metrics of the shipped registry's 2^x entry on [0, 1] with exactly these fp32 coefficients, if it
    holds every one of ``keys``; None otherwise."""
    bits = [f"0x{fp32_bits(c):08X}" for c in coeffs]
    if any(float(struct.unpack("<f", struct.pack("<I", int(b, 16)))[0]) != c for b, c in zip(bits, coeffs)):
        return None   # not fp32 numbers: no entry can hold them
    for name, entry in read()["entries"].items():
        metrics = entry.get("metrics") or {}
        if (entry.get("coeffs_fp32_bits") == bits and entry.get("function") == "2^x"
                and list(entry.get("interval", ())) == [0.0, 1.0] and all(k in metrics for k in keys)):
            return {**{k: metrics[k] for k in keys}, "stored_in": name}
    return None


def fa4_sets() -> dict:
    """FA4's POLY_EX2 sets (degrees 1-5), the ones fa4num.ex2 emulates (fp32 bit patterns copied from FA4).

    Parameters
    ----------
    None

    Returns
    -------
    dict
        {degree: (c0, ..., c_degree)} with Python floats, each exactly an fp32 value; c0 first.

    Examples
    --------
    >>> s = fa4_sets()
    >>> sorted(s), s[3]
    ([1, 2, 3, 4, 5], (1.0, 0.6951461434364319, 0.22756439447402954, 0.07711908966302872))
    """
    from fa4num.constants import POLY_EX2   # not fa4num.ex2: that imports numba (0.4 s), for data only
    return {d: tuple(float(c) for c in cs) for d, cs in POLY_EX2.items()}


def add_fa4_sets(*, registry=None, emulation: bool = True) -> list[str]:
    """Write FA4's five sets, with every metric (:func:`describe`), as entries fa4-<release>-deg1..5 (aliases
    fa4-deg1..5).

    Parameters
    ----------
    registry : str or Path, optional
        The registry to write (created if absent); default: the user registry (never the package).
    emulation : bool
        Also measure the emulation metrics (evaluated_rel_error, bf16_mismatch_share): exhaustive, seconds per
        set.

    Returns
    -------
    list of str
        The entry names written.

    Raises
    ------
    ValueError
        When the registry cannot be written (fa4num.polys.check_writable).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> reg = pathlib.Path(tempfile.mkdtemp()) / "fa4.json"
    >>> add_fa4_sets(registry=reg, emulation=False)[2]
    'fa4-4.0.0b36-deg3'
    >>> poly_entry("fa4-4.0.0b36-deg3", registry=reg)["aliases"]
    ['fa4-deg3']
    """
    from fa4num.provenance import provenance
    names = []
    for d, coeffs in fa4_sets().items():
        name = f"fa4-{FA4_RELEASE}-deg{d}"
        write_entry(name, coeffs, source=FA4_SOURCE, metrics=describe(coeffs, emulation=emulation),
                    provenance=provenance(), aliases=[f"fa4-deg{d}"], release=FA4_RELEASE, registry=registry)
        names.append(name)
    return names
