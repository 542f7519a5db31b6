"""Golden vectors: deterministic inputs, and GPU outputs stored as digests plus a few explicit vectors.

Inputs are never stored. Every input is a pure function of (generator kind, seed, index), computed in plain
numpy integer arithmetic from a splitmix64 hash of the index (no random-number-generator state, so no numpy
version can change them). A golden *set* records which operation ran on which index range, the SHA-256 digest
of the GPU's outputs per chunk (uint32 little-endian, 16-bit results zero-extended) and the outputs at every
``stride``-th index for diagnosis. A golden *file* is lzma-compressed JSON holding many sets and the
provenance of the GPU run (fa4num.provenance.provenance() on the GPU machine).

Generators (``inputs(kind, seed, start, stop)`` returns a tuple of uint32 arrays, one per operand):

- ``"unary"`` (2^20): a sign x exponent x mantissa grid (every binade edge, zeros, subnormals, inf, NaN
  payloads), dense runs of consecutive bit patterns around 16 anchors (0, 2^-126, 1, -126, -127, 128, inf, ...),
  values uniform on [-130, 10] (FA4's exp2 domain) and random bit patterns.
- ``"binary"`` (2^20): all pairs of 256 special values (with ±0, ±inf, NaNs, ±max, subnormals), exact and
  near cancellation, ties in every rounding mode (addend half an ulp of the other operand, short significands
  whose product ends in a half), results around 2^-126 in both directions (does .ftz flush before or after
  rounding?), overflow, random bit patterns.
- ``"ternary"`` (2^20): the same for fma (c = -RN(a*b) and neighbours, ties, products near 2^-126, overflow).
- ``"pair"`` (2^20): two independent unary streams, for the two-input packing conversions.
- ``"all16"`` (2^16): every 16-bit pattern (bf16/fp16/fp8x2 to fp32).
"""
from __future__ import annotations

import base64
import hashlib
import json
import lzma
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

FORMAT = "fa4num-golden/1"
SIZES = {"unary": 1 << 20, "binary": 1 << 20, "ternary": 1 << 20, "pair": 1 << 20, "all16": 1 << 16}
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


