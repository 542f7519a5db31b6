"""Check the reproducibility planner (fa4num.attention.same_bits / plan_of) against the real FA4 kernel on the
H200 (flash-attn-4, SM90 path): for pairs of calls that share logical rows -- decode vs prefill, batch 1 vs 4,
chunked prefill, varlen packing, head dim 256 decode at batch 1 vs 8 (16 heads), GQA with pack_gqa on/off, and
causal vs a window as wide as the keys (the same mask, another tile at head dims 192/256) --
does each shared row get equal bits on the GPU exactly where the planner (the bit-exact emulator's comparison,
explained by the plans' decisions) says it does?

The cases are drawn from ``--seed`` (lengths, head dims, heads, chunk points, batch positions), so a seed nobody
has run before gives cases never seen. Per pair the JSON holds the planner's result (rows, rows with equal bits,
rows whose decisions are all equal, the differing decisions and reasons), the GPU's (rows with equal bits, ulp
histogram), the row-by-row agreement of the two, soundness (rows with all decisions equal must be equal on the
GPU) and the emulator against the kernel bit for bit (output elements and LSE values that differ per call).

Run on the device machine (FA4 importable as ``flash_attn.cute``, e.g. after ``. fa4num/gpu/fa4-env.sh``), from
the repository root:
    python experiments/gpu/planner_check.py --out $OUT --seed 2026
Writes $OUT/planner_check_h200.json; exit status 0 when every pair agrees row by row and every prediction is
sound, 1 otherwise. Without a GPU: ``--plan-only`` lists the cases and their plans' decisions (no kernel, no
emulator); ``--no-gpu`` runs the planner's half (the emulator) alone.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fa4num.attention import forward, plan_of  # noqa: E402
from fa4num.attention.compare import CallSpec, call_inputs, plan_call, same_bits  # noqa: E402


def cases(seed: int) -> list:
    """[(name, CallSpec A, CallSpec B, rows)] drawn from ``seed``: FA4's SM90 forward (no split-KV there)."""
    rng = np.random.default_rng(seed)

    def pick(*xs):
        return xs[int(rng.integers(len(xs)))]

    out = []
    for causal in (True, False):
        n, d, h = int(rng.integers(150, 2100)), pick(64, 96, 128), pick(1, 2, 4)
        fa = {"causal": causal}
        out.append((f"decode_vs_prefill_{'causal' if causal else 'full'}",
                    CallSpec(seqlen_q=1, seqlen_k=n, heads=h, head_dim=d, fa4=fa),
                    CallSpec(seqlen_q=n, seqlen_k=n, heads=h, head_dim=d, fa4=fa), None))
    for causal in (True, False):
        sq, d, h = int(rng.integers(50, 700)), pick(64, 128, 192), pick(1, 2, 4)
        sk = sq + int(rng.integers(0, 400))
        j = int(rng.integers(4))
        fa = {"causal": causal}
        out.append((f"batch1_vs_4_{'causal' if causal else 'full'}",
                    CallSpec(batch=1, seqlen_q=sq, seqlen_k=sk, heads=h, head_dim=d, first=j, fa4=fa),
                    CallSpec(batch=4, seqlen_q=sq, seqlen_k=sk, heads=h, head_dim=d, fa4=fa), [(0, j)]))
    for d in (pick(64, 96), pick(128, 256)):
        n = int(rng.integers(600, 2000))
        c = int(rng.integers(1, n - 1))
        h = pick(1, 2)
        fa = {"causal": True}
        out.append((f"chunked_prefill_d{d}",
                    CallSpec(seqlen_q=n, seqlen_k=n, heads=h, head_dim=d, fa4=fa),
                    CallSpec(seqlen_q=n - c, seqlen_k=n, heads=h, head_dim=d, fa4=fa), None))
    lens_k = [int(x) for x in rng.integers(30, 900, size=3)]
    lens_q = [int(rng.integers(1, n + 1)) for n in lens_k]
    d, h = pick(64, 128), pick(2, 4)
    for causal in (True, False):
        fa = {"causal": causal}
        packed = CallSpec(batch=3, heads=h, head_dim=d, varlen=True, seqlens_q=tuple(lens_q), seqlens_k=tuple(lens_k),
                          fa4=fa)
        for i in range(3):
            out.append((f"varlen_packing_seq{i}_{'causal' if causal else 'full'}",
                        CallSpec(batch=1, seqlen_q=lens_q[i], seqlen_k=lens_k[i], heads=h, head_dim=d, first=i,
                                 fa4=fa), packed, [(0, i)]))
    sk = int(rng.integers(100, 3000))
    out.append(("hd256_decode_batch1_vs_8",
                CallSpec(batch=1, seqlen_q=1, seqlen_k=sk, heads=16, head_dim=256),
                CallSpec(batch=8, seqlen_q=1, seqlen_k=sk, heads=16, head_dim=256), [(0, 0)]))
    for causal in (True, False):
        g, hk = pick(2, 3, 4, 6, 8), pick(1, 2)
        sq = int(rng.integers(20, 600))
        sk = sq + int(rng.integers(0, 300))
        d = pick(64, 128, 256)
        out.append((f"gqa{g}_pack_on_vs_off_{'causal' if causal else 'full'}",
                    CallSpec(seqlen_q=sq, seqlen_k=sk, heads=g * hk, heads_kv=hk, head_dim=d,
                             fa4={"causal": causal, "pack_gqa": True}),
                    CallSpec(seqlen_q=sq, seqlen_k=sk, heads=g * hk, heads_kv=hk, head_dim=d,
                             fa4={"causal": causal, "pack_gqa": False}), None))
    # a window as wide as the keys masks what causal masks, but picks SM90's local tile (tile_n 64 instead of 80
    # at head dim 256, 96 instead of 128/112 at 192; the same 128 at 128): rows whose bits must differ, or not
    for d in (128, pick(192, 256)):
        n = int(rng.integers(200, 1500))
        h = pick(1, 2)
        out.append((f"causal_vs_wide_window_d{d}",
                    CallSpec(seqlen_q=n, seqlen_k=n, heads=h, head_dim=d, fa4={"causal": True}),
                    CallSpec(seqlen_q=n, seqlen_k=n, heads=h, head_dim=d, fa4={"window_size": (n, 0)}), None))
    return out


