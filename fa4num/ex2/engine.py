"""Sweeps of an exp2 implementation against the correctly rounded 2^x: all 2^32 fp32 inputs, a range, or a grid.

One fused numba pass per chunk of inputs (``_sweep_chunk``) runs five stages on each input and keeps nothing of
the chunk's size:

1. input: a bit pattern or grid point made from its index (:class:`SweepMode` BITS, GRID), or given (GIVEN);
2. output: FA4's emulation inlined (:class:`Fused`), or given by an implementation's array function (such as
   fa4num.hw.mufu_ex2) run on the chunk first;
3. reference: the correctly rounded fp32 and bf16 2^x, :func:`fa4num.fp.reference.exp2_cr_f32_bf16` (one libm
   call, the rounding lives there); what it cannot settle in numba goes to fa4num.fp.exp2_cr (gmpy2);
4. comparison: ulp distance, relative error, the bf16 cast (cvt.rn.bf16.f32, as FA4 converts P), NaN mismatch;
5. accumulation into one :class:`Stats` row per kernel block: a :data:`TALLY` record for the chunk, for the
   binade of x and for the x bin (kept in registers while consecutive inputs share the bin) and the histogram
   (exact counts below 4096 ulp, then one bin per power of two); :meth:`Stats.merge` folds blocks into totals.

Examples
--------
>>> r = sweep(fa4_implementation(3), Domain(lo=-1.0, hi=-0.99), progress=False)
>>> r.count, r.max_ulp, r.bf16_mismatch_far
(167773, 158, 0)
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from enum import IntEnum
from typing import NamedTuple

import numpy as np
from numba import njit, prange

from fa4num import polys
from fa4num.fp import scalar
from fa4num.fp.convert import f32_to_bf16_bits
from fa4num.fp.reference import exp2_cr, exp2_cr_f32_bf16

from .emulate import exact_steps, fast_steps, fa4_emulated, horner_tuple, poly_coeffs, resolve_variant

__all__ = ["Domain", "Implementation", "SweepMode", "SweepResult", "Stats", "sweep", "fa4_implementation",
           "mufu_implementation", "LINEAR_BINS", "LOG_BINS", "TALLY"]

LINEAR_BINS = 4096           # histogram: exact counts of ulp distances 0 .. 4095
LOG_BINS = 21                # then [2^12, 2^13), ..., [2^32, 2^33) (2^32 cannot occur: NaNs are counted apart)
_NH = LINEAR_BINS + LOG_BINS
_NBINADE = 512               # (sign, biased exponent) of x: bits >> 23
_PENDING_CAP = 1 << 12       # per block: inputs whose reference needs gmpy2 (about 1 in 4 million)
_MIN_NORMAL = 2.0 ** -126
_NO_ARRAY = np.zeros(0, np.float32)
_NO_POLY = np.ones(1, np.float32)

# The statistics of a set of inputs: the same record for the whole chunk, each binade of x and each x bin.
# Maxima start at -1 (below any ulp distance or error; max_rel stays -1 where no relative error is defined).
TALLY = np.dtype([("count", np.int64), ("exact", np.int64), ("bf16", np.int64), ("bf16_far", np.int64),
                  ("nan", np.int64), ("max_ulp", np.int64), ("sum_ulp", np.float64), ("max_rel", np.float64)])
_MAXIMA = ("max_ulp", "max_rel")
# the whole chunk also keeps where its maxima occur (fp32 bits of x, -1: nowhere) and how many inputs the numba
# reference could not settle (handed to gmpy2)
_TOTAL = np.dtype(TALLY.descr + [("max_ulp_bits", np.int64), ("max_rel_bits", np.int64),
                                 ("unsettled", np.int64)])
_EMPTY_RUN = (0, 0, 0, 0, 0, -1, 0.0, -1.0)   # a TALLY record as a tuple of locals (the kernel's registers)


# --- stage 1: inputs ------------------------------------------------------------------------------------------
class SweepMode(IntEnum):
    """Where a chunk's inputs and outputs come from.

    BITS: inputs are bit patterns start + i*stride (mod 2^32), FA4's emulation inlined for the outputs;
    GRID: inputs (start + i) * scale, FA4's emulation inlined; GIVEN: inputs and outputs given as arrays (an
    implementation run outside the kernel); GIVEN_WITH_REFERENCE: the references given too (inputs the numba
    references could not settle, settled by fa4num.fp.exp2_cr)."""
    BITS = 0
    GRID = 1
    GIVEN = 2
    GIVEN_WITH_REFERENCE = 3


class Source(NamedTuple):
    """One chunk's inputs: made in the kernel (BITS, GRID: from start, stride, scale) or given (xs, ys, and for
    GIVEN_WITH_REFERENCE the correctly rounded fp32 and bf16 references r32s, rbs)."""
    mode: SweepMode
    n: int
    start: int = 0
    stride: int = 1
    scale: float = 0.0
    xs: np.ndarray = _NO_ARRAY
    ys: np.ndarray = _NO_ARRAY
    r32s: np.ndarray = _NO_ARRAY
    rbs: np.ndarray = _NO_ARRAY


class Fused(NamedTuple):
    """FA4's emulation inlined in the kernel: the reversed coefficients (a float32 array, so that one compiled
    kernel serves every degree) and the variant's ftz flags (fa4num.ex2.emulate.fast_steps)."""
    rc: np.ndarray
    ftz_max: bool
    ftz_round: bool
    ftz_arith: bool


