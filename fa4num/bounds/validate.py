"""The attention bound against observed errors: real FA4 kernel bits captured on an H200 (package data,
fa4num/data/golden/) and the emulator (fa4num.attention.forward) on any inputs.

``check(q, k, v, out, lse, ...)`` counts violations (|observed - exact| > bound) and reports the tightness
(largest bound / largest observed error, and the median over elements of bound / observed) over the elements with
a finite bound; elements whose bound is +inf (non-finite inputs, negative or huge softmax_scale: docs/bounds.md,
section 5.8) are counted as ``unbounded`` and cannot be violations.
``golden_checks()`` runs it on every H200 golden forward case (plain attention and every feature case: softcap,
sliding windows, learnable sinks, varlen, non-finite inputs, odd scales).
"""
from __future__ import annotations

import json
import pathlib
from dataclasses import asdict, dataclass

import numpy as np

from fa4num.attention import golden as attention_golden
from fa4num.attention.problem import DEFAULT_KERNEL, Problem
from fa4num.fp.dtypes import DTYPES

from .attention import attention_error_bound

__all__ = ["BoundCheck", "check", "golden_cases", "golden_checks", "golden_options", "GOLDEN_DIR"]

# the plain cases are package data (fa4num/data/golden), the feature cases live in the checkout's tests/golden
GOLDEN_DIR = attention_golden.GOLDEN_DIR
_UNMODELLED = ("backward",)          # backward-only captures


@dataclass(frozen=True)
class BoundCheck:
    """One case: violations and tightness of the worst-case and probabilistic bounds."""
    name: str
    kernel: str
    source: str                 # "h200" (GPU bits) or "emulator"
    elements: int               # output elements compared
    out_violations: int
    lse_violations: int
    prob_violations: int | None  # elements above out_probabilistic (allowed with probability delta each); None
    #                              when the bound has no probabilistic variant (attention_error_bound(delta=None))
    max_observed: float
    max_bound: float
    ratio_max: float            # max bound / max observed over the case (inf when nothing was observed)
    ratio_median: float         # median over elements with an error of bound / observed
    lse_max_observed: float
    lse_max_bound: float
    prob_ratio_max: float | None
    bound_seconds: float
    unbounded: int = 0          # output elements with bound +inf (no finite bound claimed)
    lse_unbounded: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def _ratio(a, b):
    return float(a / b) if b > 0 else float("inf")