# --------------------------------------------------------------------------------------------------------------
# hashing: splitmix64 finaliser over uint64 arrays (wrapping arithmetic)
def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 output function applied to each element (uint64 in, uint64 out)."""
    z = (np.asarray(x, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15))
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _h(seed: int, idx: np.ndarray, stream: int) -> np.ndarray:
    """64 hashed bits per index, independent across (seed, stream)."""
    key = np.uint64((seed * 0x632BE59BD9B4E019 + stream * 0x8CB92BA72F3D8DD7 + 0x1234567) & 0xFFFFFFFFFFFFFFFF)
    with np.errstate(over="ignore"):
        return splitmix64(splitmix64(idx.astype(np.uint64) ^ key) + np.uint64(stream))


def _u32(seed, idx, stream) -> np.ndarray:
    return (_h(seed, idx, stream) >> np.uint64(32)).astype(np.uint32)


def _below(seed, idx, stream, n) -> np.ndarray:
    """Uniform integers in [0, n) (n small; the modulo bias of 2^32 % n is irrelevant for test coverage)."""
    return (_u32(seed, idx, stream) % np.uint32(n)).astype(np.int64)


def _select(conds, choices, default) -> np.ndarray:
    """np.select over uint32 bit patterns (choices may mix Python ints and arrays)."""
    return np.select(conds, [np.asarray(c, np.int64) for c in choices], np.asarray(default, np.int64)).astype(np.uint32)


def _bits(sign, exp, mant) -> np.ndarray:
    return ((np.asarray(sign, np.uint64) << 31) | (np.asarray(exp, np.uint64) << 23)
            | np.asarray(mant, np.uint64)).astype(np.uint32)


def _f32(bits) -> np.ndarray:
    return np.asarray(bits, np.uint32).view(np.float32)


def _b32(x) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32)


def _mantissa(seed, idx, stream) -> np.ndarray:
    """Mantissas biased to the edges: 1/4 all-random, 1/4 few low bits, 1/4 near all-ones, 1/4 short (12 bits)."""
    r = _u32(seed, idx, stream) & np.uint32(0x7FFFFF)
    kind = _below(seed, idx, stream + 1, 4)
    small = r & np.uint32(0xF)
    return _select([kind == 0, kind == 1, kind == 2],
                     [r, small, np.uint32(0x7FFFFF) - small], r & np.uint32(0x7FF000)).astype(np.uint32)


def _value(seed, idx, stream, emin=0, emax=255) -> np.ndarray:
    """Random sign, exponent field uniform in [emin, emax], edge-biased mantissa."""
    s = _below(seed, idx, stream, 2)
    e = emin + _below(seed, idx, stream + 1, emax - emin + 1)
    return _bits(s, e, _mantissa(seed, idx, stream + 2))


def _with_exp(bits, exp_field) -> np.ndarray:
    """Same sign and mantissa, exponent field replaced (clipped to [0, 255])."""
    e = np.clip(np.asarray(exp_field, np.int64), 0, 255).astype(np.uint32)
    return (np.asarray(bits, np.uint32) & np.uint32(0x807FFFFF)) | (e << np.uint32(23))


def _exp_field(bits) -> np.ndarray:
    return ((np.asarray(bits, np.uint32) >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64)


def _step(bits, k) -> np.ndarray:
    """Move the magnitude by k ulps (bit pattern arithmetic within the same sign)."""
    b = np.asarray(bits, np.uint32)
    mag = (b & np.uint32(0x7FFFFFFF)).astype(np.int64) + np.asarray(k, np.int64)
    mag = np.clip(mag, 0, 0x7F7FFFFF).astype(np.uint32)
    return (b & np.uint32(0x80000000)) | mag


# --------------------------------------------------------------------------------------------------------------
# special values (for cross products; fa4num.fp.cases draws its "specials" family from the first 33): the one
# list of fp32 special operands
SPECIAL_BITS = (
    0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000, 0x80800000,
    0x00800001, 0x80800001, 0x00400000, 0x80400000, 0x3F800000, 0xBF800000, 0x3F800001, 0xBF800001,
    0x3F7FFFFF, 0xBF7FFFFF, 0x3FC00000, 0xBFC00000, 0x40000000, 0xC0000000, 0x3F000000, 0xBF000000,
    0x7F7FFFFF, 0xFF7FFFFF, 0x7F000000, 0xFF000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
    0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FBFFFFF, 0x33800000, 0xB3800000, 0x34000000,
    0x4B800000, 0xCB800000, 0x4B400000, 0xCB400000, 0x00000003, 0x80000003, 0x0C800000, 0x8C800000,
    0x32800000, 0x2D800000, 0x3F000001, 0x40400000, 0xC0400000, 0x5F000000, 0x1F800000, 0x20000000,
    0xC2FE0000, 0xC2FC0000, 0x43000000, 0x42FE0000, 0x3FB8AA3B, 0x3F317218, 0x3E0293EE, 0x00000002,
)


def _special_values(seed, n) -> np.ndarray:
    """The 64 fixed specials followed by edge-biased random values, n in all."""
    base = np.array(SPECIAL_BITS, np.uint32)
    extra = _value(seed, np.arange(n - base.size, dtype=np.int64), 900)
    return np.concatenate([base, extra])[:n]


# --------------------------------------------------------------------------------------------------------------
# unary
_ANCHORS = [0x00000000, 0x80000000, 0x00800000, 0x80800000, 0x3F800000, 0xBF800000, 0x3F000000, 0x40000000,
            0xC2FC0000, 0xC2FE0000, 0xC3000000, 0x42FE0000, 0x43000000, 0x7F800000, 0xFF800000, 0x33800000]


def _unary(seed, idx):
    out = np.empty(idx.size, np.uint32)
    r0 = idx < (1 << 18)                      # grid: sign x exponent x 512 mantissas
    i = idx[r0]
    j = i & 511
    rnd = _u32(seed, i, 1) & np.uint32(0x7FFFFF)
    mant = _select([j < 64, j < 128, j < 192],
                     [j, (1 << 23) - 128 + j, (1 << 22) - 160 + j], rnd)
    out[r0] = _bits(i >> 17, (i >> 9) & 255, mant)
    r1 = (idx >= (1 << 18)) & (idx < (1 << 19))  # 16 runs of 2^14 consecutive patterns centred on anchors
    i = idx[r1] - (1 << 18)
    anchors = np.array(_ANCHORS, np.int64)
    out[r1] = ((anchors[i >> 14] - (1 << 13) + (i & 16383)) & 0xFFFFFFFF).astype(np.uint32)
    r2 = (idx >= (1 << 19)) & (idx < (1 << 19) + (1 << 18))  # uniform on [-130, 10]
    i = idx[r2]
    u = _u32(seed, i, 2).astype(np.float64) / 2.0 ** 32
    out[r2] = _b32((u * 140.0 - 130.0).astype(np.float32))
    r3 = idx >= (1 << 19) + (1 << 18)          # random bit patterns
    out[r3] = _u32(seed, idx[r3], 3)
    return (out,)


def _pair(seed, idx):
    (a,) = _unary(seed, idx)
    (b,) = _unary(seed + 1, (idx * 0x9E3779B1 + 12345) & ((1 << 20) - 1))
    return a, b


# --------------------------------------------------------------------------------------------------------------
# binary
def _binary(seed, idx):
    a = np.empty(idx.size, np.uint32)
    b = np.empty(idx.size, np.uint32)
    R = [1 << 16, 1 << 18, 1 << 19, (1 << 19) + (1 << 18)]
    # specials x specials
    m = idx < R[0]
    sp = _special_values(seed, 256)
    a[m], b[m] = sp[idx[m] >> 8], sp[idx[m] & 255]
    # cancellation: b = -(a + d ulps) (for add) or b = a + d ulps (for sub), d in [-4, 4]
    m = (idx >= R[0]) & (idx < R[1])
    i = idx[m]
    x = _value(seed, i, 10)
    y = _step(x, _below(seed, i, 13, 9) - 4)
    flip = _below(seed, i, 14, 2).astype(np.uint32) << np.uint32(31)
    a[m], b[m] = x, y ^ flip
    # ties and sticky bits: addend exponent s below, mantissa 0, 1.5 or random; or short-significand products
    m = (idx >= R[1]) & (idx < R[2])
    i = idx[m]
    x = _value(seed, i, 20, 1, 254)
    kind = _below(seed, i, 23, 4)
    s = _below(seed, i, 24, 30) - 2
    mant_choice = _below(seed, i, 25, 3)
    ym = _select([mant_choice == 0, mant_choice == 1], [0, 0x400000], _u32(seed, i, 26) & np.uint32(0x7FFFFF))
    y_add = _bits(_below(seed, i, 27, 2), np.clip(_exp_field(x) - s, 0, 254), ym)
    short_a = _bits(_below(seed, i, 28, 2), 1 + _below(seed, i, 29, 253), _u32(seed, i, 30) & np.uint32(0x7FF000))
    short_b = _bits(_below(seed, i, 31, 2), 1 + _below(seed, i, 32, 253), _u32(seed, i, 33) & np.uint32(0x7FF800))
    # exponents of the short products chosen so that the product lands anywhere from subnormal to overflow
    eb = np.clip(127 + 127 - _exp_field(short_a) + _below(seed, i, 34, 300) - 150, 1, 254)
    short_b = _with_exp(short_b, eb)
    a[m] = np.where(kind < 2, x, short_a)
    b[m] = np.where(kind < 2, y_add, short_b)
    # results around 2^-126 (both sides, and the round-up case: |a*b| just below 2^-126) and overflow
    m = (idx >= R[2]) & (idx < R[3])
    i = idx[m]
    kind = _below(seed, i, 40, 4)
    x = _value(seed, i, 41, 1, 254)
    # mul: exponent sum near -126
    y_mul = _with_exp(_value(seed, i, 44), np.clip(127 - 126 + 127 - _exp_field(x) + _below(seed, i, 47, 7) - 4, 0, 254))
    # mul, round-up case: a = (2 - k ulps) 2^(-t), b = (1 + j ulps) 2^(t-127) -> |a*b| just below 2^-126
    t = 1 + _below(seed, i, 50, 40)
    ra = _bits(_below(seed, i, 48, 2), 127 - t, np.uint32(0x7FFFFF) - (_u32(seed, i, 49) & np.uint32(0x1F)))
    rb = _bits(_below(seed, i, 51, 2), t, _below(seed, i, 52, 4))
    # add: both operands near 2^-126 with opposite signs, or subnormal + normal
    xa = _value(seed, i, 53, 0, 2)
    ya = _step(xa ^ np.uint32(0x80000000), _below(seed, i, 56, 64) - 32)
    # overflow: mul with exponent sum 126..130; add of two values near the largest finite of one sign
    xo = _value(seed, i, 57, 130, 254)
    yo = _with_exp(_value(seed, i, 60), 254 + 128 - _exp_field(xo) + _below(seed, i, 63, 5) - 2)
    big = _value(seed, i, 64, 253, 254)
    half = _below(seed, i, 67, 2) == 0
    xo = np.where(half, xo, big)
    yo = np.where(half, yo, (big & np.uint32(0x80000000)) | (_value(seed, i, 68, 252, 254) & np.uint32(0x7FFFFFFF)))
    a[m] = _select([kind == 0, kind == 1, kind == 2], [x, ra, xa], xo)
    b[m] = _select([kind == 0, kind == 1, kind == 2], [y_mul, rb, ya], yo)
    # random bit patterns
    m = idx >= R[3]
    a[m], b[m] = _u32(seed, idx[m], 70), _u32(seed, idx[m], 71)
    return a, b


# --------------------------------------------------------------------------------------------------------------
# ternary (fma)
def _ternary(seed, idx):
    a = np.empty(idx.size, np.uint32)
    b = np.empty(idx.size, np.uint32)
    c = np.empty(idx.size, np.uint32)
    R = [1 << 16, 1 << 18, 1 << 19, (1 << 19) + (1 << 18)]
    m = idx < R[0]
    sp = _special_values(seed, 40)
    i = np.minimum(idx[m], 40 ** 3 - 1)
    a[m], b[m], c[m] = sp[i // 1600], sp[(i // 40) % 40], sp[i % 40]
    extra = m & (idx >= 40 ** 3)  # the 1536 indices past the cross product: random bits
    a[extra], b[extra], c[extra] = (_u32(seed, idx[extra], s) for s in (1, 2, 3))
    # cancellation: c = -RN(a*b) moved by d ulps, a*b in a safe exponent range
    m = (idx >= R[0]) & (idx < R[1])
    i = idx[m]
    x = _value(seed, i, 10, 64, 190)
    y = _value(seed, i, 13, 64, 190)
    with np.errstate(all="ignore"):
        p = _b32(-(_f32(x) * _f32(y)))
    a[m], b[m], c[m] = x, y, _step(p, _below(seed, i, 16, 9) - 4)
    # ties: short significands (a*b exact in 24 bits), addend an exact half ulp (or 1.5 ulps, or random) below
    m = (idx >= R[1]) & (idx < R[2])
    i = idx[m]
    x = _bits(_below(seed, i, 20, 2), 64 + _below(seed, i, 21, 126), _u32(seed, i, 22) & np.uint32(0x7FF000))
    y = _bits(_below(seed, i, 23, 2), 64 + _below(seed, i, 24, 126), _u32(seed, i, 25) & np.uint32(0x7FF800))
    with np.errstate(all="ignore"):
        p = _b32(_f32(x) * _f32(y))
    s = _below(seed, i, 26, 34) - 3
    mc = _below(seed, i, 27, 3)
    cm = _select([mc == 0, mc == 1], [0, 0x400000], _u32(seed, i, 28) & np.uint32(0x7FFFFF))
    z = _bits(_below(seed, i, 29, 2), np.clip(_exp_field(p) - s, 0, 254), cm)
    a[m], b[m], c[m] = x, y, z
    # products near 2^-126 with small or opposite addends; overflow
    m = (idx >= R[2]) & (idx < R[3])
    i = idx[m]
    kind = _below(seed, i, 40, 3)
    x = _value(seed, i, 41, 1, 254)
    y = _with_exp(_value(seed, i, 44), np.clip(127 - 126 + 127 - _exp_field(x) + _below(seed, i, 47, 7) - 4, 0, 254))
    z_small = _value(seed, i, 48, 0, 3)
    with np.errstate(all="ignore"):
        p = _b32(-(_f32(x) * _f32(y)))
    z_opp = _step(p, _below(seed, i, 51, 17) - 8)
    xo = _value(seed, i, 52, 130, 254)
    yo = _with_exp(_value(seed, i, 55), 254 + 128 - _exp_field(xo) + _below(seed, i, 58, 5) - 2)
    zo = _value(seed, i, 59, 250, 254)
    a[m] = np.where(kind < 2, x, xo)
    b[m] = np.where(kind < 2, y, yo)
    c[m] = _select([kind == 0, kind == 1], [z_small, z_opp], zo)
    m = idx >= R[3]
    a[m], b[m], c[m] = (_u32(seed, idx[m], s) for s in (70, 71, 72))
    return a, b, c


def _all16(seed, idx):
    return ((idx & 0xFFFF).astype(np.uint32),)


_GENERATORS = {"unary": _unary, "binary": _binary, "ternary": _ternary, "pair": _pair, "all16": _all16}
N_OPERANDS = {"unary": 1, "binary": 2, "ternary": 3, "pair": 2, "all16": 1}


def inputs(kind: str, seed: int = 0, start: int = 0, stop: int | None = None) -> tuple[np.ndarray, ...]:
    """Operands (uint32 bit patterns, one array per operand) for indices start..stop-1 of generator ``kind``."""
    if kind not in _GENERATORS:
        raise ValueError(f"kind must be one of {sorted(_GENERATORS)}, got {kind!r}")
    size = SIZES[kind]
    stop = size if stop is None else stop
    if not 0 <= start <= stop <= size:
        raise ValueError(f"need 0 <= start <= stop <= {size} for kind {kind!r}, got start={start}, stop={stop}")
    idx = np.arange(start, stop, dtype=np.int64)
    return tuple(np.ascontiguousarray(x, np.uint32) for x in _GENERATORS[kind](int(seed), idx))


# --------------------------------------------------------------------------------------------------------------
# golden sets and files
def sha256_u32(out: np.ndarray) -> str:
    """Hex SHA-256 of a uint32 array's little-endian bytes."""
    return hashlib.sha256(np.ascontiguousarray(out, dtype="<u4").tobytes()).hexdigest()