_NOT_FUSED = Fused(_NO_POLY, False, False, False)


class XBins(NamedTuple):
    """Bins linear in x for the error-vs-x table: bin floor((x - lo) * scale) of n (n = 0: none)."""
    lo: float = 0.0
    scale: float = 0.0
    n: int = 0


@njit(cache=True, inline="always")
def _input(mode, start, stride, scale, i):
    """Input i of a chunk: SweepMode.BITS = bit pattern start + i*stride (mod 2^32); GRID = (start + i) * scale."""
    if mode == SweepMode.BITS:
        return scalar.u32_to_f32(np.uint32((start + i * stride) & 0xFFFFFFFF))
    return np.float32(np.float64(start + i) * scale)


# --- stage 2: outputs (FA4's emulation: fast path, exact fa4num.fp.scalar sequence where it does not apply) ----
@njit(cache=True, inline="always")
def _fa4(x, rc, ftz_max, ftz_round, ftz_arith):
    y, bad = fast_steps(x, rc, ftz_max, ftz_round, ftz_arith, True)
    if bad:
        y = exact_steps(x, rc, ftz_max, ftz_round, ftz_arith)
    return y


# --- stage 3: reference (fa4num.fp.reference.exp2_cr_f32_bf16) -- stage 4: comparison ---------------------------
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


# --- stage 5: accumulation ----------------------------------------------------------------------------------
@njit(cache=True, inline="always")
def _step(run, nan_mis, d, rel, bf, far):
    """A TALLY run (tuple of locals) after one more input."""
    count, exact, nbf, nfar, nnan, maxd, sumd, maxrel = run
    if nan_mis:
        return count + 1, exact, nbf + 1, nfar + 1, nnan + 1, maxd, sumd, maxrel
    return (count + 1, exact + (d == 0), nbf + bf, nfar + far, nnan, max(maxd, d), sumd + d,
            max(maxrel, rel))


@njit(cache=True, inline="always")
def _flush(rec, run):
    """Add a run of inputs (kept in registers while consecutive inputs share the bin) to a TALLY record."""
    count, exact, nbf, nfar, nnan, maxd, sumd, maxrel = run
    rec.count += count
    rec.exact += exact
    rec.bf16 += nbf
    rec.bf16_far += nfar
    rec.nan += nnan
    rec.max_ulp = max(rec.max_ulp, maxd)
    rec.sum_ulp += sumd
    rec.max_rel = max(rec.max_rel, maxrel)