def check(q=None, k=None, v=None, out=None, lse=None, *, problem: Problem | None = None, name="case",
          source="emulator", idx=None, bound=None, **fa4_args) -> BoundCheck:
    """Compare an observed ``out`` and ``lse`` with the bound of ``attention_error_bound``: violations, tightness.

    Elements whose bound is +inf count as ``unbounded`` and cannot be violations; a non-finite error on a bounded
    element is one.

    Parameters
    ----------
    q, k, v : arrays or tensors in FA4's layout
        The inputs (used only when ``bound`` is None), or ``problem``.
    problem : Problem, optional
        ``fa4num.attention.plan(q, k, v, **fa4_args)`` instead of q, k, v and FA4's arguments.
    out : array
        The observed output (kernel dtype, out's shape), or its flat values at ``idx``.
    lse : array
        The observed LSE (lse's shape).
    name, source : str
        Labels copied into the result ("h200" for GPU bits, "emulator").
    idx : int array, optional
        Flat indices of out's elements that ``out`` holds (partial captures).
    **fa4_args
        FA4's arguments, as for attention_error_bound (softmax_scale, causal, kernel, ...).
    bound : AttentionBound, optional
        A bound already computed for these inputs (anything with .out, .out_exact, .out_probabilistic, .lse and
        .lse_exact arrays; .out_probabilistic may be None). Without, pass ``delta=`` among FA4's arguments to
        check the probabilistic variant too.

    Returns
    -------
    BoundCheck

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> b = SimpleNamespace(out_exact=np.array([1.0, 2.0]), out=np.array([0.01, np.inf]),
    ...                     out_probabilistic=np.array([0.002, np.inf]),
    ...                     lse_exact=np.array([0.5]), lse=np.array([1e-6]))
    >>> r = check(None, None, None, np.array([1.004, 2.5]), np.array([0.5]), bound=b)
    >>> r.out_violations, r.prob_violations, r.unbounded, round(r.ratio_max, 6), r.lse_violations
    (0, 1, 1, 2.5, 0)
    """
    import time
    t0 = time.perf_counter()
    if bound is None:
        bound = attention_error_bound(q, k, v, problem=problem, **fa4_args)
    kernel = getattr(bound, "kernel", problem.kernel.name if problem is not None else
                     fa4_args.get("kernel", DEFAULT_KERNEL))
    secs = time.perf_counter() - t0
    ob = np.asarray(out).astype(np.float64)
    if idx is None:
        ex, bd, bp = bound.out_exact, bound.out, bound.out_probabilistic
    else:
        ex, bd, bp = (None if a is None else a.reshape(-1)[idx]
                      for a in (bound.out_exact, bound.out, bound.out_probabilistic))
        ob = ob.reshape(-1)
    with np.errstate(invalid="ignore"):
        err = np.abs(ob - ex)
    bounded = np.isfinite(bd)
    # a bounded element is violated by a larger or a non-finite error; an unbounded one (bd = +inf) never
    viol = int(((err > bd) | (~np.isfinite(err) & bounded)).sum())
    err = np.where(bounded, err, 0.0)
    bdf = np.where(bounded, bd, 0.0)
    bpf = None if bp is None else np.where(bounded, bp, 0.0)
    nz = err > 0
    lse = np.asarray(lse, np.float64)
    lb = np.where(np.isfinite(bound.lse), bound.lse, np.inf)
    lbounded = np.isfinite(lb)
    fin = np.isfinite(bound.lse_exact)
    with np.errstate(invalid="ignore"):
        lerr = np.where(fin & lbounded, np.abs(lse - bound.lse_exact), 0.0)
    lviol = int(((lerr > lb) & lbounded).sum() + ((np.isfinite(lse) != fin) & lbounded).sum())
    return BoundCheck(name=name, kernel=kernel, source=source, elements=int(err.size),
                      out_violations=viol, lse_violations=lviol,
                      prob_violations=None if bp is None else int((err > bp).sum()),
                      max_observed=float(err.max(initial=0.0)), max_bound=float(bdf.max(initial=0.0)),
                      ratio_max=_ratio(bdf.max(initial=0.0), err.max(initial=0.0)),
                      ratio_median=float(np.median(bdf[nz] / err[nz])) if nz.any() else float("inf"),
                      lse_max_observed=float(lerr.max(initial=0.0)),
                      lse_max_bound=float(np.where(lbounded, lb, 0.0).max(initial=0)),
                      prob_ratio_max=None if bpf is None else _ratio(bpf.max(initial=0.0), err.max(initial=0.0)),
                      bound_seconds=secs,
                      unbounded=int((~bounded).sum()), lse_unbounded=int((~lbounded).sum()))


def _bits_to(dtype_name, bits):
    dt = {n: DTYPES[n].dtype for n in ("bfloat16", "float16")}[dtype_name]
    return np.asarray(bits).view(dt)


