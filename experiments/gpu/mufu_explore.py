"""Find the structure of MUFU ex2/rcp/lg2 on the GPU at hand (run once on the H200; results in $OUT).

1. Measures the candidate tables (fa4num.gpu.mufu_build plus extra lg2 binades) and saves them exactly.
2. Tests structural hypotheses over all 2^32 inputs with torch on the GPU, counting mismatches per
   (sign, exponent field) bin, with examples:
   - ex2.ftz(x) = table[frac of trunc_toward_zero(|x| 2^23)] * 2^(+-int part), flushed/overflowed at the ends
   - rcp.ftz(m 2^e) = rcp(m) 2^-e, flushed below 2^-126
   - lg2.ftz(m 2^e) = RN/RZ(e + lg2(m)) with m in [1,2) (H1) or m in [0.75,1.5) (H2)
   - the non-ftz forms = ptxas's scaling code around the ftz instruction (see fa4num.hw.mufu)
Usage: python experiments/gpu/mufu_explore.py OUTDIR
"""
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from fa4num.gpu import ptx
from fa4num.gpu.kernels import run, run_range, to_numpy
from fa4num.gpu import mufu_build as build
from fa4num.hw import tables
from fa4num.provenance import provenance

CH = 1 << 28
M32 = 0xFFFFFFFF


def measure():
    tabs = build.measure_tables()
    g = np.arange(1 << 23, dtype=np.uint32)
    for k in (-2, 1, 2, -20, 20):
        tabs[f"lg2_e{k}"] = to_numpy(run(ptx.MUFU["lg2.approx.ftz.f32"], g | np.uint32((127 + k) << 23)))
    return tabs


def i64(t):
    return t.to(torch.int64) & M32


def f32_of(bits64):
    b = bits64 & M32
    return torch.where(b >= 2 ** 31, b - 2 ** 32, b).to(torch.int32).view(torch.float32)


def bits_of(f):
    return f.contiguous().view(torch.int32).to(torch.int64) & M32


def ex2_ftz(b, T):
    s, E, M = b >> 31, (b >> 23) & 255, b & 0x7FFFFF
    sig = torch.where(E > 0, M | 0x800000, 0)
    sh = E - 127
    t = torch.where(sh >= 0, sig << sh.clamp(0, 16), sig >> (-sh).clamp(0, 40))
    k, g = t >> 23, t & 0x7FFFFF
    tp, tn = T["ex2_pos"][g], T["ex2_neg"][g]
    pos = torch.where(((tp >> 23) + k) >= 255, 0x7F800000, tp + (k << 23))
    neg = torch.where(((tn >> 23) - k) <= 0, 0, tn - (k << 23))
    out = torch.where(s == 0, pos, neg)
    return torch.where((E == 255) & (M != 0), 0x7FFFFFFF, out)


def rcp_ftz(b, T):
    s, E, M = b >> 31, (b >> 23) & 255, b & 0x7FFFFF
    r = T["rcp"][M]
    Eo = ((r >> 23) & 255) - (E - 127)
    mag = torch.where(Eo > 0, (Eo.clamp(0, 254) << 23) | (r & 0x7FFFFF), 0)
    mag = torch.where(E == 0, 0x7F800000, mag)
    mag = torch.where(E == 255, 0, mag)
    out = (s << 31) | mag
    return torch.where((E == 255) & (M != 0), 0x7FFFFFFF, out)


def lg2_ftz(b, T, hyp, rz):
    s, E, M = b >> 31, (b >> 23) & 255, b & 0x7FFFFF
    e = (E - 127).to(torch.float64)
    L0 = f32_of(T["lg2_e0"][M]).to(torch.float64)
    if hyp == 2:
        Lm = f32_of(T["lg2_e-1"][M]).to(torch.float64)
        hi = M >= 0x400000
        v = torch.where(hi, e + 1 + Lm, e + L0)
    else:
        v = e + L0
    f = v.to(torch.float32)
    fb = bits_of(f)
    if rz:
        fb = torch.where(f.to(torch.float64).abs() > v.abs(), fb - 1, fb)
    out = fb
    out = torch.where(E == 0, 0xFF800000, out)
    out = torch.where((s == 1) & (E > 0), 0x7FFFFFFF, out)
    out = torch.where((E == 255) & (s == 0), 0x7F800000, out)
    return torch.where((E == 255) & (M != 0), 0x7FFFFFFF, out)