def chunk_digests(out: np.ndarray, chunk: int) -> list[str]:
    return [sha256_u32(out[i:i + chunk]) for i in range(0, out.size, chunk)]


@dataclass
class GoldenSet:
    """GPU outputs of one operation over one generator range, as chunk digests plus explicit vectors."""
    name: str                 # e.g. "add.rm.ftz", "ex2emu.packed.fa4d3", "ex2.approx.ftz.f32"
    ptx: str                  # the exact PTX that ran (fa4num.gpu.ptx)
    kind: str                 # input generator
    seed: int
    start: int
    stop: int
    chunk: int
    digests: list
    stride: int               # explicit vectors at indices start, start+stride, ...
    vectors: np.ndarray       # uint32 outputs at those indices
    meta: dict = field(default_factory=dict)   # operation parameters (op, rounding, ftz, variant, coeffs, ...)

    def indices(self) -> np.ndarray:
        return np.arange(self.start, self.stop, self.stride, dtype=np.int64)

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in ("name", "ptx", "kind", "seed", "start", "stop", "chunk", "digests",
                                           "stride", "meta")}
        d["vectors_b64"] = base64.b64encode(np.ascontiguousarray(self.vectors, "<u4").tobytes()).decode()
        return d

    @classmethod
    def from_json(cls, d: dict) -> "GoldenSet":
        d = dict(d)
        vec = np.frombuffer(base64.b64decode(d.pop("vectors_b64")), dtype="<u4").astype(np.uint32)
        return cls(vectors=vec, **d)