def golden_cases(directory=None):
    """Every H200 golden forward case the bound models, with the stored GPU values.

    Partial captures return only their stored rows / samples (``idx``); backward-only captures are left out.

    Parameters
    ----------
    directory : str or Path, optional
        A folder of golden .npz files (default: GOLDEN_DIR).

    Returns
    -------
    list of tuples
        (name, file name, spec dict, q, k, v, observed out values, flat index array or None, observed lse).

    Examples
    --------
    >>> cases = golden_cases()
    >>> name, file, spec, q, k, v, out, idx, lse = cases[0]
    >>> name, file, q.shape, out.dtype.name, lse.shape
    ('onehot_d64_nc', 'fa4_sm90_h200.npz', (1, 100, 2, 64), 'bfloat16', (1, 2, 100))
    """
    from fa4num.attention import inputs
    d = pathlib.Path(directory) if directory is not None else GOLDEN_DIR
    out = []
    main = d / "fa4_sm90_h200.npz" if directory is not None else attention_golden.GOLDEN_SM90
    if main.exists():
        z = np.load(main)
        meta = json.loads(str(z["meta"]))
        for c in meta["cases"]:
            spec = inputs.CaseSpec(**c["spec"])
            q, k, v = inputs.make_inputs(spec)
            gold = z[f"{spec.name}.out_bits"]
            rows = gold.shape[1]
            vals = _bits_to(spec.dtype, gold)
            idx = None
            if rows != spec.seqlen_q:
                full = np.zeros(q.shape, bool)
                full[:, :rows] = True
                idx = np.flatnonzero(full)
                vals = vals.reshape(-1)
            out.append((spec.name, main.name, c["spec"], q, k, v, vals, idx, z[f"{spec.name}.lse"]))
    for f in sorted(d.glob("fa4_sm90_features_*_h200.npz")) + sorted(d.glob("fa4_sm90_features_h200.npz")):
        z = np.load(f)
        meta = json.loads(str(z["meta"]))
        for c in meta["cases"]:
            case = c["case"]
            if any(case.get(key) for key in _UNMODELLED):
                continue
            name = case["name"]
            if f"{name}.out_sample_idx" not in z.files:
                continue
            arrays = inputs.make_feature_inputs(case)
            idx = z[f"{name}.out_sample_idx"].astype(np.int64)
            vals = _bits_to(case["dtype"], z[f"{name}.out_sample_bits"])
            spec = {k2: case[k2] for k2 in inputs.CaseSpec.__dataclass_fields__ if k2 in case}
            if case.get("window_size") is not None:
                spec["window_size"] = tuple(case["window_size"])
            if case.get("softcap"):
                spec["softcap"] = float(case["softcap"])
            if "learnable_sink" in arrays:
                spec["learnable_sink"] = arrays["learnable_sink"]
            if "cu_seqlens_q" in arrays:
                spec.update(cu_seqlens_q=arrays["cu_seqlens_q"], cu_seqlens_k=arrays["cu_seqlens_k"])
            out.append((name, f.name, spec, arrays["q"], arrays["k"], arrays["v"], vals, idx, z[f"{name}.lse"]))
    return out


def golden_options(spec: dict) -> dict:
    """The keyword arguments FA4 ran a golden case with, for ``check``.

    Parameters
    ----------
    spec : dict
        A case's spec from golden_cases.

    Returns
    -------
    dict
        softmax_scale and causal, plus softcap, window_size, learnable_sink, cu_seqlens_q/k where the case has them.

    Examples
    --------
    >>> golden_options({"softmax_scale": None, "causal": True, "softcap": 30.0, "window_size": [16, 0]})
    {'softmax_scale': None, 'causal': True, 'softcap': 30.0, 'window_size': (16, 0)}
    """
    opts = {"softmax_scale": spec.get("softmax_scale"), "causal": spec["causal"]}
    if spec.get("softcap"):
        opts["softcap"] = spec["softcap"]
    if spec.get("window_size") is not None:
        opts["window_size"] = tuple(spec["window_size"])
    for key in ("learnable_sink", "cu_seqlens_q", "cu_seqlens_k"):
        if spec.get(key) is not None:
            opts[key] = spec[key]
    return opts


def golden_checks(directory=None, *, delta=None) -> list[BoundCheck]:
    """BoundCheck of ``kernel="fa4-sm90"`` for every modelled H200 golden case (GPU values only).

    Computes attention_error_bound for each of the ~90 cases: minutes on 2 cores (``fa4num bounds validate``).

    Parameters
    ----------
    directory : str or Path, optional
        A folder of golden .npz files (default: GOLDEN_DIR).
    delta : float, optional
        Also check the probabilistic variant with this failure probability (attention_error_bound's delta).

    Returns
    -------
    list of BoundCheck, in golden_cases' order

    Examples
    --------
    >>> import tempfile
    >>> golden_checks(tempfile.mkdtemp())      # no golden files there: nothing to check
    []
    """
    res = []
    for name, _f, spec, q, k, v, vals, idx, lse in golden_cases(directory):
        res.append(check(q, k, v, vals, lse, name=name, source="h200", idx=idx, kernel="fa4-sm90", delta=delta,
                         **golden_options(spec)))
    return res