@njit(parallel=True, cache=True)
def _sweep_chunk(src, fused, xbins, stats, pending):
    """Accumulate the statistics of the ``src.n`` inputs of a :class:`Source` into one row per block of
    ``stats`` (a :class:`Stats` with one leading row per block); the inputs whose reference the numba kernels
    cannot settle go to ``pending`` (one row per block), counted in ``stats.total.unsettled``.

    Per input: input (stage 1), output (2: FA4's emulation ``fused``, or given), correctly rounded references (3),
    comparison (4), accumulation into the chunk's, the binade's and the x bin's runs (5)."""
    # parfors take arrays and scalars, not tuples: unpack before the parallel loop
    mode, n, start, stride, scale, xs, ys, r32s, rbs = src
    rc, ftz_max, ftz_round, ftz_arith = fused
    xlo, xscale, nxb = xbins
    total, binade, xbin, hist = stats
    nblk = total.shape[0]
    per = (n + nblk - 1) // nblk
    for blk in prange(nblk):
        run_t = run_b = run_x = _EMPTY_RUN
        cur_b = cur_x = -1
        max_ulp_bits = max_rel_bits = np.int64(-1)
        npend = 0
        for i in range(blk * per, min(n, (blk + 1) * per)):
            if mode >= SweepMode.GIVEN:
                x = xs[i]
                y = ys[i]
            else:
                x = _input(mode, start, stride, scale, i)
                y = _fa4(x, rc, ftz_max, ftz_round, ftz_arith)
            if mode == SweepMode.GIVEN_WITH_REFERENCE:
                r32, rb, y64, ok = r32s[i], rbs[i], math.exp2(np.float64(x)), True
            else:
                r32, rb, y64, ok = exp2_cr_f32_bf16(x)
            xbits = scalar.f32_to_u32(x)
            if not ok:
                if npend < pending.shape[1]:
                    pending[blk, npend] = xbits
                npend += 1
                continue
            nan_mis, d, rel, bf, far = _compare(y, r32, rb, y64)
            bn = np.int64(xbits >> np.uint32(23))
            if bn != cur_b:
                if cur_b >= 0:
                    _flush(binade[blk, cur_b], run_b)
                cur_b = bn
                run_b = _EMPTY_RUN
            xi = -1
            if nxb > 0 and x == x:
                t = (np.float64(x) - xlo) * xscale
                if t >= 0.0:
                    xi = min(np.int64(t), nxb - 1)
            if xi != cur_x:
                if cur_x >= 0:
                    _flush(xbin[blk, cur_x], run_x)
                cur_x = xi
                run_x = _EMPTY_RUN
            if not nan_mis:
                hist[blk, _hist_bin(d)] += 1
                if d > run_t[5]:      # strict: the first input where the maximum occurs
                    max_ulp_bits = np.int64(xbits)
                if rel > run_t[7]:
                    max_rel_bits = np.int64(xbits)
            run_t = _step(run_t, nan_mis, d, rel, bf, far)
            run_b = _step(run_b, nan_mis, d, rel, bf, far)
            if cur_x >= 0:    # outside every x bin (and with no x bins: the exhaustive sweep) there is no run
                run_x = _step(run_x, nan_mis, d, rel, bf, far)
        if cur_b >= 0:
            _flush(binade[blk, cur_b], run_b)
        if cur_x >= 0:
            _flush(xbin[blk, cur_x], run_x)
        _flush(total[blk], run_t)
        total[blk].max_ulp_bits = max_ulp_bits
        total[blk].max_rel_bits = max_rel_bits
        total[blk].unsettled = npend


@njit(parallel=True, cache=True)
def _make_inputs(mode, start, stride, scale, out):
    for i in prange(out.size):
        out[i] = _input(mode, start, stride, scale, i)