def make_set(name, ptx, kind, out, *, seed=0, start=0, chunk=1 << 16, stride=512, meta=None) -> GoldenSet:
    """Build a golden set from the full output array ``out`` (uint32) of indices start..start+len(out)-1."""
    out = np.asarray(out, np.uint32)
    return GoldenSet(name=name, ptx=ptx, kind=kind, seed=int(seed), start=int(start), stop=int(start + out.size),
                     chunk=int(chunk), digests=chunk_digests(out, chunk), stride=int(stride),
                     vectors=out[::stride].copy(), meta=dict(meta or {}))


@dataclass
class CheckResult:
    """Outcome of comparing an emulator with one golden set."""
    name: str
    n: int                    # inputs covered by digests
    chunks_bad: list          # indices of chunks whose digest differs
    vectors_bad: int          # explicit vectors that differ
    examples: list            # up to 10 (index, inputs, expected, got) among the explicit vectors

    @property
    def ok(self) -> bool:
        return not self.chunks_bad and not self.vectors_bad


def check_set(gs: GoldenSet, fn, *, chunks=None) -> CheckResult:
    """Run ``fn(*operands) -> uint32 array`` over the set's inputs and compare digests and explicit vectors.

    ``chunks``: iterable of chunk numbers to check (default all)."""
    nchunks = len(gs.digests)
    todo = range(nchunks) if chunks is None else chunks
    bad, n = [], 0
    for k in todo:
        lo = gs.start + k * gs.chunk
        hi = min(lo + gs.chunk, gs.stop)
        got = np.asarray(fn(*inputs(gs.kind, gs.seed, lo, hi)), np.uint32)
        n += hi - lo
        if sha256_u32(got) != gs.digests[k]:
            bad.append(k)
    idx = gs.indices()
    ops = _GENERATORS[gs.kind](gs.seed, idx)
    got = np.asarray(fn(*[np.ascontiguousarray(o, np.uint32) for o in ops]), np.uint32)
    diff = np.flatnonzero(got != gs.vectors)
    examples = [(int(idx[j]), [int(o[j]) for o in ops], int(gs.vectors[j]), int(got[j])) for j in diff[:10]]
    return CheckResult(gs.name, n, bad, int(diff.size), examples)


