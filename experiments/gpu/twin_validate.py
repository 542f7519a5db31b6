"""On the H200: the GPU twin against the CPU emulator on the corpus of twin_cases.py, bit for bit.

    python experiments/gpu/twin_validate.py OUT_DIR [--only NAME ...]

Writes OUT_DIR/twin_vs_emulator.json (per case: differing bits of out, LSE and every counter, times) and
OUT_DIR/twin_golden.json (the twin's digests of every case, for tests/golden/; the CPU test recomputes them with
the emulator). Provenance from fa4num.gpu.run_provenance.
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args(argv)
    import torch
    from fa4num.attention import forward, plan
    from fa4num.gpu import run_provenance
    from fa4num.attention import twin
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, golden = [], {}
    for case in twin_cases.cases():
        if args.only and case["name"] not in args.only:
            continue
        q, k, v, kw = twin_cases.inputs(case)
        if twin.refusal(plan(q, k, v, **kw)) is not None:
            print(f"{case['name']:32s} REFUSED {twin.refusal(plan(q, k, v, **kw))}", flush=True)
            continue
        t0 = time.perf_counter()
        res_t = twin.forward(q.cuda(), k.cuda(), v.cuda(), **kw)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        res_e = forward(q, k, v, **kw)
        t2 = time.perf_counter()
        diff = compare(res_e, res_t)
        ok = all(x == 0 for x in diff.values())
        rows.append(dict(name=case["name"], kernel=case["kernel"], dtype=case["dtype"],
                         shape=[case[n] for n in ("b", "sq", "sk", "h", "hk", "d", "dv")],
                         opts={kk: (vv if not isinstance(vv, np.ndarray) else vv.tolist())
                               for kk, vv in kw.items()},
                         differing=diff, equal=ok, twin_s=round(t1 - t0, 3), emulator_s=round(t2 - t1, 3),
                         rescales_done=int(np.asarray(res_t.stats.rescales_done).sum()),
                         rescales_warp=int(np.asarray(res_t.stats.rescales_warp).sum()),
                         rescale_events=int(np.asarray(res_t.stats.rescale_events).sum())))
        golden[case["name"]] = twin_cases.digest(res_t)
        print(f"{case['name']:32s} {'EQUAL' if ok else 'DIFF ' + json.dumps(diff)}  twin {t1 - t0:.2f}s "
              f"emulator {t2 - t1:.2f}s", flush=True)
    prov = run_provenance(script="experiments/gpu/twin_validate.py")
    summary = dict(cases=len(rows), equal=sum(r["equal"] for r in rows))
    (out / "twin_vs_emulator.json").write_text(json.dumps(dict(provenance=prov, summary=summary, cases=rows),
                                                          indent=1))
    (out / "twin_golden.json").write_text(json.dumps(dict(
        provenance=prov, source="fa4num.attention.twin.forward on the H200 (each case also equal to the CPU emulator "
        "in twin_vs_emulator.json)", cases=golden), indent=1))
    print(json.dumps(summary))
    return 0 if summary["equal"] == summary["cases"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