def nonftz(fn, b, ftz_model):
    """ptxas's expansion of the non-ftz forms (SASS read from Triton 3.6's ptxas, sm_90a)."""
    x = f32_of(b)
    if fn == "ex2":
        low = x < -126.0                                   # FSETP.GEU x, -126 (NaN counts as >=)
        y = f32_of(ftz_model(bits_of(torch.where(low, x * 0.5, x))))
        y = torch.where(low, y * y, y)                     # FMUL, no ftz: RN with subnormals
        return bits_of(y)
    ax = x.abs()
    if fn == "rcp":
        sc = torch.where(ax < 2.0 ** -126, 2.0 ** 24, 1.0)
        sc = torch.where(ax > 2.0 ** 126, 0.25, sc).to(torch.float32)
        r = f32_of(ftz_model(bits_of(x * sc)))
        return bits_of(r * sc)
    low = ax < 2.0 ** -126
    r = f32_of(ftz_model(bits_of(torch.where(low, x * 2.0 ** 24, x))))
    return bits_of(torch.where(low, r - 24.0, r))


def main(outdir):
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    tabs = measure()
    prov = provenance(tool="experiments/gpu/mufu_explore.py")
    (outdir / "mufu_raw_sm90.npz.xz").write_bytes(tables.encode(tabs, prov))
    T = {k: torch.from_numpy(v.astype(np.int64)).cuda() for k, v in tabs.items()}
    models = {
        "ex2.approx.ftz.f32": lambda b: ex2_ftz(b, T),
        "rcp.approx.ftz.f32": lambda b: rcp_ftz(b, T),
        "lg2.approx.ftz.f32:H1rn": lambda b: lg2_ftz(b, T, 1, False),
        "lg2.approx.ftz.f32:H1rz": lambda b: lg2_ftz(b, T, 1, True),
        "lg2.approx.ftz.f32:H2rn": lambda b: lg2_ftz(b, T, 2, False),
        "lg2.approx.ftz.f32:H2rz": lambda b: lg2_ftz(b, T, 2, True),
        "ex2.approx.f32": lambda b: nonftz("ex2", b, lambda c: ex2_ftz(c, T)),
        "rcp.approx.f32": lambda b: nonftz("rcp", b, lambda c: rcp_ftz(c, T)),
        "lg2.approx.f32:H1rn": lambda b: nonftz("lg2", b, lambda c: lg2_ftz(c, T, 1, False)),
    }
    res = {"provenance": prov, "models": {}}
    for name, model in models.items():
        op = ptx.MUFU[name.split(":")[0]]
        hist = torch.zeros(512, dtype=torch.int64, device="cuda")
        nan_only = 0
        examples = []
        for start in range(0, 1 << 32, CH):
            gpu = i64(run_range(op, start, CH))
            b = torch.arange(start, start + CH, dtype=torch.int64, device="cuda")
            mdl = model(b) & M32
            bad = gpu != mdl
            both_nan = (((gpu >> 23) & 255) == 255) & ((gpu & 0x7FFFFF) != 0) & (((mdl >> 23) & 255) == 255) & ((mdl & 0x7FFFFF) != 0)
            nan_only += int((bad & both_nan).sum())
            if bool(bad.any()):
                hist += torch.bincount((b[bad] >> 23), minlength=512)
                if len(examples) < 400:
                    # a few per bin
                    idx = torch.nonzero(bad).flatten()
                    bins = b[idx] >> 23
                    first = torch.unique(bins)
                    for bb in first.tolist()[:40]:
                        sel = idx[bins == bb][:4]
                        for j in sel.tolist():
                            examples.append([int(b[j]), int(gpu[j]), int(mdl[j])])
        h = hist.cpu().numpy()
        res["models"][name] = {"mismatches": int(h.sum()), "nan_bits_only": nan_only,
                               "bins": {int(k): int(h[k]) for k in np.flatnonzero(h)}, "examples": examples[:600]}
        print(f"{name:28s} mismatches {int(h.sum()):>12d} (nan-bits-only {nan_only}) bins {len(np.flatnonzero(h))}",
              flush=True)
    res["seconds"] = time.time() - t0
    (outdir / "mufu_explore.json").write_text(json.dumps(res))
    print("explore done in %.1f s" % res["seconds"])


if __name__ == "__main__":
    main(sys.argv[1])
