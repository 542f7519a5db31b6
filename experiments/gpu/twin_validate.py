"""On the H200: the GPU twin against the CPU emulator on the corpus of twin_cases.py, bit for bit.

    python experiments/gpu/twin_validate.py OUT_DIR [--set corpus|layouts] [--only NAME ...]

``--set corpus`` (default): the corpus of the committed goldens (``twin_cases.cases``); writes
OUT_DIR/twin_vs_emulator.json (per case: differing bits of out, LSE and every counter, times) and
OUT_DIR/twin_golden.json (the twin's digests of every case, for tests/golden/; the CPU test recomputes them with
the emulator).

``--set layouts``: varlen, seqused_q/k, paged KV and SM100 split-KV (``twin_cases.layout_cases``); writes
OUT_DIR/twin_vs_emulator_layouts.json and OUT_DIR/twin_golden_layouts.json the same way, and
OUT_DIR/twin_vs_fa4_varlen.json: the twin (``kernel="fa4-sm90"``) against the real FA4 SM90 kernel's committed
varlen goldens (fa4num/data/golden/fa4_sm90_features_{dev,holdout}_h200.npz, fa4num.attention.golden).

``--fa4-only``: only that last comparison (under ``TRITON_INTERPRET=1`` the CPU runs it, the twin's kernel in
Triton's interpreter).

Provenance from fa4num.gpu.run_provenance. Exit status 1 if any bit differs.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import twin_cases  # noqa: E402


def _np_bits(x):
    import torch
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        return (x.view(torch.int16) if x.element_size() == 2 else x.view(torch.int32)).numpy()
    x = np.asarray(x)
    return x.view(np.int16) if x.dtype.itemsize == 2 else x.view(np.int32)


def compare(emu, twin) -> dict:
    diff = {"out": int((_np_bits(emu.out) != _np_bits(twin.out)).sum()),
            "lse": int((_np_bits(emu.lse) != _np_bits(twin.lse)).sum())}
    for n in twin_cases.COUNTERS:
        a, b = np.asarray(getattr(emu.stats, n)), np.asarray(getattr(twin.stats, n))
        diff[n] = int((a.view(np.int32) != b.view(np.int32)).sum()) if a.shape == b.shape else -1
    return diff


def _jsonable(kw: dict) -> dict:
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in kw.items()}


def against_fa4_varlen() -> list[dict]:
    """The twin (SM90 numerics) on the varlen cases of the real FA4 SM90 kernel's feature goldens: differing
    bits among those the goldens hold."""
    from fa4num.attention import golden
    rows = []
    for tag, path in golden.FEATURE_FILES.items():
        z = np.load(path)
        meta = json.loads(str(z["meta"]))
        for rec in meta["cases"]:
            if "varlen" not in rec["case"]:
                continue
            c = golden.check_feature_case(rec, z, device="cuda")
            rows.append(dict(file=tag, name=c.name, inputs_match=c.inputs_match, out_digest_match=c.out_digest_match,
                             out_mismatches=c.out_mismatches, out_checked=c.out_checked,
                             lse_mismatches=c.lse_mismatches, lse_size=c.lse_size, bit_exact=c.bit_exact))
            print(f"FA4 {tag}:{c.name:28s} {'EQUAL' if c.bit_exact else 'DIFF'} ({c.out_mismatches}/{c.out_checked} "
                  f"out, {c.lse_mismatches}/{c.lse_size} LSE, digest {c.out_digest_match})", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--set", choices=("corpus", "layouts"), default="corpus", dest="which")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--fa4-only", action="store_true",
                    help="only the twin vs the real FA4 kernel's varlen goldens (with TRITON_INTERPRET=1 the CPU "
                    "can run it: a few minutes per case)")
    args = ap.parse_args(argv)
    import torch
    from fa4num.attention import forward, plan
    from fa4num.gpu import run_provenance
    from fa4num.attention import twin
    from fa4num.attention.triton_backend import interpreted
    dev = "cpu" if interpreted() else "cuda"    # Triton's interpreter (TRITON_INTERPRET=1) stands in for the GPU
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    layouts = args.which == "layouts"
    suffix = "_layouts" if layouts else ""
    rows, golden = [], {}
    for case in twin_cases.layout_cases() if layouts else twin_cases.cases():
        if args.fa4_only or args.only and case["name"] not in args.only:
            continue
        q, k, v, kw = twin_cases.inputs(case)
        why = twin.refusal(plan(q, k, v, **kw))
        if why is not None:
            print(f"{case['name']:32s} REFUSED {why}", flush=True)
            continue
        t0 = time.perf_counter()
        res_t = twin.forward(q.to(dev), k.to(dev), v.to(dev), **kw)
        if dev == "cuda":
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        res_e = forward(q, k, v, **kw)
        t2 = time.perf_counter()
        diff = compare(res_e, res_t)
        ok = all(x == 0 for x in diff.values())
        rows.append(dict(name=case["name"], kernel=case["kernel"], dtype=case["dtype"],
                         shape=[case[n] for n in ("b", "sq", "sk", "h", "hk", "d", "dv")],
                         layout={n: case[n] for n in ("varlen", "paged") if case.get(n)},
                         q=list(q.shape), k=list(k.shape), opts=_jsonable(kw), num_splits=res_t.num_splits,
                         differing=diff, equal=ok, twin_s=round(t1 - t0, 3), emulator_s=round(t2 - t1, 3),
                         rescales_done=int(np.asarray(res_t.stats.rescales_done).sum()),
                         rescales_warp=int(np.asarray(res_t.stats.rescales_warp).sum()),
                         rescale_events=int(np.asarray(res_t.stats.rescale_events).sum())))
        golden[case["name"]] = twin_cases.digest(res_t)
        print(f"{case['name']:32s} {'EQUAL' if ok else 'DIFF ' + json.dumps(diff)}  twin {t1 - t0:.2f}s "
              f"emulator {t2 - t1:.2f}s", flush=True)
    prov = run_provenance(script="experiments/gpu/twin_validate.py")
    summary = dict(cases=len(rows), equal=sum(r["equal"] for r in rows))
    fa4 = []
    if layouts and not args.only or args.fa4_only:
        t0 = time.perf_counter()
        fa4 = against_fa4_varlen()
        (out / "twin_vs_fa4_varlen.json").write_text(json.dumps(dict(
            provenance=prov, device=dev, seconds=round(time.perf_counter() - t0, 1),
            source="fa4num.attention.twin.forward (kernel='fa4-sm90') vs the real FA4 SM90 kernel's varlen feature "
            "goldens (fa4num.attention.golden.FEATURE_FILES); device 'cpu': the twin's kernel in Triton's "
            "interpreter on fa4num's instruction models", cases=fa4), indent=1))
        summary.update(fa4_cases=len(fa4), fa4_equal=sum(r["bit_exact"] for r in fa4))
        if args.fa4_only:
            print(json.dumps(summary))
            return 0 if all(r["bit_exact"] for r in fa4) else 1
    (out / f"twin_vs_emulator{suffix}.json").write_text(json.dumps(dict(provenance=prov, summary=summary,
                                                                        cases=rows), indent=1))
    (out / f"twin_golden{suffix}.json").write_text(json.dumps(dict(
        provenance=prov, source="fa4num.attention.twin.forward on the H200 (each case also equal to the CPU emulator "
        f"in twin_vs_emulator{suffix}.json)", cases=golden), indent=1))
    print(json.dumps(summary))
    ok = summary["equal"] == summary["cases"] and all(r["bit_exact"] for r in fa4)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