class Stats(NamedTuple):
    """The statistics of a sweep: over all inputs (``total``), per binade of x (``binade``: (sign, biased
    exponent) = bits >> 23), per x bin (``xbin``) and the ulp-distance histogram (``hist``: exact counts below
    :data:`LINEAR_BINS`, then :data:`LOG_BINS` bins per power of two).

    ``total``, ``binade`` and ``xbin`` are :data:`TALLY` record arrays (``total`` also has ``max_ulp_bits``,
    ``max_rel_bits``: the fp32 bits of the first x where the maximum occurs, -1 for none; and ``unsettled``).
    Every array has the same leading dimensions: one row per kernel block, or none for running totals.

    Examples
    --------
    >>> blocks, totals = Stats.zeros((4,), xbins=8), Stats.zeros((), xbins=8)
    >>> blocks.binade.shape, int(blocks.binade["max_ulp"].max()), int(totals.total["count"])
    ((4, 512), -1, 0)
    >>> blocks.total["count"][2] = 5
    >>> totals.merge(blocks); int(totals.total["count"])
    5
    """
    total: np.ndarray
    binade: np.ndarray
    xbin: np.ndarray
    hist: np.ndarray

    @classmethod
    def zeros(cls, lead: tuple = (), *, xbins: int = 0) -> Stats:
        """Empty statistics with leading dimensions ``lead`` and ``xbins`` x bins: counts and sums 0, maxima -1."""
        total = np.zeros(lead, _TOTAL)
        binade = np.zeros(lead + (_NBINADE,), TALLY)
        xbin = np.zeros(lead + (max(xbins, 1),), TALLY)
        for t in (total, binade, xbin):
            for name in _MAXIMA:
                t[name] = -1
        total["max_ulp_bits"] = total["max_rel_bits"] = -1
        return cls(total, binade, xbin, np.zeros(lead + (_NH,), np.int64))

    def merge(self, blocks: Stats) -> None:
        """Add ``blocks`` (one more leading dimension than self: rows in input order) into self, in place; where a
        maximum occurs is kept from the first row that reaches it."""
        t, bt = self.total, blocks.total
        best_ulp, best_rel = int(t["max_ulp"]), float(t["max_rel"])
        for row in bt:
            if row["max_ulp"] > best_ulp:
                best_ulp, t["max_ulp_bits"] = int(row["max_ulp"]), row["max_ulp_bits"]
            if row["max_rel"] > best_rel:
                best_rel, t["max_rel_bits"] = float(row["max_rel"]), row["max_rel_bits"]
        for mine, theirs in ((t, bt), (self.binade, blocks.binade), (self.xbin, blocks.xbin)):
            for name in TALLY.names + ("unsettled",) * (mine is t):
                if name in _MAXIMA:
                    mine[name] = np.maximum(mine[name], theirs[name].max(axis=0))
                else:
                    mine[name] += theirs[name].sum(axis=0)
        self.hist[...] += blocks.hist.sum(axis=0)

    def arrays(self) -> dict:
        """{name: array}, the arrays of these statistics by field name (to save and restore them)."""
        return dict(self._asdict())


# --- what is swept, and with what ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Implementation:
    """An exp2 implementation to sweep: FA4's emulation (fused into the sweep kernel) or any array function."""
    name: str
    params: dict
    array_fn: object = field(repr=False, compare=False)   # float32 array -> float32 array
    fused: Fused | None = field(default=None, repr=False, compare=False)   # FA4's emulation inlined in the kernel