def _torch(a, torch):
    if a.dtype.kind == "i":
        return torch.from_numpy(np.ascontiguousarray(a, np.int32)).cuda()
    if a.dtype == np.float16:
        return torch.from_numpy(a).cuda()
    return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda()


def run_fa4(args: dict, torch):
    """FA4's (out, lse) for call_inputs' arguments, as numpy in fa4num's layouts."""
    from flash_attn.cute import flash_attn_func, flash_attn_varlen_func
    q, k, v = (_torch(args[n], torch) for n in "qkv")
    kw = {"causal": args.get("causal", False), "return_lse": True}
    for n in ("pack_gqa", "window_size", "softcap", "softmax_scale"):
        if n in args:
            kw[n] = args[n]
    if "cu_seqlens_q" in args:
        cq, ck = args["cu_seqlens_q"], args["cu_seqlens_k"]
        o, lse = flash_attn_varlen_func(q, k, v, cu_seqlens_q=_torch(cq, torch), cu_seqlens_k=_torch(ck, torch),
                                        max_seqlen_q=int(np.diff(cq).max()), max_seqlen_k=int(np.diff(ck).max()),
                                        **kw)
    else:
        o, lse = flash_attn_func(q, k, v, **kw)
    torch.cuda.synchronize()
    bits = o.detach().contiguous().view(torch.int16).cpu().numpy()
    return bits.view(args["q"].dtype), lse.detach().float().cpu().numpy()


def _versions():
    def ver(p):
        try:
            return importlib.metadata.version(p)
        except importlib.metadata.PackageNotFoundError:
            return None
    return {p: ver(p) for p in ("flash-attn-4", "torch", "nvidia-cutlass-dsl", "numpy", "ml_dtypes", "numba")}


