"""Sweeps of an exp2 implementation against the correctly rounded 2^x: all 2^32 fp32 inputs, a range, or a grid.

One fused numba pass per chunk of inputs makes each input, runs the implementation (FA4's emulation inlined, or
the outputs of an array function such as fa4num.hw.mufu_ex2), computes the correctly rounded fp32 and bf16
references and accumulates every statistic, so nothing of the chunk's size is kept. Statistics: ulp-distance
histogram (exact counts below 4096 ulp, then one bin per power of two), the largest ulp and relative errors and
where they occur, how many results differ from the correctly rounded bf16 of 2^x after their own RN bf16 cast
(cvt.rn.bf16.f32, as FA4 converts P), NaN mismatches, and the same per binade of x and per bin of an x grid.

Reference: 2^x from libm's float64 exp2, rounded once to fp32 and to bf16 by fa4num.fp.reference.round_f64_fast
(the one rounding kernel; a midpoint within K_RUN ulp64 of the float64 value is a hard case); hard cases go to
fa4num.fp.reference.exp2_cr_f32/_bf16, and whatever those cannot settle in numba to fa4num.fp.exp2_cr (gmpy2).
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from enum import IntEnum

import numpy as np
from numba import njit, prange

from fa4num.fp import scalar
from fa4num.fp.convert import f32_to_bf16_bits
from fa4num.fp.reference import K_RUN, TARGETS, exp2_cr, exp2_cr_bf16, exp2_cr_f32, round_f64_fast

from .emulate import exact_steps, fast_steps, fa4_emulated, horner_tuple, poly_coeffs, resolve_variant

__all__ = ["Domain", "Implementation", "SweepMode", "SweepResult", "sweep", "fa4_implementation", "mufu_implementation",
           "LINEAR_BINS", "LOG_BINS"]

LINEAR_BINS = 4096           # histogram: exact counts of ulp distances 0 .. 4095
LOG_BINS = 21                # then [2^12, 2^13), ..., [2^32, 2^33) (2^32 cannot occur: NaNs are counted apart)
_NH = LINEAR_BINS + LOG_BINS
_NBINADE = 512               # (sign, biased exponent) of x: bits >> 23
_PENDING_CAP = 1 << 12       # per block: inputs whose reference needs gmpy2 (about 1 in 4 million)
# scalar slots of acc_i
_COUNT, _MAXD, _MAXD_BITS, _BF16, _BF16_FAR, _NAN, _PENDING, _MAXREL_BITS = range(8)
# per-binade int slots (bin_i) and per-x-bin int slots (xb_i); floats: bin_f = max rel; xb_f = (sum ulp, max rel)
_B_COUNT, _B_EXACT, _B_BF16, _B_NAN, _B_MAXD = range(5)
_X_COUNT, _X_MAXD, _X_BF16, _X_NAN = range(4)

_F32_PREC, _F32_QMIN = TARGETS["float32"]
_BF16_PREC, _BF16_QMIN = TARGETS["bfloat16"]
_MIN_NORMAL = 2.0 ** -126
_TINY = 2.0 ** -26        # |x| below this: 2^x rounds to 1 in fp32 and bf16
_LN2 = math.log(2.0)
_NO_ARRAY = np.zeros(0, np.float32)
_NO_POLY = np.ones(1, np.float32)


# --- reference: one libm exp2, rounded twice from float64 by integer arithmetic ---------------------------------
@njit(cache=True, inline="always")
def _round_once(y, prec, qmin):
    """y rounded once to the target (fa4num.fp.reference.round_f64_fast: the one integer rounding kernel with the
    midpoint test, hard = a midpoint within K_RUN ulp64 of y) as float32."""
    r, hard = round_f64_fast(y, prec, qmin, K_RUN)
    return np.float32(r), hard


@njit(cache=True, inline="always")
def _reference(x):
    """(fp32 2^x, bf16 2^x held in fp32, float64 2^x, settled): correctly rounded; settled is False when the
    numba kernels of fa4num.fp.reference cannot decide a hard case (then fa4num.fp.exp2_cr must)."""
    if x != x:
        nan = scalar.canonical_nan()
        return nan, nan, np.float64(np.nan), True
    if x >= np.float32(128.0):
        return np.float32(np.inf), np.float32(np.inf), np.inf, True
    if x < np.float32(_F32_QMIN - 2):   # 2^x below a quarter of the smallest subnormal (also -inf)
        return np.float32(0.0), np.float32(0.0), 0.0, True     # (no libm call: its underflow path is slow)
    if abs(x) < np.float32(_TINY):
        # 2^x is within 2|x| ln2 < 2^-26 of 1: both roundings give 1, far from any midpoint
        # (1 - 2^-25 for fp32); the float64 value is only used for relative errors
        return np.float32(1.0), np.float32(1.0), 1.0 + np.float64(x) * _LN2, True
    y = math.exp2(np.float64(x))
    r32, hard = _round_once(y, _F32_PREC, _F32_QMIN)
    ok = True
    if hard:
        r32, ok = exp2_cr_f32(x)
    if x < np.float32(_BF16_QMIN - 2):
        rb = np.float32(0.0)
    else:
        rb, hard = _round_once(y, _BF16_PREC, _BF16_QMIN)
        if hard:
            rb, ok_b = exp2_cr_bf16(x)
            ok = ok and ok_b
    return r32, rb, y, ok


# --- inputs -------------------------------------------------------------------------------------------------
class SweepMode(IntEnum):
    """Where a chunk's inputs and outputs come from (the ``mode`` argument of the sweep kernel).

    BITS: inputs are bit patterns start + i*stride (mod 2^32), FA4's emulation inlined for the outputs;
    GRID: inputs (start + i) * scale, FA4's emulation inlined; GIVEN: inputs and outputs given as arrays (an
    implementation run outside the kernel); GIVEN_WITH_REFERENCE: the references given too (inputs the numba
    references could not settle, settled by fa4num.fp.exp2_cr)."""
    BITS = 0
    GRID = 1
    GIVEN = 2
    GIVEN_WITH_REFERENCE = 3


# the kernels compare the int values (numba freezes these module globals as constants)
_BITS, _GIVEN, _GIVEN_REF = int(SweepMode.BITS), int(SweepMode.GIVEN), int(SweepMode.GIVEN_WITH_REFERENCE)


@njit(cache=True, inline="always")
def _input(mode, start, stride, scale, i):
    """Input i of a chunk: SweepMode.BITS = bit pattern start + i*stride (mod 2^32); GRID = (start + i) * scale."""
    if mode == _BITS:
        return scalar.u32_to_f32(np.uint32((start + i * stride) & 0xFFFFFFFF))
    return np.float32(np.float64(start + i) * scale)


@njit(cache=True, inline="always")
def _line(b):
    """Position of fp32 bits on the monotone integer line (fa4num.fp.ulp_distance's order)."""
    mag = np.int64(b & np.uint32(0x7FFFFFFF))
    return -mag if (b >> np.uint32(31)) != np.uint32(0) else mag


@njit(cache=True, inline="always")
def _line16(b):
    v = np.int64(b)
    mag = v & 0x7FFF
    return -mag if (v >> 15) != 0 else mag


@njit(cache=True, inline="always")
def _hist_bin(d):
    if d < LINEAR_BINS:
        return d
    k = np.int64(scalar.f64_to_u64(np.float64(d)) >> np.uint64(52)) - 1023   # floor(log2 d), d < 2^53
    return LINEAR_BINS + (k - 12)     # d in [2^k, 2^(k+1)), k >= 12


@njit(cache=True, inline="always")
def _compare(y, r32, rb, y64):
    """(NaN mismatch, ulp distance, relative error or -1, bf16 casts differ, ... by more than one bf16 ulp)."""
    y_nan = y != y
    r_nan = r32 != r32
    if y_nan or r_nan:
        if y_nan and r_nan:
            return False, np.int64(0), -1.0, False, False
        return True, np.int64(0), -1.0, True, True
    d = abs(_line(scalar.f32_to_u32(y)) - _line(scalar.f32_to_u32(r32)))
    rel = -1.0
    if abs(r32) >= _MIN_NORMAL and abs(r32) < np.inf and abs(y) < np.inf:
        rel = abs(np.float64(y) - y64) / y64
    yb = f32_to_bf16_bits(y)      # cvt.rn.bf16.f32
    rbb = np.uint16(scalar.f32_to_u32(rb) >> np.uint32(16))
    bf = yb != rbb
    return False, d, rel, bf, bf and abs(_line16(yb) - _line16(rbb)) > 1


@njit(cache=True, inline="always")
def _flush_binade(bin_i, bin_f, blk, b, cnt, exact, bf, nan, maxd, maxrel):
    """Add one run of inputs of binade ``b`` (kept in registers while consecutive) to block ``blk``'s table."""
    bin_i[blk, b, _B_COUNT] += cnt
    bin_i[blk, b, _B_EXACT] += exact
    bin_i[blk, b, _B_BF16] += bf
    bin_i[blk, b, _B_NAN] += nan
    bin_i[blk, b, _B_MAXD] = max(bin_i[blk, b, _B_MAXD], maxd)
    bin_f[blk, b] = max(bin_f[blk, b], maxrel)


@njit(cache=True, inline="always")
def _flush_xbin(xb_i, xb_f, blk, xi, cnt, bf, nan, maxd, sumd, maxrel):
    """Add one run of inputs of x-bin ``xi`` to block ``blk``'s error-vs-x table."""
    xb_i[blk, xi, _X_COUNT] += cnt
    xb_i[blk, xi, _X_BF16] += bf
    xb_i[blk, xi, _X_NAN] += nan
    xb_i[blk, xi, _X_MAXD] = max(xb_i[blk, xi, _X_MAXD], maxd)
    xb_f[blk, xi, 0] += sumd
    xb_f[blk, xi, 1] = max(xb_f[blk, xi, 1], maxrel)


@njit(parallel=True, cache=True)
def _sweep_chunk(mode, start, stride, scale, n, xs, ys, r32s, rbs, rc, ftz_max, ftz_round, ftz_arith,
                 xlo, xscale, nxb, acc_i, acc_f, hist, bin_i, bin_f, xb_i, xb_f, pending):
    """Accumulate the statistics of n inputs into one row per block of the accumulator arrays.

    mode (a SweepMode value) BITS/GRID: inputs made by _input, outputs by FA4's emulation inlined (fast path, exact
    fa4num.fp.scalar sequence where the fast path does not apply); GIVEN: inputs xs with outputs ys;
    GIVEN_WITH_REFERENCE: also the references r32s, rbs.
    Per-binade and per-x-bin statistics are kept in locals while consecutive inputs share the bin."""
    nblk = acc_i.shape[0]
    per = (n + nblk - 1) // nblk
    for blk in prange(nblk):
        count = 0
        maxd = np.int64(-1)
        maxd_bits = np.int64(0)
        maxrel = -1.0
        maxrel_bits = np.int64(0)
        nbf = 0
        nbf_far = 0
        nnan = 0
        npend = 0
        sumd = 0.0
        cur_b = -1
        b_cnt = b_exact = b_bf = b_nan = 0
        b_maxd = np.int64(-1)
        b_maxrel = -1.0
        cur_x = -1
        x_cnt = x_bf = x_nan = 0
        x_maxd = np.int64(-1)
        x_sumd = 0.0
        x_maxrel = -1.0
        for i in range(blk * per, min(n, (blk + 1) * per)):
            if mode >= _GIVEN:
                x = xs[i]
                y = ys[i]
            else:
                x = _input(mode, start, stride, scale, i)
                y, bad = fast_steps(x, rc, ftz_max, ftz_round, ftz_arith, True)
                if bad:
                    y = exact_steps(x, rc, ftz_max, ftz_round, ftz_arith)
            if mode == _GIVEN_REF:
                r32, rb, y64, ok = r32s[i], rbs[i], math.exp2(np.float64(x)), True
            else:
                r32, rb, y64, ok = _reference(x)
            xbits = scalar.f32_to_u32(x)
            if not ok:
                if npend < pending.shape[1]:
                    pending[blk, npend] = xbits
                npend += 1
                continue
            nan_mis, d, rel, bf, bf_far = _compare(y, r32, rb, y64)
            bn = np.int64(xbits >> np.uint32(23))
            if bn != cur_b:
                if cur_b >= 0:
                    _flush_binade(bin_i, bin_f, blk, cur_b, b_cnt, b_exact, b_bf, b_nan, b_maxd, b_maxrel)
                cur_b = bn
                b_cnt = b_exact = b_bf = b_nan = 0
                b_maxd = np.int64(-1)
                b_maxrel = -1.0
            xi = -1
            if nxb > 0 and x == x:
                t = (np.float64(x) - xlo) * xscale
                if t >= 0.0:
                    xi = min(np.int64(t), nxb - 1)
            if xi != cur_x:
                if cur_x >= 0:
                    _flush_xbin(xb_i, xb_f, blk, cur_x, x_cnt, x_bf, x_nan, x_maxd, x_sumd, x_maxrel)
                cur_x = xi
                x_cnt = x_bf = x_nan = 0
                x_maxd = np.int64(-1)
                x_sumd = 0.0
                x_maxrel = -1.0
            count += 1
            b_cnt += 1
            x_cnt += 1
            if nan_mis:
                nnan += 1
                nbf += 1
                nbf_far += 1
                b_nan += 1
                b_bf += 1
                x_nan += 1
                x_bf += 1
                continue
            hist[blk, _hist_bin(d)] += 1
            if d == 0:
                b_exact += 1
            if d > maxd:
                maxd = d
                maxd_bits = np.int64(xbits)
            b_maxd = max(b_maxd, d)
            x_maxd = max(x_maxd, d)
            x_sumd += d
            sumd += d
            if rel > maxrel:
                maxrel = rel
                maxrel_bits = np.int64(xbits)
            b_maxrel = max(b_maxrel, rel)
            x_maxrel = max(x_maxrel, rel)
            if bf:
                nbf += 1
                b_bf += 1
                x_bf += 1
                if bf_far:
                    nbf_far += 1
        if cur_b >= 0:
            _flush_binade(bin_i, bin_f, blk, cur_b, b_cnt, b_exact, b_bf, b_nan, b_maxd, b_maxrel)
        if cur_x >= 0:
            _flush_xbin(xb_i, xb_f, blk, cur_x, x_cnt, x_bf, x_nan, x_maxd, x_sumd, x_maxrel)
        acc_i[blk, _COUNT] = count
        acc_i[blk, _MAXD] = maxd
        acc_i[blk, _MAXD_BITS] = maxd_bits
        acc_i[blk, _BF16] = nbf
        acc_i[blk, _BF16_FAR] = nbf_far
        acc_i[blk, _NAN] = nnan
        acc_i[blk, _PENDING] = npend
        acc_i[blk, _MAXREL_BITS] = maxrel_bits
        acc_f[blk, 0] = maxrel
        acc_f[blk, 1] = sumd


@njit(parallel=True, cache=True)
def _make_inputs(mode, start, stride, scale, out):
    for i in prange(out.size):
        out[i] = _input(mode, start, stride, scale, i)


# --- what is swept, and with what ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Implementation:
    """An exp2 implementation to sweep: FA4's emulation (fused into the sweep kernel) or any array function."""
    name: str
    params: dict
    array_fn: object = field(repr=False, compare=False)   # float32 array -> float32 array
    # FA4 emulation inlined in the sweep kernel: (reversed coefficients as a float32 array, so that one compiled
    # kernel serves every degree; ftz_max, ftz_round, ftz_arith)
    fused: tuple | None = field(default=None, repr=False, compare=False)


def fa4_implementation(degree=3, *, coeffs=None, variant="packed") -> Implementation:
    """FA4's software exp2 (fa4num.ex2.fa4_emulated) with these arguments, checked as fa4_emulated checks them."""
    v = resolve_variant(variant)
    c = poly_coeffs(degree, coeffs=coeffs)
    params = {"variant": variant, "fa4_function": v.fa4_function, "degree": len(c) - 1,
              "coeffs": [float(a) for a in c], "coeffs_hex": [f"{int(np.float32(a).view(np.uint32)):#010x}"
                                                              for a in c],
              "coeffs_source": "FA4 POLY_EX2" if coeffs is None else (coeffs if isinstance(coeffs, str)
                                                                        else "user")}

    def run(x):
        return fa4_emulated(x, len(c) - 1, coeffs=c, variant=variant)
    # the name says whose coefficients run: FA4's own, a polys/ entry (its name), or a user tuple
    if coeffs is None:
        name = f"fa4-{variant}-deg{len(c) - 1}"
    elif isinstance(coeffs, str):
        name = f"{coeffs}-{variant}"
    else:
        name = f"custom-{variant}-deg{len(c) - 1}"
    return Implementation(name, params, run,
                          (np.array(horner_tuple(c, v), np.float32), v.ftz_max, v.ftz_round, v.ftz_arith))


def mufu_implementation(*, arch="sm90", ftz=True) -> Implementation:
    """The MUFU model fa4num.hw.mufu_ex2 (ex2.approx{.ftz}.f32, tables measured on a GPU)."""
    from fa4num.hw import mufu_ex2

    def run(x):
        return mufu_ex2(x, arch=arch, ftz=ftz)
    run(np.zeros(1, np.float32))   # fails here, with the model's own message, if arch has no tables
    return Implementation(f"mufu-ex2-{arch}{'-ftz' if ftz else ''}", {"arch": arch, "ftz": bool(ftz)}, run)


@dataclass(frozen=True)
class Domain:
    """The inputs of a sweep.

    kind "bits": every fp32 value x with lo <= x <= hi (NaNs too when ``nans``), or every ``stride``-th bit
    pattern of them; kind "grid": x = k * 2^-grid_bits for integers k with lo <= x <= hi (exact in fp32)."""
    kind: str = "bits"
    lo: float = -math.inf
    hi: float = math.inf
    nans: bool = True
    stride: int = 1
    grid_bits: int = 0

    def intervals(self):
        """[(mode, start, stride, scale, count)] covering the domain."""
        if self.kind == "grid":
            scale = 2.0 ** -self.grid_bits
            k0, k1 = math.ceil(self.lo / scale), math.floor(self.hi / scale)
            if max(abs(k0), abs(k1)) >= 1 << 24:
                raise ValueError(f"grid_bits={self.grid_bits} with lo={self.lo}, hi={self.hi} gives grid points "
                                 "that are not exact in fp32 (|k| must stay below 2^24)")
            return [(int(SweepMode.GRID), k0, 1, scale, max(0, k1 - k0 + 1))]
        out = []
        lo32, hi32 = np.float32(self.lo), np.float32(self.hi)
        if lo32 < 0:   # negative values from -0 (bits 0x80000000) down to lo, as increasing bit patterns
            top = np.float32(-0.0) if hi32 >= 0 else hi32
            b0 = int(np.array(top).view(np.uint32))
            b1 = int(np.array(lo32).view(np.uint32))
            out.append((b0, b1))
        if hi32 >= 0:
            bot = np.float32(0.0) if lo32 <= 0 else lo32
            out.append((int(np.array(bot).view(np.uint32)), int(np.array(hi32).view(np.uint32))))
        if self.nans and math.isinf(self.lo) and math.isinf(self.hi):
            out += [(0x7F800001, 0x7FFFFFFF), (0xFF800001, 0xFFFFFFFF)]
        s = self.stride
        return [(int(SweepMode.BITS), b0, s, 0.0, (b1 - b0) // s + 1) for b0, b1 in out]

    def describe(self) -> str:
        if self.kind == "grid":
            return f"x = k*2^-{self.grid_bits} in [{self.lo:g}, {self.hi:g}]"
        what = "all fp32" if self.stride == 1 else f"every {self.stride}th fp32 bit pattern"
        if math.isinf(self.lo) and math.isinf(self.hi):
            return what + (" inputs (2^32 bit patterns)" if self.nans and self.stride == 1 else " inputs")
        return f"{what} x in [{self.lo:g}, {self.hi:g}]"

    def check(self):
        if self.kind not in ("bits", "grid"):
            raise ValueError(f"kind must be 'bits' or 'grid', got {self.kind!r}")
        if not (self.lo <= self.hi):
            raise ValueError(f"lo must be <= hi, got lo={self.lo}, hi={self.hi}")
        if not isinstance(self.stride, int) or self.stride < 1:
            raise ValueError(f"stride must be a positive integer, got {self.stride!r}")
        if self.kind == "grid" and not (math.isfinite(self.lo) and math.isfinite(self.hi)):
            raise ValueError("a grid domain needs finite lo and hi")
        if not isinstance(self.grid_bits, int) or not 0 <= self.grid_bits <= 149:
            raise ValueError(f"grid_bits must be an integer in [0, 149], got {self.grid_bits!r}")


# --- results --------------------------------------------------------------------------------------------------
def _json_default(v):
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"cannot write {type(v).__name__} to JSON")


def _x_of(bits: int) -> float:
    return float(np.array(bits, dtype=np.uint32).view(np.float32))


@dataclass
class SweepResult:
    """Error statistics of an exp2 implementation against the correctly rounded 2^x over a Domain.

    ulp distances are positions apart on fp32's monotone integer line (fa4num.fp.ulp_distance); relative errors
    are against libm's float64 2^x, where the correctly rounded fp32 result is normal and the output finite."""
    implementation: str
    params: dict
    domain: str
    count: int
    exact: int                     # outputs equal to the correctly rounded fp32 2^x (NaN counts as equal to NaN)
    max_ulp: int
    max_ulp_x: float | None
    mean_ulp: float                # over inputs without a NaN mismatch
    max_rel: float
    max_rel_x: float | None
    bf16_mismatch: int             # RN bf16 of the output != correctly rounded bf16 of 2^x
    bf16_mismatch_far: int         # ... by more than one bf16 ulp
    nan_mismatch: int              # output NaN and 2^x not, or the reverse
    ulp_hist_linear: list          # counts of ulp distance 0, 1, ..., up to the last nonzero below 4096
    ulp_hist_log2: dict            # "2^k": count of distances in [2^k, 2^(k+1)), k >= 12
    binades: list                  # per (sign, exponent) of x: dicts, non-empty binades only
    xbins: dict | None             # per bin of x (linear in x) when the domain is finite
    seconds: float
    provenance: dict

    @property
    def bf16_mismatch_share(self) -> float:
        return self.bf16_mismatch / self.count if self.count else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["bf16_mismatch_share"] = self.bf16_mismatch_share
        return d

    def to_json(self, path) -> None:
        import json
        from pathlib import Path
        Path(path).write_text(json.dumps(self.to_dict(), indent=1, default=_json_default) + "\n")

    def summary(self) -> str:
        where = f" at x = {self.max_ulp_x!r}" if self.max_ulp_x is not None else ""
        rwhere = f" at x = {self.max_rel_x!r}" if self.max_rel_x is not None else ""
        return (f"{self.implementation} over {self.domain}: {self.count} inputs in {self.seconds:.1f} s; "
                f"{self.exact / max(self.count, 1):.4%} correctly rounded; max error {self.max_ulp} ulp{where}; "
                f"max rel. error {self.max_rel:.4g}{rwhere}; bf16 mismatch {self.bf16_mismatch_share:.4%} "
                f"({self.bf16_mismatch_far} by > 1 bf16 ulp); NaN mismatches {self.nan_mismatch}")


def _tables(lead: tuple, nxb: int) -> tuple:
    """Fresh per-bin tables (hist, bin_i, bin_f, xb_i, xb_f) with leading dimensions ``lead`` (one row per kernel
    block, or none for running totals): counts and sums 0, maxima -1 (below any ulp distance or error)."""
    hist = np.zeros(lead + (_NH,), np.int64)
    bin_i = np.zeros(lead + (_NBINADE, 5), np.int64)
    bin_i[..., _B_MAXD] = -1
    bin_f = np.full(lead + (_NBINADE,), -1.0)
    xb_i = np.zeros(lead + (max(nxb, 1), 4), np.int64)
    xb_i[..., _X_MAXD] = -1
    xb_f = np.zeros(lead + (max(nxb, 1), 2))
    xb_f[..., 1] = -1.0
    return hist, bin_i, bin_f, xb_i, xb_f


class _Accumulators:
    """One row per kernel block of every statistic of a chunk; :meth:`zero` before each chunk."""

    def __init__(self, nblk: int, nxb: int):
        self.nblk, self.nxb = nblk, nxb
        self.pending = np.zeros((nblk, _PENDING_CAP), np.uint32)
        self.zero()

    def zero(self):
        self.acc_i = np.zeros((self.nblk, 8), np.int64)
        self.acc_i[:, _MAXD] = -1
        self.acc_f = np.zeros((self.nblk, 2))   # max rel (-1: none yet), sum of ulp distances
        self.acc_f[:, 0] = -1.0
        self.hist, self.bin_i, self.bin_f, self.xb_i, self.xb_f = _tables((self.nblk,), self.nxb)

    def arrays(self):
        return self.acc_i, self.acc_f, self.hist, self.bin_i, self.bin_f, self.xb_i, self.xb_f


class _Totals:
    """Running totals over chunks; maxima keep the first input (in sweep order) where they occur."""
    def __init__(self, nxb):
        self.count = self.bf16 = self.bf16_far = self.nan = 0
        self.sumd = 0.0
        self.maxd, self.maxd_bits, self.maxrel, self.maxrel_bits = -1, None, -1.0, None
        self.hist, self.bin_i, self.bin_f, self.xb_i, self.xb_f = _tables((), nxb)

    def add(self, acc: _Accumulators):
        a = acc.acc_i
        self.count += int(a[:, _COUNT].sum())
        self.bf16 += int(a[:, _BF16].sum())
        self.bf16_far += int(a[:, _BF16_FAR].sum())
        self.nan += int(a[:, _NAN].sum())
        self.sumd += float(acc.acc_f[:, 1].sum())
        for blk in range(a.shape[0]):   # blocks are in input order: strict '>' keeps the first occurrence
            if a[blk, _MAXD] > self.maxd:
                self.maxd, self.maxd_bits = int(a[blk, _MAXD]), int(a[blk, _MAXD_BITS])
            if acc.acc_f[blk, 0] > self.maxrel:
                self.maxrel, self.maxrel_bits = float(acc.acc_f[blk, 0]), int(a[blk, _MAXREL_BITS])
        self.hist += acc.hist.sum(axis=0)
        for k in (_B_COUNT, _B_EXACT, _B_BF16, _B_NAN):
            self.bin_i[:, k] += acc.bin_i[:, :, k].sum(axis=0)
        self.bin_i[:, _B_MAXD] = np.maximum(self.bin_i[:, _B_MAXD], acc.bin_i[:, :, _B_MAXD].max(axis=0))
        self.bin_f = np.maximum(self.bin_f, acc.bin_f.max(axis=0))
        for k in (_X_COUNT, _X_BF16, _X_NAN):
            self.xb_i[:, k] += acc.xb_i[:, :, k].sum(axis=0)
        self.xb_i[:, _X_MAXD] = np.maximum(self.xb_i[:, _X_MAXD], acc.xb_i[:, :, _X_MAXD].max(axis=0))
        self.xb_f[:, 0] += acc.xb_f[:, :, 0].sum(axis=0)
        self.xb_f[:, 1] = np.maximum(self.xb_f[:, 1], acc.xb_f[:, :, 1].max(axis=0))


def _settle_pending(impl: Implementation, acc: _Accumulators, tot: _Totals, xlo, xscale, nxb):
    """Inputs the numba reference could not settle: reference from fa4num.fp.exp2_cr (gmpy2), then accumulate."""
    npend = acc.acc_i[:, _PENDING].copy()
    if not npend.any():
        return
    if (npend > _PENDING_CAP).any():
        raise RuntimeError(f"more than {_PENDING_CAP} unsettled reference values in one block; the hard-case "
                           "table of fa4num.fp.reference is missing or does not match this libm")
    xs = np.concatenate([acc.pending[b, :k] for b, k in enumerate(npend)]).view(np.float32)
    ys = np.ascontiguousarray(impl.array_fn(xs), dtype=np.float32)
    r32 = np.ascontiguousarray(exp2_cr(xs, "float32"))
    rb = (np.asarray(exp2_cr(xs, "bfloat16")).view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
    acc.zero()
    _sweep_chunk(_GIVEN_REF, 0, 1, 0.0, xs.size, xs, ys, r32, rb, _NO_POLY, False, False, False, xlo, xscale, nxb,
                 *acc.arrays(), acc.pending)
    tot.add(acc)


def sweep(impl: Implementation | None = None, domain: Domain | None = None, *, chunk: int = 1 << 24,
          xbins: int = 512, progress: bool = True, checkpoint=None) -> SweepResult:
    """Run ``impl`` (default: FA4's cubic, packed form) over ``domain`` (default: all 2^32 fp32 inputs).

    chunk: inputs per fused pass (memory stays O(blocks x bins), not O(chunk)). xbins: bins linear in x for the
    error-vs-x figure, used when the domain has finite lo and hi (0 to skip). checkpoint: a
    fa4num.ex2.checkpoint.SweepCheckpoint that keeps finished chunks, so that an interrupted sweep resumes."""
    from tqdm.auto import tqdm

    from fa4num.provenance import provenance
    impl = impl if impl is not None else fa4_implementation()
    domain = domain if domain is not None else Domain()
    domain.check()
    if not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive integer, got {chunk!r}")
    if not isinstance(xbins, int) or xbins < 0:
        raise ValueError(f"xbins must be a non-negative integer, got {xbins!r}")
    finite = math.isfinite(domain.lo) and math.isfinite(domain.hi) and domain.hi > domain.lo
    nxb = xbins if finite else 0
    xlo = float(domain.lo) if nxb else 0.0
    xscale = nxb / (domain.hi - domain.lo) if nxb else 0.0
    intervals = domain.intervals()
    total = sum(iv[4] for iv in intervals)
    from numba import get_num_threads
    nblk = 4 * get_num_threads()
    acc = _Accumulators(nblk, nxb)
    tot = _Totals(nxb)
    t0 = time.perf_counter()
    done = set()
    if checkpoint is not None:
        key = {"implementation": impl.name, "params": impl.params, "domain": asdict(domain), "chunk": chunk,
               "xbins": nxb}
        done = checkpoint.start(key, tot)
    bar = tqdm(total=total, unit="x", unit_scale=True, disable=not progress, desc=impl.name)
    for i_iv, (mode, start, stride, scale, count) in enumerate(intervals):
        for off in range(0, count, chunk):
            n = min(chunk, count - off)
            if (i_iv, off) in done:   # finished by an interrupted run: its totals are already in tot
                bar.update(n)
                continue
            first = start + off * (stride if mode == _BITS else 1)
            acc.zero()
            if impl.fused is not None:
                rc, fm, fr, fa = impl.fused
                _sweep_chunk(mode, first, stride, scale, n, _NO_ARRAY, _NO_ARRAY, _NO_ARRAY, _NO_ARRAY, rc, fm,
                             fr, fa, xlo, xscale, nxb, *acc.arrays(), acc.pending)
            else:
                xs = np.empty(n, np.float32)
                _make_inputs(mode, first, stride, scale, xs)
                ys = np.ascontiguousarray(impl.array_fn(xs), dtype=np.float32)
                _sweep_chunk(_GIVEN, 0, 1, 0.0, n, xs, ys, _NO_ARRAY, _NO_ARRAY, _NO_POLY, False, False, False, xlo,
                             xscale, nxb, *acc.arrays(), acc.pending)
            tot.add(acc)
            _settle_pending(impl, acc, tot, xlo, xscale, nxb)
            if checkpoint is not None:
                checkpoint.save((i_iv, off), tot, time.perf_counter() - t0)
            bar.update(n)
    bar.close()
    seconds = time.perf_counter() - t0 + (checkpoint.seconds_before if checkpoint is not None else 0.0)
    return _result(impl, domain, tot, nxb, seconds, provenance)


def _result(impl, domain, tot: _Totals, nxb, seconds, provenance) -> SweepResult:
    lin = tot.hist[:LINEAR_BINS]
    nz = np.flatnonzero(lin)
    lin = lin[: nz[-1] + 1] if nz.size else lin[:1]
    logh = {f"2^{12 + k}": int(c) for k, c in enumerate(tot.hist[LINEAR_BINS:]) if c}
    binades = []
    for bn in np.flatnonzero(tot.bin_i[:, _B_COUNT]):
        sign, e = divmod(int(bn), 256)
        if e == 0:
            lo_mag, hi_mag = 0.0, 2.0 ** -126
        elif e == 255:   # +-inf and NaNs
            lo_mag, hi_mag = None, None
        else:
            lo_mag, hi_mag = 2.0 ** (e - 127), 2.0 ** (e - 126)
        row = {"sign": "-" if sign else "+", "exponent_field": e,
               "x_from": None if e == 255 else (-hi_mag if sign else lo_mag),
               "x_to": None if e == 255 else (-lo_mag if sign else hi_mag),
               "count": int(tot.bin_i[bn, _B_COUNT]), "exact": int(tot.bin_i[bn, _B_EXACT]),
               "max_ulp": int(tot.bin_i[bn, _B_MAXD]),
               "max_rel": float(tot.bin_f[bn]) if tot.bin_f[bn] >= 0 else None,
               "bf16_mismatch": int(tot.bin_i[bn, _B_BF16]), "nan_mismatch": int(tot.bin_i[bn, _B_NAN])}
        binades.append(row)
    xb = None
    if nxb:
        cnt = tot.xb_i[:, _X_COUNT]
        finite_cnt = np.maximum(cnt - tot.xb_i[:, _X_NAN], 1)
        xb = {"edges": np.linspace(domain.lo, domain.hi, nxb + 1).tolist(), "count": cnt.tolist(),
              "max_ulp": tot.xb_i[:, _X_MAXD].tolist(), "mean_ulp": (tot.xb_f[:, 0] / finite_cnt).tolist(),
              "max_rel": tot.xb_f[:, 1].tolist(), "bf16_mismatch": tot.xb_i[:, _X_BF16].tolist(),
              "nan_mismatch": tot.xb_i[:, _X_NAN].tolist()}
    return SweepResult(
        implementation=impl.name, params=impl.params, domain=domain.describe(), count=tot.count,
        exact=int(tot.hist[0]), max_ulp=max(tot.maxd, 0),
        mean_ulp=tot.sumd / max(tot.count - tot.nan, 1),
        max_ulp_x=_x_of(tot.maxd_bits) if tot.maxd_bits is not None else None,
        max_rel=max(tot.maxrel, 0.0), max_rel_x=_x_of(tot.maxrel_bits) if tot.maxrel_bits is not None else None,
        bf16_mismatch=tot.bf16, bf16_mismatch_far=tot.bf16_far, nan_mismatch=tot.nan,
        ulp_hist_linear=lin.tolist(), ulp_hist_log2=logh, binades=binades, xbins=xb, seconds=seconds,
        provenance=provenance(domain=asdict(domain), implementation=impl.name))