def fa4_implementation(degree=3, *, coeffs=None, variant="packed") -> Implementation:
    """FA4's software exp2 (fa4num.ex2.fa4_emulated) with these arguments, checked as fa4_emulated checks them.

    Parameters
    ----------
    degree : int
        Polynomial degree (FA4's ``POLY_EX2`` has 1 to 5); ignored when ``coeffs`` gives the coefficients.
    coeffs : str, sequence of float or fa4num.polys.PolySet, optional
        Anything fa4num.polys.resolve takes (a set name, "c0,c1,...", fp32 numbers); default FA4's own.
    variant : {"packed", "scalar", "asm"}
        FA4's form (``ex2_emulation_2``, ``ex2_emulation``, ``e2e_asm2``).

    Returns
    -------
    Implementation
        Its ``fused`` part runs inside the sweep kernel; ``array_fn`` is fa4_emulated with these arguments.

    Examples
    --------
    >>> impl = fa4_implementation(3, variant="scalar")
    >>> impl.name, impl.params["fa4_function"]
    ('fa4-scalar-deg3', 'ex2_emulation')
    """
    v = resolve_variant(variant)
    ps = None if coeffs is None else polys.resolve(coeffs)
    c = poly_coeffs(degree if ps is None else None, coeffs=ps)
    params = {"variant": variant, "fa4_function": v.fa4_function, "degree": len(c) - 1,
              "coeffs": [float(a) for a in c], "coeffs_hex": [f"{int(np.float32(a).view(np.uint32)):#010x}"
                                                              for a in c],
              "coeffs_source": "FA4 POLY_EX2" if ps is None else (ps.name or "user")}

    def run(x):
        return fa4_emulated(x, len(c) - 1, coeffs=c, variant=variant)
    # the name says whose coefficients run: FA4's own, a polys/ entry (its name), or others (their fp32 bits)
    if ps is None:
        name = f"fa4-{variant}-deg{len(c) - 1}"
    elif ps.name is not None:
        name = f"{ps.name}-{variant}"
    else:
        name = f"fa4-{variant}-{ps.key}"
    return Implementation(name, params, run,
                          Fused(np.array(horner_tuple(c, v), np.float32), v.ftz_max, v.ftz_round, v.ftz_arith))


