"""Bit-exact model of ``tanh.approx.f32`` (MUFU.TANH), the soft cap's tanh in FA4 (``utils.create_softcap_scoremod``,
``cute.math.tanh(fastmath=True)``), from a compact table measured on a GPU over all 2^32 inputs
(experiments/gpu/mufu_tanh.py).

The table describes each binade (sign, exponent field E) of the input by one of:
  identity  -- the output bits equal the input bits (tiny |x|: tanh x = x);
  const     -- one output for the whole binade (large |x|: +-1);
  table     -- the output depends only on the top 23 - drop mantissa bits: table[offset + (M >> drop)];
E = 255 (inf, NaN) is a binade like the others. The GPU script rebuilds all 2^32 outputs from this description
and counts the mismatches before writing it, so a table that loads is exact on every input it was measured on.
The sm90 table measured on the H200 ships with the package as fa4num/hw/data/tanh_sm90.npz.xz, stored like the
other MUFU tables (fa4num.hw.tables; :func:`save_tanh_table` converts a GPU capture); the SM100 emulation uses
it too by default (``mufu_arch="sm90"``: no Blackwell GPU was available to measure one). For an arch with no
table file, :func:`tanh_table_available` is False and callers fall back to libm's tanh, which results report
(``tanh_exact``).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from . import tables as _tables
from .mufu import _as_bits, _finish   # the MUFU models' one input rule: float32 only, arrays or tensors

KINDS = {"identity": 0, "const": 1, "table": 2}
_FIELDS = {"kind": np.uint8, "drop": np.uint8, "const": np.uint32, "offset": np.int64}   # (2, 256) each


def save_tanh_table(arch: str, capture, path=None):
    """Store a measured ``tanh.approx.f32`` description as fa4num/hw/data/tanh_<arch>.npz.xz, in the format of the
    other MUFU tables (fa4num.hw.tables: first differences, lzma, the capture's provenance inside).

    Parameters
    ----------
    arch : str
    capture : str or Path
        The file experiments/gpu/mufu_tanh.py wrote (kind, drop, const, offset, table or table_diff, mismatches,
        meta); refused unless its self-check counted 0 mismatches.
    path : str or Path, optional
        Where to write (default: the package's data folder).

    Returns
    -------
    Path
    """
    import json
    z = np.load(capture)
    if int(z["mismatches"]) != 0:
        raise ValueError(f"capture {capture} records {int(z['mismatches'])} mismatches; only an exact table is stored")
    table = (np.cumsum(z["table_diff"], dtype=np.int64).astype(np.uint32) if "table_diff" in z.files
             else z["table"])
    tables = {f"tanh_{k}": np.asarray(z[k]).reshape(-1) for k in _FIELDS}
    tables["tanh_table"] = table
    meta = json.loads(str(z["meta"]))
    return _tables.save(arch, tables, {**meta["provenance"], "binades": meta.get("binades")},
                        path=path if path is not None else _tables.tanh_table_path(arch))


@lru_cache(maxsize=None)
def _load(arch: str):
    """The measured table of ``arch`` (fa4num/hw/data/tanh_<arch>.npz.xz), or None; read once per arch."""
    path = _tables.tanh_table_path(arch)
    if not path.exists():
        return None
    tabs, _ = _tables.decode(path.read_bytes())
    t = {k: tabs[f"tanh_{k}"].astype(dt).reshape(2, 256) for k, dt in _FIELDS.items()}
    t["table"] = tabs["tanh_table"]
    return t


def tanh_table(arch: str = "sm90"):
    """The measured ``tanh.approx.f32`` table of ``arch`` as arrays, or None when there is none.

    For analyses that need every output, such as error bounds.

    Parameters
    ----------
    arch : str

    Returns
    -------
    dict or None
        "kind", "drop", "const", "offset": (2, 256) arrays indexed by sign and exponent field (see the module
        docstring); "table": the uint32 entries.

    Examples
    --------
    >>> t = tanh_table("sm90")
    >>> sorted(t), t["kind"].shape
    (['const', 'drop', 'kind', 'offset', 'table'], (2, 256))
    >>> tanh_table("sm00") is None
    True
    """
    return _load(arch)


def tanh_table_available(arch: str = "sm90") -> bool:
    """Whether a measured, self-checked ``tanh.approx.f32`` table exists for ``arch``.

    Parameters
    ----------
    arch : str

    Returns
    -------
    bool

    Examples
    --------
    >>> tanh_table_available("sm90"), tanh_table_available("sm00")
    (True, False)
    """
    return _load(arch) is not None


def mufu_tanh(x, *, arch: str = "sm90", ftz: bool = True) -> np.ndarray:
    """Bit-exact ``tanh.approx.f32`` (MUFU.TANH) of a float32 array on ``arch``, from the measured table.

    The soft cap's tanh in FA4 (``utils.create_softcap_scoremod``, ``cute.math.tanh(fastmath=True)``).

    Parameters
    ----------
    x : float32 array or torch float32 tensor
        Any other dtype raises ValueError, as for :func:`fa4num.hw.mufu_ex2` (no silent rounding of a wider
        input).
    arch : str
    ftz : bool
        Accepted for a uniform MUFU signature; tanh.approx has no .ftz form and passes subnormals through, which
        the table records.

    Returns
    -------
    float32 array of x's shape (a tensor on x's device for a tensor)

    Raises
    ------
    ValueError
        When no measured table exists for ``arch`` (tanh_table_available is False), or x is not float32.

    Examples
    --------
    >>> import numpy as np
    >>> y = mufu_tanh(np.array([0.0, 2 ** -20, 0.5, 20.0], np.float32))
    >>> y[:2].tolist(), float(y[3]), y.dtype.name
    ([0.0, 9.5367431640625e-07], 1.0, 'float32')
    >>> abs(float(y[2]) - float(np.tanh(0.5))) < 2 ** -10
    True
    """
    t = _load(arch)
    if t is None:
        raise ValueError(f"no measured tanh.approx.f32 table for arch {arch!r} (run experiments/gpu/mufu_tanh.py "
                         "on that GPU)")
    b, shape, device = _as_bits(x)
    s = (b >> 31).astype(np.int64)
    e = ((b >> 23) & 0xFF).astype(np.int64)
    m = (b & 0x7FFFFF).astype(np.int64)
    kind = t["kind"][s, e]
    idx = np.where(kind == KINDS["table"], t["offset"][s, e] + (m >> t["drop"][s, e]), 0)
    out = np.where(kind == KINDS["identity"], b,
                   np.where(kind == KINDS["const"], t["const"][s, e], t["table"][np.minimum(idx, t["table"].size - 1)]))
    return _finish(out.astype(np.uint32), shape, device)


def describe_binade(out_bits: np.ndarray, in_bits: np.ndarray, mbits: int = 23):
    """(kind, drop, const, table) for one binade: ``out_bits``/``in_bits`` (2^mbits,) uint32 over the
    mantissas in order. ``drop`` is the largest number of low mantissa bits the output ignores."""
    if np.array_equal(out_bits, in_bits):
        return KINDS["identity"], 0, 0, np.zeros(0, np.uint32)
    if (out_bits == out_bits[0]).all():
        return KINDS["const"], 0, int(out_bits[0]), np.zeros(0, np.uint32)
    def flat(b):
        g = out_bits.reshape(-1, 1 << b)
        return bool((g == g[:, :1]).all())
    lo, hi = 0, mbits          # flat(lo) holds; constancy on groups of 2^b implies it on groups of 2^(b-1)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if flat(mid) else (lo, mid - 1)
    drop = lo
    return KINDS["table"], drop, 0, np.ascontiguousarray(out_bits[::1 << drop])