def write_file(path, sets: list[GoldenSet], provenance: dict, **extra) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": FORMAT, "provenance": provenance, **extra, "sets": [s.to_json() for s in sets]}
    path.write_bytes(lzma.compress(json.dumps(doc, separators=(",", ":")).encode(), preset=9))
    return path


def read_file(path) -> tuple[dict, list[GoldenSet]]:
    """(header without sets, sets) of a golden file."""
    doc = json.loads(lzma.decompress(Path(path).read_bytes()))
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path}: format must be {FORMAT!r}, got {doc.get('format')!r}")
    sets = [GoldenSet.from_json(d) for d in doc.pop("sets")]
    return doc, sets


# --------------------------------------------------------------------------------------------------------------
# exhaustive digests: all 2^32 fp32 inputs in chunks of 2^24 (chunk k holds the patterns k*2^24 .. k*2^24+2^24-1)
EXHAUSTIVE_CHUNK = 1 << 24


def exhaustive_inputs(chunk: int) -> np.ndarray:
    """The fp32 bit patterns of exhaustive chunk ``chunk`` (0..255)."""
    if not 0 <= chunk < 256:
        raise ValueError(f"chunk must be in 0..255, got {chunk}")
    return np.arange(chunk * EXHAUSTIVE_CHUNK, (chunk + 1) * EXHAUSTIVE_CHUNK, dtype=np.uint64).astype(np.uint32)


EXHAUSTIVE_FORMAT = "fa4num-exhaustive-digests/1"


def write_exhaustive(path, ops: dict, provenance: dict) -> Path:
    """ops: name -> {"ptx", "meta", "digests": 256 hex SHA-256 of the outputs of each exhaustive chunk}."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": EXHAUSTIVE_FORMAT, "provenance": provenance, "chunk": EXHAUSTIVE_CHUNK, "ops": ops}
    path.write_bytes(lzma.compress(json.dumps(doc, separators=(",", ":")).encode(), preset=9))
    return path


def read_exhaustive(path) -> dict:
    doc = json.loads(lzma.decompress(Path(path).read_bytes()))
    if doc.get("format") != EXHAUSTIVE_FORMAT:
        raise ValueError(f"{path}: format must be {EXHAUSTIVE_FORMAT!r}, got {doc.get('format')!r}")
    return doc