def mufu_implementation(*, arch="sm90", ftz=True) -> Implementation:
    """The MUFU model fa4num.hw.mufu_ex2 (ex2.approx{.ftz}.f32, tables measured on a GPU).

    Parameters
    ----------
    arch : str
        The table set (fa4num.hw.available_archs); a ValueError names the ones there are.
    ftz : bool
        ``ex2.approx.ftz.f32`` (FA4's form) or ``ex2.approx.f32``.

    Returns
    -------
    Implementation
        An array function: the sweep runs it on each chunk before the kernel compares.

    Examples
    --------
    >>> r = sweep(mufu_implementation(arch="sm90"), Domain(lo=-1.0, hi=-0.99), progress=False)
    >>> r.implementation, r.count, r.max_ulp
    ('mufu-ex2-sm90-ftz', 167773, 1)
    """
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
            return [(SweepMode.GRID, k0, 1, scale, max(0, k1 - k0 + 1))]
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
        if self.nans and self.lo == -math.inf and self.hi == math.inf:   # [inf, inf] is one value, not all
            out += [(0x7F800001, 0x7FFFFFFF), (0xFF800001, 0xFFFFFFFF)]
        s = self.stride
        return [(SweepMode.BITS, b0, s, 0.0, (b1 - b0) // s + 1) for b0, b1 in out]

    def describe(self) -> str:
        if self.kind == "grid":
            return f"x = k*2^-{self.grid_bits} in [{self.lo:g}, {self.hi:g}]"
        what = "all fp32" if self.stride == 1 else f"every {self.stride}th fp32 bit pattern"
        if self.lo == -math.inf and self.hi == math.inf:
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


def _settle_pending(impl: Implementation, blocks: Stats, pending: np.ndarray, totals: Stats, xbins: XBins):
    """Inputs the numba reference could not settle: reference from fa4num.fp.exp2_cr (gmpy2), then accumulate."""
    npend = blocks.total["unsettled"].copy()
    if not npend.any():
        return
    if (npend > _PENDING_CAP).any():
        raise RuntimeError(f"more than {_PENDING_CAP} unsettled reference values in one block; the hard-case "
                           "table of fa4num.fp.reference is missing or does not match this libm")
    xs = np.concatenate([pending[b, :k] for b, k in enumerate(npend)]).view(np.float32)
    ys = np.ascontiguousarray(impl.array_fn(xs), dtype=np.float32)
    r32 = np.ascontiguousarray(exp2_cr(xs, "float32"))
    rb = (np.asarray(exp2_cr(xs, "bfloat16")).view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
    settle = Stats.zeros(blocks.total.shape, xbins=xbins.n)
    _sweep_chunk(Source(SweepMode.GIVEN_WITH_REFERENCE, xs.size, xs=xs, ys=ys, r32s=r32, rbs=rb), _NOT_FUSED,
                 xbins, settle, pending)
    totals.merge(settle)


def _chunks(domain: Domain, chunk: int):
    """(chunk id, mode, first input, stride, scale, count) of each chunk of at most ``chunk`` inputs, in order."""
    for i_iv, (mode, start, stride, scale, count) in enumerate(domain.intervals()):
        for off in range(0, count, chunk):
            first = start + off * (stride if mode == SweepMode.BITS else 1)
            yield (i_iv, off), mode, first, stride, scale, min(chunk, count - off)


def _run_chunk(impl: Implementation, mode, first, stride, scale, n, xbins: XBins, blocks: Stats, pending):
    """One chunk into ``blocks`` (zeroed by the caller): FA4's emulation inside the kernel, or the implementation's
    array function on the chunk's inputs first."""
    if impl.fused is not None:
        src = Source(mode, n, first, stride, scale)
        _sweep_chunk(src, impl.fused, xbins, blocks, pending)
        return
    xs = np.empty(n, np.float32)
    _make_inputs(mode, first, stride, scale, xs)
    ys = np.ascontiguousarray(impl.array_fn(xs), dtype=np.float32)
    _sweep_chunk(Source(SweepMode.GIVEN, n, xs=xs, ys=ys), _NOT_FUSED, xbins, blocks, pending)


def sweep(impl: Implementation | None = None, domain: Domain | None = None, *, chunk: int = 1 << 24,
          xbins: int = 512, progress: bool = True, checkpoint=None) -> SweepResult:
    """Run ``impl`` (default: FA4's cubic, packed form) over ``domain`` (default: all 2^32 fp32 inputs).

    Parameters
    ----------
    impl : Implementation, optional
        What to sweep: :func:`fa4_implementation` (FA4's emulation, inlined in the kernel),
        :func:`mufu_implementation`, or any :class:`Implementation` with an array function.
    domain : Domain, optional
        The inputs; default all 2^32 fp32 bit patterns.
    chunk : int
        Inputs per fused pass (memory stays O(blocks x bins), not O(chunk)).
    xbins : int
        Bins linear in x for the error-vs-x table, used when the domain has finite lo and hi (0 to skip).
    progress : bool
        Show a tqdm progress bar.
    checkpoint : fa4num.ex2.checkpoint.SweepCheckpoint, optional
        Keeps finished chunks, so that an interrupted sweep resumes.

    Returns
    -------
    SweepResult
        Counts, maxima (and where), histograms, per-binade and per-x-bin tables, seconds, provenance.

    Examples
    --------
    >>> r = sweep(domain=Domain(lo=-0.25, hi=-0.24), progress=False)   # FA4's packed cubic
    >>> r.count, r.exact == r.ulp_hist_linear[0], r.nan_mismatch
    (671090, True, 0)
    """
    from numba import get_num_threads
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
    bins = XBins(float(domain.lo), xbins / (domain.hi - domain.lo), xbins) if finite and xbins else XBins()
    nblk = 4 * get_num_threads()
    pending = np.zeros((nblk, _PENDING_CAP), np.uint32)
    totals = Stats.zeros(xbins=bins.n)
    t0 = time.perf_counter()
    done = set()
    if checkpoint is not None:
        key = {"implementation": impl.name, "params": impl.params, "domain": asdict(domain), "chunk": chunk,
               "xbins": bins.n}
        done = checkpoint.start(key, totals)
    bar = tqdm(total=sum(iv[4] for iv in domain.intervals()), unit="x", unit_scale=True, disable=not progress,
               desc=impl.name)
    for chunk_id, mode, first, stride, scale, n in _chunks(domain, chunk):
        if chunk_id not in done:   # a chunk finished by an interrupted run is already in the totals
            blocks = Stats.zeros((nblk,), xbins=bins.n)
            _run_chunk(impl, mode, first, stride, scale, n, bins, blocks, pending)
            totals.merge(blocks)
            _settle_pending(impl, blocks, pending, totals, bins)
            if checkpoint is not None:
                checkpoint.save(chunk_id, totals, time.perf_counter() - t0)
        bar.update(n)
    bar.close()
    seconds = time.perf_counter() - t0 + (checkpoint.seconds_before if checkpoint is not None else 0.0)
    return _result(impl, domain, totals, bins.n, seconds, provenance)


def _result(impl, domain, tot: Stats, nxb, seconds, provenance) -> SweepResult:
    t = tot.total
    lin = tot.hist[:LINEAR_BINS]
    nz = np.flatnonzero(lin)
    lin = lin[: nz[-1] + 1] if nz.size else lin[:1]
    logh = {f"2^{12 + k}": int(c) for k, c in enumerate(tot.hist[LINEAR_BINS:]) if c}
    binades = []
    for bn in np.flatnonzero(tot.binade["count"]):
        sign, e = divmod(int(bn), 256)
        if e == 0:
            lo_mag, hi_mag = 0.0, 2.0 ** -126
        elif e == 255:   # +-inf and NaNs
            lo_mag, hi_mag = None, None
        else:
            lo_mag, hi_mag = 2.0 ** (e - 127), 2.0 ** (e - 126)
        b = tot.binade[bn]
        row = {"sign": "-" if sign else "+", "exponent_field": e,
               "x_from": None if e == 255 else (-hi_mag if sign else lo_mag),
               "x_to": None if e == 255 else (-lo_mag if sign else hi_mag),
               "count": int(b["count"]), "exact": int(b["exact"]), "max_ulp": int(b["max_ulp"]),
               "max_rel": float(b["max_rel"]) if b["max_rel"] >= 0 else None,
               "bf16_mismatch": int(b["bf16"]), "nan_mismatch": int(b["nan"])}
        binades.append(row)
    xb = None
    if nxb:
        x = tot.xbin
        finite_cnt = np.maximum(x["count"] - x["nan"], 1)
        xb = {"edges": np.linspace(domain.lo, domain.hi, nxb + 1).tolist(), "count": x["count"].tolist(),
              "max_ulp": x["max_ulp"].tolist(), "mean_ulp": (x["sum_ulp"] / finite_cnt).tolist(),
              "max_rel": x["max_rel"].tolist(), "bf16_mismatch": x["bf16"].tolist(),
              "nan_mismatch": x["nan"].tolist()}
    count, nan = int(t["count"]), int(t["nan"])
    where_ulp, where_rel = int(t["max_ulp_bits"]), int(t["max_rel_bits"])
    return SweepResult(
        implementation=impl.name, params=impl.params, domain=domain.describe(), count=count,
        exact=int(t["exact"]), max_ulp=max(int(t["max_ulp"]), 0),
        mean_ulp=float(t["sum_ulp"]) / max(count - nan, 1),
        max_ulp_x=_x_of(where_ulp) if where_ulp >= 0 else None,
        max_rel=max(float(t["max_rel"]), 0.0), max_rel_x=_x_of(where_rel) if where_rel >= 0 else None,
        bf16_mismatch=int(t["bf16"]), bf16_mismatch_far=int(t["bf16_far"]), nan_mismatch=nan,
        ulp_hist_linear=lin.tolist(), ulp_hist_log2=logh, binades=binades, xbins=xb, seconds=seconds,
        provenance=provenance(domain=asdict(domain), implementation=impl.name))
