"""Bit-exact models of the MUFU (SFU) instructions ``ex2/rcp/lg2.approx{.ftz}.f32``, from tables measured on GPUs.

Structure (found on the H200, sm_90, and confirmed there over all 2^32 inputs; see experiments/gpu/):

- ``ex2.approx.ftz.f32``: the argument is cut to fixed point with 23 fractional bits, truncated toward zero
  (sign-magnitude): t = trunc(|x| 2^23) = k 2^23 + g. Then ex2 = ex2_pos[g] * 2^k for x >= 0 and
  ex2_neg[g] * 2^-k for x < 0 (the exponent field is shifted; the tables hold the results for g 2^-23 and
  -g 2^-23). Results below 2^-126 flush to +0, results from 2^128 on are +inf; NaN gives NaN.
- ``rcp.approx.ftz.f32``: rcp(m 2^e) = rcp[m] * 2^-e for the 23-bit mantissa m (the table holds rcp(1.m));
  subnormal inputs count as zero (-> signed inf), results below 2^-126 flush to signed zero.
- ``lg2.approx.ftz.f32``: a fixed-point sum e + F(m), converted to fp32 by truncation. For e >= 0 that is
  RZ(e + lg2_e0[m]) (the table is the output on [1, 2)). For e < 0 the hardware negates in one's complement,
  so the magnitude is RZ((|e| - 1) + H[m]) with H[m] = -lg2_e-1[m] (the output on [0.5, 1)); e.g.
  lg2(0.5) = -(1 - 2^-23). Computed here in exact 64-bit fixed point. x < 0 gives NaN, 0 and subnormals -inf.
- The non-ftz forms are what ptxas (Triton 3.6, CUDA 13; sm_90a) emits around the bare MUFU instruction, read
  off the SASS: ex2: if x < -126 (FSETP.GEU, so not for NaN) y = MUFU(x*0.5), result y*y (FMUL, RN, subnormals
  kept). rcp: s = 2^24 if |x| < 2^-126, 0.25 if |x| > 2^126, else 1; result MUFU(x*s)*s. lg2: if |x| < 2^-126,
  result MUFU(x*2^24) - 24 (FADD, RN). So they differ from the ftz forms only at the subnormal ends.
- Every NaN result is NVIDIA's canonical NaN, bits 0x7FFFFFFF.

Speed: a table is 2^23 entries (32 MB), and attention's exponent arguments index it at random, so a plain
lookup misses every cache. ``MufuTables.ex2_compact`` holds the two ex2 tables as linear interpolation between
every 2^11-th entry plus a 2-bit residual per entry (4 MB for both; the hardware stays within 2 ulp of 2^x, so the
residual from a straight line through its own samples spans at most 4 values). It is built from the measured
tables and checked against every entry; a table set whose residuals do not fit keeps the plain lookup.

Architecture differences are data: each arch has its own table file (fa4num/hw/data/mufu_<arch>.npz.xz,
written by ``fa4num mufu build`` on that GPU, which also checks this structure over all 2^32 inputs).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np
from numba import njit

from ..fp.arrays import as_float32
from ..fp.scalar import f32_to_u32 as _b32, u32_to_f32 as _f32
from . import tables as _tables

__all__ = ["MufuTables", "load_tables", "table_provenance", "mufu_ex2", "mufu_rcp", "mufu_lg2", "TABLE_NAMES",
           "ex2_ftz_bits", "rcp_ftz_bits", "lg2_ftz_bits", "ex2_bits", "rcp_bits", "lg2_bits",
           "canonical_nan_bits", "CompactEx2", "ex2_ftz_bits_compact", "ex2_bits_compact"]

CANONICAL_NAN = np.uint32(0x7FFFFFFF)
TABLE_NAMES = ("ex2_pos", "ex2_neg", "rcp", "lg2_e0", "lg2_e-1")


@dataclass(frozen=True)
class MufuTables:
    """One measured table set: ``arch``, the file it came from, the tables (name -> uint32 result bits, see
    the module docstring) and the provenance of the GPU run that measured them."""
    arch: str
    path: str
    tables: dict = field(repr=False, compare=False)
    provenance: dict = field(repr=False, compare=False)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.tables[name]

    @cached_property
    def ex2_compact(self) -> "CompactEx2 | None":
        """``ex2_pos`` and ``ex2_neg`` as :class:`CompactEx2` (built once per table set), or None where a
        residual does not fit in 2 bits (then the kernels read the plain tables)."""
        return CompactEx2.build(self["ex2_pos"], self["ex2_neg"])


@lru_cache(maxsize=None)
def load_tables(arch: str = "sm90", path=None) -> MufuTables:
    """The MUFU table set of ``arch`` (the package's data file), or the one in the file ``path``.

    Parameters
    ----------
    arch : str
        Architecture name of a table set (:func:`fa4num.hw.available_archs`).
    path : str or Path, optional
        A table file written by ``fa4num mufu build --out`` (default: the package's data folder).

    Returns
    -------
    MufuTables
        Read once per (arch, path) and cached.

    Examples
    --------
    >>> t = load_tables("sm90")
    >>> t["rcp"].size == 2 ** 23
    True
    """
    if path is None and arch not in _tables.available_archs():
        raise ValueError(f"arch must be one of {_tables.available_archs()}, got {arch!r}")
    tabs, meta = _tables.load(arch, path)
    missing = [n for n in TABLE_NAMES if n not in tabs]
    if missing:
        raise ValueError(f"MUFU tables for arch {arch!r} lack {missing}")
    return MufuTables(arch, str(path if path is not None else _tables.table_path(arch)), tabs, meta["provenance"])


def table_provenance(arch: str = "sm90") -> dict:
    """Provenance of the GPU run that measured ``arch``'s MUFU tables (GPU, driver, packages, date, checks).

    Parameters
    ----------
    arch : str
        Architecture of a shipped table set (:func:`fa4num.hw.available_archs`).

    Returns
    -------
    dict
        The provenance JSON stored in the table file (keys such as "gpu", "date", "code_revision", "packages").

    Raises
    ------
    ValueError
        When no table set exists for ``arch``.

    Examples
    --------
    >>> p = table_provenance("sm90")
    >>> p["gpu"]["name"], p["gpu"]["capability"]
    ('NVIDIA H200', 'sm_90')
    """
    return load_tables(arch).provenance


# ---- compact ex2 tables ---------------------------------------------------------------------------------------
COMPACT_SHIFT = 11   # table entries per interpolation segment: 2^11 (2^12 segments; at 2^12 the residuals need 3 bits)


@njit(cache=True, inline="always")
def _line_bits(g, knots):
    """Linear interpolation between knots[g >> 11] and the next knot, in integers (floor division, the same
    in the builder and the lookup)."""
    m = g >> COMPACT_SHIFT
    k0 = np.int64(knots[m])
    return k0 + (((np.int64(knots[m + 1]) - k0) * np.int64(g & ((1 << COMPACT_SHIFT) - 1))) >> COMPACT_SHIFT)


@njit(cache=True, inline="always")
def compact_entry(g, knots, packed, offset):
    """Entry g (0 <= g < 2^23) of a table held as knots, 2-bit residuals (16 per uint32) and their offset."""
    r = (packed[g >> 4] >> np.uint32((g & 15) * 2)) & np.uint32(3)
    return np.uint32(_line_bits(g, knots) + np.int64(r) + offset)


@njit(cache=True)
def _compact_build(table, knots, packed):
    """Fill knots (every 2^11-th entry, plus one extrapolated past the end) and the packed residuals of one
    table; returns (residual offset, True) if every entry reads back exactly, (0, False) otherwise."""
    nk = knots.shape[0] - 1
    for m in range(nk):
        knots[m] = table[m << COMPACT_SHIFT]
    knots[nk] = np.uint32(2 * np.int64(knots[nk - 1]) - np.int64(knots[nk - 2]))
    lo = np.int64(1) << 40
    hi = -lo
    for g in range(table.shape[0]):
        r = np.int64(table[g]) - _line_bits(g, knots)
        lo = min(lo, r)
        hi = max(hi, r)
    if hi - lo > 3:
        return np.int64(0), False
    packed[:] = 0
    for g in range(table.shape[0]):
        r = np.int64(table[g]) - _line_bits(g, knots) - lo
        packed[g >> 4] |= np.uint32(r) << np.uint32((g & 15) * 2)
    for g in range(table.shape[0]):
        if compact_entry(g, knots, packed, lo) != table[g]:
            return np.int64(0), False
    return lo, True


@dataclass(frozen=True)
class CompactEx2:
    """The ex2 tables (row 0: ``ex2_pos``, row 1: ``ex2_neg``, indexed by the input's sign bit) as knots,
    packed 2-bit residuals and residual offsets; :func:`ex2_ftz_bits_compact` reads them. Same bits as the
    tables, entry for entry (checked when built), in 1/16 of the memory."""
    knots: np.ndarray     # (2, 2^12 + 1) uint32
    packed: np.ndarray    # (2, 2^19) uint32
    offsets: np.ndarray   # (2,) int64

    @classmethod
    def build(cls, pos: np.ndarray, neg: np.ndarray) -> "CompactEx2 | None":
        n = 1 << 23
        if pos.shape != (n,) or neg.shape != (n,):
            return None
        knots = np.empty((2, (n >> COMPACT_SHIFT) + 1), np.uint32)
        packed = np.empty((2, n >> 4), np.uint32)
        offsets = np.empty(2, np.int64)
        for row, t in enumerate((pos, neg)):
            offsets[row], ok = _compact_build(np.ascontiguousarray(t, np.uint32), knots[row], packed[row])
            if not ok:
                return None
        return cls(knots, packed, offsets)


# ---- scalar kernels on bits (public: fa4num.gpu's fused checks inline them) ---------------------------------
# Each takes the input's fp32 bits (uint32) and the table arrays it reads, and returns the result's bits.
@njit(cache=True, inline="always")
def _ex2_fixed(b):
    """t = trunc(|x| * 2^23): the significand shifted by the unbiased exponent (|x| >= 2^16 saturates: inf/0)."""
    E = (b >> 23) & 0xFF
    M = b & 0x7FFFFF
    t = np.int64(0)
    if E > 0:
        sig = np.int64(M | 0x800000)
        sh = np.int64(E) - 127
        if sh >= 0:
            t = sig << min(sh, np.int64(16))
        elif sh > -40:
            t = sig >> (-sh)
    return t


@njit(cache=True, inline="always")
def _ex2_scaled(b, r, k):
    """The table entry r (bits of ex2(+-g 2^-23)) times 2^(+-k): the exponent field shifted, with the
    overflow to +inf (x >= 0) and the .ftz flush below 2^-126 (x < 0)."""
    r = np.int64(r)
    if (b >> 31) == 0:
        if (r >> 23) + k >= 255:
            return np.uint32(0x7F800000)
        return np.uint32(r + (k << 23))
    if (r >> 23) - k <= 0:
        return np.uint32(0)
    return np.uint32(r - (k << 23))


@njit(cache=True, inline="always")
def ex2_ftz_bits(b, tpos, tneg):
    """``ex2.approx.ftz.f32`` (bare MUFU.EX2) on bits: 2^x from the measured tables.

    t = trunc(|x| 2^23) = k 2^23 + g; the result is ex2_pos[g] * 2^k (x >= 0) or ex2_neg[g] * 2^-k (x < 0);
    results below 2^-126 flush to +0, from 2^128 on they are +inf.

    Scalar numba kernel on bits (public: fa4num.gpu's fused checks inline it into their own loops); the array
    function wraps it in a threaded loop.

    Parameters
    ----------
    b : uint32
        The input's fp32 bits.
    tpos, tneg : uint32 arrays of 2^23 entries
        The "ex2_pos" / "ex2_neg" tables of a MufuTables (results for g 2^-23 and -g 2^-23).

    Returns
    -------
    uint32
        The result's fp32 bits (NaN results: the canonical 0x7FFFFFFF).

    Examples
    --------
    >>> import numpy as np
    >>> t = load_tables("sm90")
    >>> hex(ex2_ftz_bits(np.uint32(0x3F800000), t["ex2_pos"], t["ex2_neg"]))   # 2^1
    '0x40000000'
    >>> hex(ex2_ftz_bits(np.float32(-130.0).view(np.uint32), t["ex2_pos"], t["ex2_neg"]))   # flushed to +0
    '0x0'
    """
    if (b & 0x7FFFFFFF) > 0x7F800000:
        return np.uint32(0x7FFFFFFF)
    t = _ex2_fixed(b)
    g = t & 0x7FFFFF
    return _ex2_scaled(b, tpos[g] if (b >> 31) == 0 else tneg[g], t >> 23)


@njit(cache=True, inline="always")
def ex2_ftz_bits_compact(b, knots, packed, offsets):
    """:func:`ex2_ftz_bits` (``ex2.approx.ftz.f32``) reading a :class:`CompactEx2` instead of the plain tables:
    the same bits for every input (the compact form is checked entry by entry when built), from 4 MB instead
    of 64 MB, so the lookups stay in cache.

    Parameters
    ----------
    b : uint32
        The input's fp32 bits.
    knots, packed, offsets : arrays
        The fields of a :class:`CompactEx2` (``MufuTables.ex2_compact``), row 0 for x >= 0, row 1 for x < 0.

    Returns
    -------
    uint32
        The result's fp32 bits (NaN results: the canonical 0x7FFFFFFF).

    Examples
    --------
    >>> import numpy as np
    >>> c = load_tables("sm90").ex2_compact
    >>> hex(ex2_ftz_bits_compact(np.uint32(0x3F800000), c.knots, c.packed, c.offsets))   # 2^1
    '0x40000000'
    """
    if (b & 0x7FFFFFFF) > 0x7F800000:
        return np.uint32(0x7FFFFFFF)
    t = _ex2_fixed(b)
    s = b >> 31
    return _ex2_scaled(b, compact_entry(t & 0x7FFFFF, knots[s], packed[s], offsets[s]), t >> 23)


@njit(cache=True, inline="always")
def rcp_ftz_bits(b, trcp):
    """``rcp.approx.ftz.f32`` (bare MUFU.RCP) on bits: rcp(m 2^e) = rcp[m] 2^-e.

    Subnormal inputs count as zero (-> signed inf); results below 2^-126 flush to signed zero.

    Scalar numba kernel on bits (public: fa4num.gpu's fused checks inline it into their own loops); the array
    function wraps it in a threaded loop.

    Parameters
    ----------
    b : uint32
        The input's fp32 bits.
    trcp : uint32 array of 2^23 entries
        The "rcp" table of a MufuTables (rcp(1.m) for each 23-bit mantissa m).

    Returns
    -------
    uint32
        The result's fp32 bits (NaN results: the canonical 0x7FFFFFFF).

    Examples
    --------
    >>> import numpy as np
    >>> t = load_tables("sm90")
    >>> hex(rcp_ftz_bits(np.float32(4.0).view(np.uint32), t["rcp"]))
    '0x3e800000'
    >>> hex(rcp_ftz_bits(np.uint32(0x00000001), t["rcp"]))   # a subnormal counts as +0: +inf
    '0x7f800000'
    """
    s = b & np.uint32(0x80000000)
    E = np.int64((b >> 23) & 0xFF)
    M = b & 0x7FFFFF
    if E == 0xFF:
        return np.uint32(0x7FFFFFFF) if M != 0 else s           # rcp(+-inf) = +-0
    if E == 0:
        return s | np.uint32(0x7F800000)                        # zero or (flushed) subnormal -> +-inf
    r = np.int64(trcp[M])
    Eo = (r >> 23) - (E - 127)
    if Eo <= 0:
        return s                                                # result below 2^-126: flush
    return s | np.uint32((Eo << 23) | (r & 0x7FFFFF))


@njit(cache=True, inline="always")
def _fixed52(bits):
    """A positive fp32 value (bits) as an integer multiple of 2^-52 (exact for the lg2 tables' range)."""
    E = np.int64((bits >> 23) & 0xFF)
    if E == 0:
        return np.int64(0)
    sig = np.int64((bits & 0x7FFFFF) | 0x800000)
    sh = E - 150 + 52
    return sig << sh if sh >= 0 else sig >> (-sh)


@njit(cache=True, inline="always")
def _rz_int_plus_fixed52(k, frac):
    """fp32 bits of k + frac * 2^-52 (integer k >= 1, 0 <= frac < 2^52), truncated (RZ) to 24 bits."""
    p = 52                      # bit position of the leading 1 of k * 2^52 + frac (frac < 2^52 cannot carry)
    kk = k >> 1
    while kk:
        p += 1
        kk >>= 1
    v = (k << 52) + frac
    return np.uint32(((p - 52 + 127) << 23) | ((v >> (p - 23)) & 0x7FFFFF))


@njit(cache=True, inline="always")
def lg2_ftz_bits(b, l0, lm1):
    """``lg2.approx.ftz.f32`` (bare MUFU.LG2) on bits: RZ of the fixed-point sum e + F(m).

    For e < 0 the hardware negates in one's complement, hence lg2(0.5) = -(1 - 2^-23); x < 0 gives NaN, 0 and
    subnormals -inf.

    Scalar numba kernel on bits (public: fa4num.gpu's fused checks inline it into their own loops); the array
    function wraps it in a threaded loop.

    Parameters
    ----------
    b : uint32
        The input's fp32 bits.
    l0, lm1 : uint32 arrays of 2^23 entries
        The "lg2_e0" / "lg2_e-1" tables of a MufuTables (outputs on [1, 2) and [0.5, 1)).

    Returns
    -------
    uint32
        The result's fp32 bits (NaN results: the canonical 0x7FFFFFFF).

    Examples
    --------
    >>> import numpy as np
    >>> t = load_tables("sm90")
    >>> float(np.uint32(lg2_ftz_bits(np.float32(0.5).view(np.uint32), t["lg2_e0"], t["lg2_e-1"])).view(np.float32))
    -0.9999998807907104
    >>> hex(lg2_ftz_bits(np.float32(-1.0).view(np.uint32), t["lg2_e0"], t["lg2_e-1"]))   # x < 0: NaN
    '0x7fffffff'
    """
    E = np.int64((b >> 23) & 0xFF)
    M = b & 0x7FFFFF
    if E == 0xFF and M != 0:
        return np.uint32(0x7FFFFFFF)
    if E == 0:
        return np.uint32(0xFF800000)                # +-0 and flushed subnormals: -inf
    if (b >> 31) != 0:
        return np.uint32(0x7FFFFFFF)                # negative: NaN
    if E == 0xFF:
        return np.uint32(0x7F800000)
    e = E - 127
    if e == 0:
        return l0[M]                                # the tables are the outputs on [1, 2) and [0.5, 1)
    if e == -1:
        return lm1[M]
    if e > 0:
        return _rz_int_plus_fixed52(e, _fixed52(l0[M]))
    return np.uint32(0x80000000) | _rz_int_plus_fixed52(-e - 1, _fixed52(lm1[M] & np.uint32(0x7FFFFFFF)))


@njit(cache=True, inline="always")
def canonical_nan_bits(r):
    """NVIDIA's canonical NaN for any NaN an fp32 instruction (FMUL/FADD/MUFU) produces.

    Scalar numba kernel on bits.

    Parameters
    ----------
    r : uint32
        fp32 result bits.

    Returns
    -------
    uint32
        0x7FFFFFFF when r is a NaN (any sign or payload), else r.

    Examples
    --------
    >>> import numpy as np
    >>> hex(canonical_nan_bits(np.uint32(0xFFC00000))), hex(canonical_nan_bits(np.uint32(0x7F800000)))
    ('0x7fffffff', '0x7f800000')
    """
    return np.uint32(0x7FFFFFFF) if ((r >> 23) & 0xFF) == 0xFF and (r & 0x7FFFFF) != 0 else r


@njit(cache=True, inline="always")
def ex2_bits(b, tpos, tneg):
    # ptxas: FSETP.GEU p, x, -126; @!p FMUL x, x, 0.5; MUFU.EX2 y, x; @!p FMUL y, y, y
    """``ex2.approx.f32`` (no .ftz) on bits: what ptxas emits around MUFU.EX2.

    If x < -126 (FSETP.GEU, so not for NaN): y = MUFU.EX2(x * 0.5), result y * y (FMUL, RN, subnormals kept);
    else as ex2_ftz_bits.

    Scalar numba kernel on bits (public: fa4num.gpu's fused checks inline it into their own loops); the array
    function wraps it in a threaded loop.

    Parameters
    ----------
    b : uint32
        The input's fp32 bits.
    tpos, tneg : uint32 arrays of 2^23 entries
        The "ex2_pos" / "ex2_neg" tables of a MufuTables (results for g 2^-23 and -g 2^-23).

    Returns
    -------
    uint32
        The result's fp32 bits (NaN results: the canonical 0x7FFFFFFF).

    Examples
    --------
    >>> import numpy as np
    >>> t = load_tables("sm90")
    >>> r = ex2_bits(np.float32(-130.0).view(np.uint32), t["ex2_pos"], t["ex2_neg"])
    >>> float(np.uint32(r).view(np.float32)) == 2.0 ** -130   # kept: y * y is not flushed
    True
    """
    x = _f32(b)
    if x < np.float32(-126.0):
        y = _f32(ex2_ftz_bits(_b32(x * np.float32(0.5)), tpos, tneg))
        return canonical_nan_bits(_b32(y * y))
    return ex2_ftz_bits(b, tpos, tneg)


@njit(cache=True, inline="always")
def ex2_bits_compact(b, knots, packed, offsets):
    """:func:`ex2_bits` (``ex2.approx.f32``, no .ftz: the halved input squared below -126) reading a
    :class:`CompactEx2`; the same bits as with the plain tables.

    Parameters
    ----------
    b : uint32
        The input's fp32 bits.
    knots, packed, offsets : arrays
        The fields of a :class:`CompactEx2` (``MufuTables.ex2_compact``).

    Returns
    -------
    uint32
        The result's fp32 bits (subnormal results kept).

    Examples
    --------
    >>> import numpy as np
    >>> c = load_tables("sm90").ex2_compact
    >>> hex(ex2_bits_compact(np.float32(-130.0).view(np.uint32), c.knots, c.packed, c.offsets))   # 2^-130
    '0x80000'
    """
    x = _f32(b)
    if x < np.float32(-126.0):
        y = _f32(ex2_ftz_bits_compact(_b32(x * np.float32(0.5)), knots, packed, offsets))
        return canonical_nan_bits(_b32(y * y))
    return ex2_ftz_bits_compact(b, knots, packed, offsets)


@njit(cache=True, inline="always")
def rcp_bits(b, trcp):
    # ptxas: s = |x| < 2^-126 ? 2^24 : 1; s = |x| > 2^126 ? 0.25 : s; FMUL; MUFU.RCP; FMUL by s
    """``rcp.approx.f32`` (no .ftz) on bits: what ptxas emits around MUFU.RCP.

    s = 2^24 if |x| < 2^-126, 0.25 if |x| > 2^126, else 1; result MUFU.RCP(x * s) * s, so subnormal inputs and
    results survive.

    Scalar numba kernel on bits (public: fa4num.gpu's fused checks inline it into their own loops); the array
    function wraps it in a threaded loop.

    Parameters
    ----------
    b : uint32
        The input's fp32 bits.
    trcp : uint32 array of 2^23 entries
        The "rcp" table of a MufuTables (rcp(1.m) for each 23-bit mantissa m).

    Returns
    -------
    uint32
        The result's fp32 bits (NaN results: the canonical 0x7FFFFFFF).

    Examples
    --------
    >>> import numpy as np
    >>> t = load_tables("sm90")
    >>> float(np.uint32(rcp_bits(np.float32(2.0 ** 127).view(np.uint32), t["rcp"])).view(np.float32)) == 2.0 ** -127
    True
    """
    x = _f32(b)
    ax = abs(x)
    s = np.float32(16777216.0) if ax < np.float32(1.1754943508222875e-38) else np.float32(1.0)
    if ax > np.float32(8.507059173023462e+37):
        s = np.float32(0.25)
    r = _f32(rcp_ftz_bits(_b32(x * s), trcp))
    return canonical_nan_bits(_b32(r * s))


@njit(cache=True, inline="always")
def lg2_bits(b, l0, lm1):
    # ptxas: if |x| < 2^-126 { x *= 2^24; MUFU.LG2; FADD -24 } else MUFU.LG2
    """``lg2.approx.f32`` (no .ftz) on bits: what ptxas emits around MUFU.LG2.

    If |x| < 2^-126: result MUFU.LG2(x * 2^24) - 24 (FADD, RN); else as lg2_ftz_bits.

    Scalar numba kernel on bits (public: fa4num.gpu's fused checks inline it into their own loops); the array
    function wraps it in a threaded loop.

    Parameters
    ----------
    b : uint32
        The input's fp32 bits.
    l0, lm1 : uint32 arrays of 2^23 entries
        The "lg2_e0" / "lg2_e-1" tables of a MufuTables (outputs on [1, 2) and [0.5, 1)).

    Returns
    -------
    uint32
        The result's fp32 bits (NaN results: the canonical 0x7FFFFFFF).

    Examples
    --------
    >>> import numpy as np
    >>> t = load_tables("sm90")
    >>> float(np.uint32(lg2_bits(np.uint32(1), t["lg2_e0"], t["lg2_e-1"])).view(np.float32))   # smallest subnormal
    -149.0
    """
    x = _f32(b)
    if abs(x) < np.float32(1.1754943508222875e-38):
        r = _f32(lg2_ftz_bits(_b32(x * np.float32(16777216.0)), l0, lm1))
        return canonical_nan_bits(_b32(r - np.float32(24.0)))
    return lg2_ftz_bits(b, l0, lm1)


@njit(nogil=True, cache=True)
def _map_ex2(bits, out, ftz, t1, t2):
    for i in range(bits.size):
        out[i] = ex2_ftz_bits(bits[i], t1, t2) if ftz else ex2_bits(bits[i], t1, t2)


@njit(nogil=True, cache=True)
def _map_ex2_compact(bits, out, ftz, knots, packed, offsets):
    for i in range(bits.size):
        out[i] = (ex2_ftz_bits_compact(bits[i], knots, packed, offsets) if ftz
                  else ex2_bits_compact(bits[i], knots, packed, offsets))


@njit(nogil=True, cache=True)
def _map_rcp(bits, out, ftz, t1):
    for i in range(bits.size):
        out[i] = rcp_ftz_bits(bits[i], t1) if ftz else rcp_bits(bits[i], t1)


@njit(nogil=True, cache=True)
def _map_lg2(bits, out, ftz, t1, t2):
    for i in range(bits.size):
        out[i] = lg2_ftz_bits(bits[i], t1, t2) if ftz else lg2_bits(bits[i], t1, t2)


_MIN_SLICE = 1 << 16   # below this a thread hand-off costs more than it saves
_POOL = []


def _threaded(kernel, bits, out, *args):
    """``kernel(bits, out, *args)`` (a serial nogil map) on slices in numba's thread count of threads: a
    serial kernel compiles several times faster than a prange loop (these maps are table lookups, bound by
    memory, so the loop shape costs nothing at run time)."""
    import numba
    nthreads = min(numba.get_num_threads(), max(1, bits.size // _MIN_SLICE))
    if nthreads == 1:
        kernel(bits, out, *args)
        return
    if not _POOL or _POOL[0]._max_workers < nthreads:
        from concurrent.futures import ThreadPoolExecutor
        _POOL[:] = [ThreadPoolExecutor(max_workers=nthreads, thread_name_prefix="fa4num-mufu")]
    bounds = np.linspace(0, bits.size, nthreads + 1).astype(np.int64)
    for job in [_POOL[0].submit(kernel, bits[a:b], out[a:b], *args) for a, b in zip(bounds[:-1], bounds[1:])]:
        job.result()


# ---- public API ----------------------------------------------------------------------------------------------
def _as_bits(x):
    """(flat uint32 bits, shape, torch device or None) of a float32 array-like or torch tensor."""
    device = x.device if type(x).__module__.startswith("torch") else None
    # fa4num.fp's rule for inputs, so that mufu_ex2 takes what fa4_emulated takes: float32 arrays and tensors,
    # and real Python numbers (or lists of them) exact in fp32; a string or float64 is refused by name
    a = as_float32(x, "x")
    return np.ascontiguousarray(a).reshape(-1).view(np.uint32), a.shape, device


def _finish(out, shape, device):
    res = out.view(np.float32).reshape(shape)
    if device is not None:
        import torch
        return torch.from_numpy(res).to(device)
    return res


def _tables_of(arch, ftz, tables) -> MufuTables:
    if not isinstance(ftz, (bool, np.bool_)):
        raise ValueError(f"ftz must be True or False, got {ftz!r}")
    if tables is None:
        return load_tables(arch)
    if not isinstance(tables, MufuTables):
        raise ValueError(f"tables must be a MufuTables from fa4num.hw.load_tables, got {type(tables).__name__}")
    return tables


def mufu_ex2(x, *, arch: str = "sm90", ftz: bool = True, tables=None):
    """Bit-exact ``ex2.approx.ftz.f32`` (ftz=True) or ``ex2.approx.f32`` of a float32 array on ``arch``.

    FA4 uses it for most P = 2^x elements (softmax.py ``apply_exp2_convert``, ``cute.math.exp2(fastmath)``)
    and for the rescale factor acc_scale.

    Parameters
    ----------
    x : float32 array or torch float32 tensor
    arch : str
        The measured table set (:func:`fa4num.hw.available_archs`).
    ftz : bool
        ``.ftz`` form (a bare MUFU.EX2) or the non-ftz form (ptxas's scaling around it).
    tables : MufuTables, optional
        A table set from :func:`load_tables` (e.g. a file just measured); overrides ``arch``.

    Returns
    -------
    float32 array of x's shape (a tensor on x's device for a tensor)

    Examples
    --------
    >>> import numpy as np
    >>> y = mufu_ex2(np.array([0.0, 1.0, -130.0], np.float32))
    >>> y.tolist()[:2], float(y[2])                                    # .ftz flushes 2^-130 to +0
    ([1.0, 2.0], 0.0)
    >>> float(mufu_ex2(np.array([-130.0], np.float32), ftz=False)[0]) == 2.0 ** -130
    True
    """
    t = _tables_of(arch, ftz, tables)
    bits, shape, tt = _as_bits(x)
    out = np.empty_like(bits)
    c = t.ex2_compact
    if c is not None:
        _threaded(_map_ex2_compact, bits, out, bool(ftz), c.knots, c.packed, c.offsets)
    else:
        _threaded(_map_ex2, bits, out, bool(ftz), t["ex2_pos"], t["ex2_neg"])
    return _finish(out, shape, tt)


def mufu_rcp(x, *, arch: str = "sm90", ftz: bool = True, tables=None):
    """Bit-exact ``rcp.approx.ftz.f32`` (ftz=True) or ``rcp.approx.f32`` (FA4's final 1/row_sum).

    Parameters
    ----------
    x : float32 array or torch float32 tensor
    arch : str
        The measured table set (:func:`fa4num.hw.available_archs`).
    ftz : bool
        ``.ftz`` form (a bare MUFU.RCP) or the non-ftz form (ptxas's scaling around it).
    tables : MufuTables, optional
        A table set from :func:`load_tables` (e.g. a file just measured); overrides ``arch``.

    Returns
    -------
    float32 array of x's shape (a tensor on x's device for a tensor)

    Examples
    --------
    >>> import numpy as np
    >>> y = mufu_rcp(np.array([1.0, 3.0, 2.0 ** -127], np.float32))
    >>> y.tolist()                                                      # .ftz: 1/(subnormal) = 1/0
    [1.0, 0.3333333432674408, inf]
    >>> float(mufu_rcp(np.array([2.0 ** -127], np.float32), ftz=False)[0]) == 2.0 ** 127
    True
    """
    t = _tables_of(arch, ftz, tables)
    bits, shape, tt = _as_bits(x)
    out = np.empty_like(bits)
    _threaded(_map_rcp, bits, out, bool(ftz), t["rcp"])
    return _finish(out, shape, tt)


def mufu_lg2(x, *, arch: str = "sm90", ftz: bool = True, tables=None):
    """Bit-exact ``lg2.approx.ftz.f32`` (ftz=True) or ``lg2.approx.f32`` (FA4's LSE, log2 of row_sum).

    Parameters
    ----------
    x : float32 array or torch float32 tensor
    arch : str
        The measured table set (:func:`fa4num.hw.available_archs`).
    ftz : bool
        ``.ftz`` form (a bare MUFU.LG2) or the non-ftz form (ptxas's scaling around it).
    tables : MufuTables, optional
        A table set from :func:`load_tables` (e.g. a file just measured); overrides ``arch``.

    Returns
    -------
    float32 array of x's shape (a tensor on x's device for a tensor)

    Examples
    --------
    >>> import numpy as np
    >>> mufu_lg2(np.array([1.0, 8.0, 0.0, -1.0], np.float32)).tolist()
    [0.0, 3.0, -inf, nan]
    """
    t = _tables_of(arch, ftz, tables)
    bits, shape, tt = _as_bits(x)
    out = np.empty_like(bits)
    _threaded(_map_lg2, bits, out, bool(ftz), t["lg2_e0"], t["lg2_e-1"])
    return _finish(out, shape, tt)
