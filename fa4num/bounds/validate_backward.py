"""The backward bound against observed errors: FA4's SM90 backward captured on an H200 (tests/golden/attention/
fa4_sm90_bwd_{dev,holdout,sink,wide_window}_h200.npz) and the emulator (fa4num.attention.backward) on any inputs.

``check_backward(q, k, v, dout, ...)`` runs the bit-exact forward (for ``out`` and ``lse``, unless given), the
bit-exact backward, fp64 gradients (:func:`fa4num.attention.reference.backward_fp64`) and
:func:`attention_backward_error_bound`, and counts violations (|kernel - fp64| > bound) and the tightness (largest
finite bound / largest observed error) per gradient. ``backward_golden_checks(directory)`` does it for every H200 backward
golden case, after checking that the emulated gradients have the SHA-256 of the GPU's bits (so the kernel's own
gradients are the ones compared) and the given LSE is the GPU's.
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from fa4num.attention import KERNELS, backward, forward, golden as attention_golden, plan
from fa4num.attention.inputs import make_feature_inputs
from fa4num.attention.kernels import SM90
from fa4num.attention.masking import without_wide_sides
from fa4num.attention.reference import backward_fp64

from .backward import attention_backward_error_bound

# the kernel whose bits the H200 backward goldens hold (FA4's SM90 path, the one the H200 runs)
GOLDEN_KERNEL = SM90

__all__ = ["BackwardCheck", "check_backward", "backward_golden_checks", "BACKWARD_GOLDEN_FILES"]

# the captures live in a checkout's tests/golden/attention (not package data): callers name the folder
BACKWARD_GOLDEN_FILES = {tag: f"fa4_sm90_bwd_{tag}_h200.npz" for tag in ("dev", "holdout", "sink", "wide_window")}
_GRADS = ("dq", "dk", "dv")


@dataclass(frozen=True)
class BackwardCheck:
    """One case: per gradient (dq, dk, dv, dsink) violations, largest observed error, largest finite bound."""
    name: str
    kernel: str
    source: str                   # "h200" (the emulated bits equal the GPU's digests) or "emulator"
    violations: dict
    max_observed: dict
    max_bound: dict
    unbounded: dict               # elements with bound +inf
    bound_seconds: float
    backward_seconds: float
    bits_match: bool = True       # h200: the emulated dq, dk, dv have the GPU's SHA-256
    extra: dict = field(default_factory=dict)

    @property
    def tightness(self) -> float:
        """Largest over the gradients of (largest finite bound / largest observed error)."""
        r = [self.max_bound[n] / self.max_observed[n] for n in self.max_bound if self.max_observed[n] > 0]
        return max(r) if r else float("inf")

    @property
    def total_violations(self) -> int:
        return int(sum(self.violations.values()))

    def as_dict(self) -> dict:
        return {**asdict(self), "tightness": self.tightness}


def _sha(a) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).view(np.uint16).tobytes()).hexdigest()


def check_backward(q, k, v, dout, *, out=None, lse=None, name="case", source="emulator", digests=None,
                   **fa4_args) -> BackwardCheck:
    """Violations and tightness of :func:`attention_backward_error_bound` on one problem.

    Parameters
    ----------
    q, k, v, dout : arrays
        FA4's layouts (16-bit).
    out, lse : arrays, optional
        The forward's output and LSE (default: the bit-exact forward emulator's).
    name, source : str
        Labels of the result.
    digests : dict, optional
        SHA-256 of the kernel's dq, dk, dv bits (a golden record's): ``bits_match`` says whether the emulated
        gradients have them.
    **fa4_args
        FA4's arguments (softmax_scale, causal, kernel, window_size, softcap, learnable_sink, varlen, ...).

    Returns
    -------
    BackwardCheck

    Examples
    --------
    >>> import ml_dtypes
    >>> rng = np.random.default_rng(1)
    >>> q, k, v, do = (rng.standard_normal((1, 48, 1, 64)).astype(ml_dtypes.bfloat16) for _ in range(4))
    >>> check_backward(q, k, v, do, causal=True).total_violations
    0
    """
    if out is None or lse is None:
        fw = forward(q, k, v, **fa4_args)
        out = fw.out if out is None else out
        lse = fw.lse if lse is None else lse
    t0 = time.perf_counter()
    g = backward(q, k, v, out, dout, lse, **fa4_args)
    t1 = time.perf_counter()
    b = attention_backward_error_bound(q, k, v, out, dout, lse, **fa4_args)
    t2 = time.perf_counter()
    ex = backward_fp64(q, k, v, dout, **fa4_args)
    viol, obs, mb, unb = {}, {}, {}, {}
    pairs = [(n, getattr(g, n), getattr(ex, n), getattr(b, n)) for n in _GRADS]
    if b.dsink is not None:
        pairs.append(("dsink", g.dsink, ex.dsink, b.dsink))
    for n, got, want, bound in pairs:
        err = np.abs(np.asarray(got).astype(np.float64) - want)
        fin = np.isfinite(bound)
        viol[n] = int((err[fin] > bound[fin]).sum())
        obs[n] = float(err[fin].max(initial=0.0))
        mb[n] = float(bound[fin].max(initial=0.0))
        unb[n] = int((~fin).sum())
    match = True if digests is None else all(_sha(getattr(g, n)) == digests[n] for n in _GRADS)
    return BackwardCheck(name, b.kernel, source, viol, obs, mb, unb, t2 - t1, t1 - t0, match)


def _case_arrays(case):
    """make_feature_inputs, with v and dout cut to ``head_dim_v`` columns (experiments/gpu/fa4_bwd_preprocess.py)."""
    a = make_feature_inputs(case)
    dv = case.get("head_dim_v")
    if dv is not None:
        a["v"] = np.ascontiguousarray(a["v"][..., :dv])
        a["dout"] = np.ascontiguousarray(a["dout"][..., :dv])
    return a


def backward_golden_checks(directory, *, tags=None, kernel="fa4-sm90") -> list[BackwardCheck]:
    """BackwardCheck of every H200 backward golden case (the GPU's LSE, the forward emulator's ``out``, which has
    the GPU's digest; wide windows narrowed as FA4 treats them, fa4num.attention.masking.without_wide_sides).
    With ``kernel="fa4-sm100"`` the same inputs run through the SM100 emulator (source "emulator": no Blackwell
    capture exists), with the SM100 forward's own out and LSE; cases that kernel's backward refuses are left out.

    Parameters
    ----------
    directory : str or Path
        The folder of the captures (a checkout's tests/golden/attention); absent files are skipped.
    tags : iterable of str, optional
        Keys of :data:`BACKWARD_GOLDEN_FILES` (default all).
    kernel : str
        "fa4-sm90" (against the GPU) or another kernel of fa4num.attention.KERNELS (emulator).

    Returns
    -------
    list of BackwardCheck (names "tag/case")

    Examples
    --------
    >>> import tempfile
    >>> backward_golden_checks(tempfile.mkdtemp())      # no capture there: nothing to check
    []
    """
    res = []
    for tag in BACKWARD_GOLDEN_FILES if tags is None else tags:
        path = pathlib.Path(directory) / BACKWARD_GOLDEN_FILES[tag]
        if not path.exists():
            continue
        z = np.load(path)
        for rec in json.loads(str(z["meta"]))["cases"]:
            if "error" in rec:
                continue
            case = dict(rec["case"])
            if case.get("window_size") is not None:
                vl = case.get("varlen")
                sq, sk = (max(vl["seqlens_q"]), max(vl["seqlens_k"])) if vl else (case["seqlen_q"], case["seqlen_k"])
                case["window_size"] = list(without_wide_sides(tuple(case["window_size"]), seqlen_q=sq, seqlen_k=sk))
            a = _case_arrays(case)
            kw = attention_golden.feature_call(case, a)
            name = f"{tag}/{case['name']}"
            if KERNELS[kernel] is GOLDEN_KERNEL:
                fw = forward(a["q"], a["k"], a["v"], **kw)
                if _sha(fw.out) != rec["digests"]["out"]:
                    raise AssertionError(f"{name}: the forward emulator's out differs from the GPU's")
                res.append(check_backward(a["q"], a["k"], a["v"], a["dout"], out=fw.out, lse=z[f"{case['name']}.lse"],
                                          name=name, source="h200", digests=rec["digests"], **kw))
            else:
                try:        # what this kernel's backward refuses (e.g. SM100 head_dim 256) is not checked
                    KERNELS[kernel].backward_tile(plan(a["q"], a["k"], a["v"], kernel=kernel, **kw))
                except ValueError:
                    continue
                res.append(check_backward(a["q"], a["k"], a["v"], a["dout"], name=name, kernel=kernel, **kw))
    return res