def check_pair(name, a, b, rows, *, seed, torch):
    store = [a, b]
    longest = max(max(s.lengths_k) for s in store)
    rec = {"name": name, "call_a": a.as_dict(), "call_b": b.as_dict(), "rows_arg": rows}
    pa, pb = (plan_call(s, store=store, seed=seed) for s in store)
    t0 = time.time()
    emu_res = [forward(problem=p) for p in (pa, pb)]
    emu = same_bits(pa, pb, rows=rows, outputs=[(r.out, r.lse) for r in emu_res])
    rec["seconds_emulator"] = round(time.time() - t0, 1)
    rec["planner"] = emu.as_dict()
    if torch is None:
        return rec
    real_out = [run_fa4(call_inputs(s, store_len=longest, seed=seed), torch) for s in store]
    real = same_bits(pa, pb, rows=rows, outputs=real_out)
    rec["gpu"] = {k: v for k, v in real.as_dict().items() if k in ("rows", "rows_equal", "ulps", "lse_ulps",
                                                                   "out_elements_differ", "out_elements")}
    pairs = list(zip(emu.row_results, real.row_results))
    assert all((x.seq_a, x.position, x.head) == (y.seq_a, y.position, y.head) for x, y in pairs)
    disagree = [dict(position=x.position, head=x.head, planner_equal=x.equal, gpu_equal=y.equal,
                     differs=sorted(x.differs)) for x, y in pairs if x.equal != y.equal]
    unsound = [dict(position=y.position, head=y.head) for x, y in pairs if not x.differs and not y.equal]
    rec["agreement"] = {"rows": len(pairs), "rows_agree": len(pairs) - len(disagree), "disagree": disagree[:20],
                        "predicted_equal_but_gpu_differs": len(unsound), "unsound_rows": unsound[:20]}
    # the emulator against the kernel, bit for bit, each call (the premise of every prediction)
    emu_vs = []
    for r, (o, lse) in zip(emu_res, real_out):
        emu_vs.append({"out_mismatches": int((np.asarray(r.out).view(np.uint16) != o.view(np.uint16)).sum()),
                       "out_size": int(o.size),
                       "lse_mismatches": int((r.lse.view(np.uint32) != lse.view(np.uint32)).sum()),
                       "lse_size": int(lse.size)})
    rec["emulator_vs_gpu"] = emu_vs
    rec["ok"] = not disagree and not unsound
    return rec


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="folder for planner_check_h200.json")
    ap.add_argument("--seed", type=int, default=2026, help="draws the cases (and the inputs)")
    ap.add_argument("--only", default="", help="comma-separated case-name prefixes to run (default all)")
    ap.add_argument("--plan-only", action="store_true", help="list the cases and their decisions; no kernel")
    ap.add_argument("--no-gpu", action="store_true", help="the planner's half only (the emulator), no kernel")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    todo = [c for c in cases(args.seed) if not args.only or any(c[0].startswith(p) for p in args.only.split(","))]
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "seed": args.seed,
              "packages": _versions(), "cases": []}
    torch = None
    if not (args.plan_only or args.no_gpu):
        import torch
        report["gpu"] = torch.cuda.get_device_name()
    for name, a, b, rows in todo:
        t0 = time.time()
        if args.plan_only:
            store = [a, b]
            plans = [plan_of(plan_call(s, store=store, seed=args.seed)) for s in store]
            rec = {"name": name, "call_a": a.as_dict(), "call_b": b.as_dict(),
                   "decisions": [{k: v for k, v in p.decisions().items()} for p in plans],
                   "tiles": [len(p.tiles) for p in plans]}
        else:
            rec = check_pair(name, a, b, rows, seed=args.seed, torch=torch)
        rec["seconds"] = round(time.time() - t0, 1)
        report["cases"].append(rec)
        pl = rec.get("planner", {})
        print(f"{name:38s} {rec['seconds']:6.1f}s planner {pl.get('rows_equal', '-')}/{pl.get('rows', '-')} equal "
              f"(predicted {pl.get('predicted_equal', '-')})"
              + (f" gpu {rec['gpu']['rows_equal']}/{rec['gpu']['rows']} agree {rec['agreement']['rows_agree']} "
                 f"ok={rec['ok']}" if "gpu" in rec else ""), flush=True)
        (out / "planner_check_h200.json").write_text(json.dumps(report, indent=1, default=_json) + "\n")
    if torch is None:
        return 0
    report["all_ok"] = all(c["ok"] for c in report["cases"])
    (out / "planner_check_h200.json").write_text(json.dumps(report, indent=1, default=_json) + "\n")
    print("all pairs agree row by row and every prediction is sound" if report["all_ok"] else "DISAGREEMENT: see "
          "the JSON")
    return 0 if report["all_ok"] else 1


def _json(x):
    if hasattr(x, "tolist"):
        return x.tolist()
    return str(x)


if __name__ == "__main__":
    sys.exit(main())
