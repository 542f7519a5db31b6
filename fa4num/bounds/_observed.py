"""Exhaustive observed maxima of exp2 implementations, cached in data/exp2_observed.json.

The relative-error bound of fa4num.bounds.exp2_error_bound is checked against the largest error observed over
every fp32 input whose result is normal. Sweeping ~1.06e9 inputs per implementation takes seconds to minutes,
so the sweeps are run once (``python3 -m fa4num.bounds._observed``) with fa4num.ex2.sweep and their maxima kept
with provenance; the tests recheck slices of them.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from fa4num.ex2 import Domain, fa4_implementation, mufu_implementation, poly_coeffs, sweep
from fa4num.polys import read, resolve

__all__ = ["OBSERVED_PATH", "observed_exp2", "observed_key", "NORMAL_DOMAIN"]

OBSERVED_PATH = Path(__file__).with_name("data") / "exp2_observed.json"
# every fp32 x whose 2^x (and FA4's result) is a normal number: the exponent field n + 127 >= 1
NORMAL_DOMAIN = (-126.0, 0.0)


def observed_key(*, degree=3, coeffs=None, variant="packed", mufu_arch=None) -> str:
    """The cache key of one exp2 implementation: the form and the polynomial's fp32 bits (fa4num.polys.PolySet.key),
    so that one set has one record whatever name it is reached by, and a regenerated set never meets the record
    of its predecessor.

    Parameters
    ----------
    degree : int
        Polynomial degree of FA4's emulation (POLY_EX2[degree] when ``coeffs`` is None).
    coeffs : None, str or sequence of fp32 numbers
        Anything fa4num.polys.resolve takes.
    variant : {"packed", "scalar", "asm"}
    mufu_arch : str, optional
        Key of MUFU.EX2 (.ftz) on that arch instead of the software exp2.

    Returns
    -------
    str

    Examples
    --------
    >>> observed_key(degree=1)
    'fa4-packed-fp32-3f800000-3f6c28c5'
    >>> observed_key(coeffs="fa4-deg1") == observed_key(degree=1), observed_key(mufu_arch="sm90")
    (True, 'mufu-ex2-sm90-ftz')
    """
    if mufu_arch is not None:
        return f"mufu-ex2-{mufu_arch}-ftz"
    c = poly_coeffs(degree if coeffs is None else None, coeffs=coeffs)
    return f"fa4-{variant}-{resolve([float(x) for x in c]).key}"


def observed_exp2(key: str, *, path=None) -> dict | None:
    """The cached exhaustive-sweep record of ``key`` (see observed_key), or None when it was not swept.

    Parameters
    ----------
    key : str
    path : str or Path, optional
        Another cache file (default: OBSERVED_PATH, fa4num/bounds/data/exp2_observed.json).

    Returns
    -------
    dict or None
        {"name", "max_rel", "max_rel_x", "count", "seconds"}: the implementation swept, the largest |ex2(x)/2^x - 1| over every fp32 x in
        NORMAL_DOMAIN, where it occurs, the number of inputs and the sweep's time.

    Examples
    --------
    >>> r = observed_exp2(observed_key())
    >>> sorted(r), r["max_rel"] < 1e-4, r["count"] > 10 ** 9
    (['count', 'max_rel', 'max_rel_x', 'name', 'seconds'], True, True)
    >>> observed_exp2("no-such-implementation") is None
    True
    """
    p = Path(path) if path is not None else OBSERVED_PATH
    if not p.exists():
        return None
    return json.loads(p.read_text())["results"].get(key)


def _implementations() -> dict:
    """{cache key: implementation}: FA4's POLY_EX2 in every form, each shipped set of degree <= 5, MUFU."""
    impls = {observed_key(degree=d): fa4_implementation(d) for d in range(1, 6)}
    impls |= {observed_key(degree=3, variant=v): fa4_implementation(3, variant=v) for v in ("scalar", "asm")}
    for name, e in read()["entries"].items():
        if 1 <= int(e["degree"]) <= 5:
            impls.setdefault(observed_key(coeffs=name), fa4_implementation(None, coeffs=name))
    impls[observed_key(mufu_arch="sm90")] = mufu_implementation(arch="sm90", ftz=True)
    return impls


def build(path=None, *, progress=False) -> Path:
    """Sweep every implementation over all fp32 x in NORMAL_DOMAIN and write the maxima (run on an idle box).
    Implementations already in the file are kept (the file is rewritten after each sweep, so a long run can be
    resumed)."""
    from fa4num.provenance import provenance
    p = Path(path) if path is not None else OBSERVED_PATH
    dom = Domain(kind="bits", lo=NORMAL_DOMAIN[0], hi=NORMAL_DOMAIN[1], nans=False)
    rec = json.loads(p.read_text()) if p.exists() else {
        "what": "largest |ex2(x)/2^x - 1| over every fp32 x in [-126, 0] (results normal), fa4num.ex2.sweep "
                "(2^x from libm float64)", "domain": list(NORMAL_DOMAIN), "results": {}, "provenance": []}
    for key, impl in _implementations().items():
        if key in rec["results"]:
            continue
        r = sweep(impl, dom, xbins=0, progress=progress)
        if not math.isfinite(r.max_rel):
            raise RuntimeError(f"{impl.name}: the sweep gave a non-finite maximum")
        rec["results"][key] = {"name": impl.name, "max_rel": r.max_rel, "max_rel_x": r.max_rel_x, "count": r.count,
                                     "seconds": round(r.seconds, 2)}
        rec["provenance"].append(provenance(domain=dom.describe(), implementation=impl.name, key=key))
        print(f"{impl.name}: max rel {r.max_rel:.6g} at x={r.max_rel_x!r} ({r.count} inputs, {r.seconds:.1f} s)",
              flush=True)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(rec, indent=1) + "\n")
    return p


if __name__ == "__main__":
    print(build())
