"""On the H200: the GPU twin's FlexAttention built-ins (score_mod, mask_mod) against the CPU emulator, bit for bit,
and against the real FA4 SM90 kernel's committed flex goldens where the twin takes the case.

    python experiments/gpu/twin_flex_validate.py OUT_DIR [--only SUBSTR ...] [--no-golden]

1. The cases of :func:`cases` (every built-in of fa4num.attention.flex, both kernels, bf16 and fp16, 128 to 8k
   tokens): the twin on the GPU and the emulator on the CPU, differing bits of out, LSE and every counter.
2. Every forward record of tests/golden/attention/fa4_sm90_flex_h200.npz (captured from FA4 4.0.0b36's SM90 kernel
   by experiments/gpu/flex_capture.py) whose mods the twin runs (built-in mods, block-sparse calls included): the
   twin's out and LSE SHA-256 against the kernel's.

Writes OUT_DIR/twin_flex_validate.json (provenance from fa4num.gpu.run_provenance, per case the differing bits and
times, per golden record the digest equality); exit status 0 when every case and record is equal.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GOLDEN = ROOT / "tests" / "golden" / "attention" / "fa4_sm90_flex_h200.npz"


def _case(name, kernel, mods, *, sq, sk=None, h=2, hk=None, d=128, dtype="bfloat16", mult=1.0, opts=None):
    return dict(name=name, kernel=kernel, mods=mods, b=1, sq=sq, sk=sq if sk is None else sk, h=h,
                hk=h if hk is None else hk, d=d, dv=d, dtype=dtype, mult=mult, special=None, opts=opts or {})


def cases() -> list[dict]:
    """The validation cases: per kernel each built-in score_mod and mask_mod (fa4num.attention.flex), bf16 and
    fp16, 128 to 8192 tokens; ``mods`` in :func:`flex_kwargs`'s form (JSON)."""
    out = []
    for kernel in ("fa4-sm90", "fa4-sm100"):
        kk = kernel[4:]
        out += [
            _case(f"{kk}-alibi-causal-1k", kernel, {"score_mod": ["alibi_mod", {}], "aux": [["slopes"]]},
                  sq=1024, h=4, opts=dict(causal=True)),
            _case(f"{kk}-alibi-exp2-fp16-512", kernel, {"score_mod": ["alibi_exp2_mod", {}]}, sq=512, h=4,
                  dtype="float16"),
            _case(f"{kk}-alibi-nocontract-300x700", kernel,
                  {"score_mod": ["alibi_mod", {"contract": False}], "aux": [["slopes"]]}, sq=300, sk=700, h=4),
            _case(f"{kk}-rel-bias-clamp64-2k", kernel, {"score_mod": ["rel_bias_mod", {"clamp": 64}]}, sq=2048,
                  opts=dict(window_size=(512, 0))),
            _case(f"{kk}-softcap-mod-fp16-300x310", kernel, {"score_mod": ["softcap_mod", {"softcap": 20.0}]},
                  sq=300, sk=310, dtype="float16", mult=3.0),
            _case(f"{kk}-causal-mask-gqa-8k", kernel, {"mask_mod": ["causal_mask", {}]}, sq=8192, h=2, hk=1),
            _case(f"{kk}-window-mask-fp16-4k", kernel,
                  {"mask_mod": ["sliding_window_mask", {"left": 256, "right": 0}]}, sq=4096, dtype="float16"),
            _case(f"{kk}-prefix-lm-128", kernel, {"mask_mod": ["prefix_lm_mask", {"prefix": 40}]}, sq=128, d=64),
            _case(f"{kk}-document-packgqa-384", kernel,
                  {"mask_mod": ["document_mask", {}], "aux": [["docs3", [50, 130, 77, 127]]]}, sq=384, h=4, hk=2,
                  opts=dict(pack_gqa=True)),
            _case(f"{kk}-document-alibi-fp16-1000", kernel,
                  {"mask_mod": ["document_mask", {}], "score_mod": ["alibi_mod", {"aux_index": 1}],
                   "aux": [["docs", [400, 1, 599]], ["slopes"]]}, sq=1000, h=4, dtype="float16"),
            # block sparsity (mask blocks, then full blocks): query blocks of the kernel's M block, KV blocks of
            # its tile_n (128 keys on both kernels at d = 128)
            _case(f"{kk}-sparse-document-2k", kernel,
                  {"mask_mod": ["document_mask", {}], "aux": [["docs", [300, 900, 77, 771]]],
                   "sparse": {"block": [256, 128], "full": True}}, sq=2048),
            _case(f"{kk}-sparse-causal-alibi-fp16-1k", kernel,
                  {"mask_mod": ["causal_mask", {}], "score_mod": ["alibi_mod", {}], "aux": [["slopes"]],
                   "sparse": {"block": [256, 128], "full": True}}, sq=1024, h=4, dtype="float16"),
        ]
    return out


def flex_kwargs(mods: dict, *, batch: int, heads: int, seqlen_q: int = 0, seqlen_k: int = 0) -> dict:
    """FA4's FlexAttention arguments of a case's ``mods``: ``score_mod`` / ``mask_mod`` as [built-in name of
    fa4num.attention.flex, its keyword arguments], ``aux`` a list of ["slopes"] (``flex.alibi_slopes(heads)``),
    ["docs", lengths] (document ids (batch, seqlen)) or ["docs3", lengths] (per head, (batch, heads, seqlen)),
    ``sparse`` {"block": [rows, keys], "full": bool, "heads": 1 (optional: broadcast over heads)}: the
    mask_mod's block-sparse tensors (``flex.block_sparse_tensors``, which needs the sequence lengths).

    Examples
    --------
    >>> sorted(flex_kwargs({"mask_mod": ["causal_mask", {}]}, batch=1, heads=2))
    ['mask_mod']
    """
    from fa4num.attention import flex
    kw, aux = {}, []
    for a in mods.get("aux", []):
        if a[0] == "slopes":
            aux.append(flex.alibi_slopes(heads))
        else:
            ids = np.repeat(np.arange(len(a[1]), dtype=np.int32), a[1])
            shape = (batch, heads, ids.size) if a[0] == "docs3" else (batch, ids.size)
            aux.append(np.ascontiguousarray(np.broadcast_to(ids, shape)))
    for arg in ("score_mod", "mask_mod"):
        if arg in mods:
            kind, params = mods[arg]
            kw[arg] = getattr(flex, kind)(**params)
    if aux:
        kw["aux_tensors"] = aux
    sp = mods.get("sparse")
    if sp is not None:
        kw["block_sparse_tensors"] = flex.block_sparse_tensors(
            kw["mask_mod"], batch=batch, heads=sp.get("heads", heads), seqlen_q=seqlen_q, seqlen_k=seqlen_k,
            block_size=tuple(sp["block"]), aux_tensors=aux or None, full_blocks=sp["full"])
    return kw


def case_call(case: dict):
    """(q, k, v, FA4's arguments) of a case: twin_cases' seeded inputs and the case's mods."""
    sys.path.insert(0, str(HERE))
    import twin_cases
    q, k, v, kw = twin_cases.inputs(case)
    return q, k, v, {**kw, **flex_kwargs(case["mods"], batch=case["b"], heads=case["h"], seqlen_q=case["sq"],
                                         seqlen_k=case["sk"])}


def golden_records(path=GOLDEN) -> tuple:
    """([(record, FA4 arguments, inputs)], the capture module): every forward record of the SM90 flex capture
    that the twin takes, its arguments as tests/attention/test_flex_golden.py rebuilds them (block-sparse ones
    with their sparse tensors; the two mods written as lambdas are left out)."""
    import importlib.util

    from fa4num.attention import plan, twin
    spec = importlib.util.spec_from_file_location("flex_capture", HERE / "flex_capture.py")
    cap = importlib.util.module_from_spec(spec)
    sys.modules["flex_capture"] = cap
    spec.loader.exec_module(cap)
    out = []
    for rec in cap.read(path)[1]["cases"]:
        case = rec["case"]
        if "error" in rec:
            continue
        arrs = cap.case_inputs(case)
        kw = dict(softmax_scale=case["softmax_scale"], softcap=case["softcap"] or 0.0, kernel="fa4-sm90",
                  score_mod=cap.emulator_score_mod(case), mask_mod=cap.emulator_mask_mod(case),
                  aux_tensors=arrs["aux"] or None, pack_gqa=case["pack_gqa"])
        if "bs" in arrs:
            kw["block_sparse_tensors"] = arrs["bs"]
        if twin.refusal(plan(arrs["q"], arrs["k"], arrs["v"], **kw)) is None:
            out.append((rec, kw, arrs))
    return out, cap


def _bits(x):
    if type(x).__module__.startswith("torch"):      # the emulator's results for torch inputs
        import torch
        x = x.detach().cpu()
        x = (x.view(torch.int16) if x.element_size() == 2 else x).numpy()
    x = np.asarray(x)
    return x.view(np.int16) if x.dtype.itemsize == 2 else x.view(np.int32)


COUNTERS = ("kv_blocks", "rescale_events", "rescales_done", "max_lag", "exp2_emulated", "exp2_mufu", "p_saturated",
            "masked_by_window", "rescale_steps", "rescales_row", "rescales_warp", "rescales_tile", "events_row",
            "events_warp", "events_tile", "sink_share")


def compare(emu, tw) -> dict:
    """Differing bits of out, LSE and each counter (numpy results of ``twin.forward_on``); -1 for a shape
    mismatch."""
    diff = {}
    for n, a, b in [("out", emu.out, tw.out), ("lse", emu.lse, tw.lse)] + \
            [(n, getattr(emu.stats, n), getattr(tw.stats, n)) for n in COUNTERS]:
        a, b = _bits(a), _bits(b)
        diff[n] = int((a != b).sum()) if a.shape == b.shape else -1
    return diff


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--only", nargs="*", help="substrings of case names to run")
    ap.add_argument("--no-golden", action="store_true", help="skip the comparison with the SM90 flex goldens")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from fa4num.attention import plan, twin
    from fa4num.gpu import run_provenance
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, gold = [], []
    for case in cases():
        if args.only and not any(s in case["name"] for s in args.only):
            continue
        q, k, v, kw = case_call(case)
        problem = plan(q, k, v, **kw)
        why = twin.refusal(problem)
        if why is not None:
            rows.append(dict(name=case["name"], refused=why, equal=None))      # not run: counted apart
            print(f"{case['name']:36s} REFUSED {why}", flush=True)
            continue
        t0 = time.perf_counter()
        res_t = twin.forward_on(problem, device="cuda")
        t1 = time.perf_counter()
        res_e = twin.forward_on(problem, device="cpu")
        t2 = time.perf_counter()
        diff = compare(res_e, res_t)
        ok = all(x == 0 for x in diff.values())
        rows.append(dict(name=case["name"], kernel=case["kernel"], dtype=case["dtype"], mods=case["mods"],
                         shape=[case[n] for n in ("b", "sq", "sk", "h", "hk", "d")], opts=case["opts"],
                         differing=diff, equal=ok, twin_s=round(t1 - t0, 3), emulator_s=round(t2 - t1, 3),
                         empty_rows=int(np.isneginf(res_t.lse).sum()),
                         rescales_done=int(np.asarray(res_t.stats.rescales_done).sum())))
        print(f"{case['name']:36s} {'EQUAL' if ok else 'DIFF ' + json.dumps(diff)}  twin {t1 - t0:.2f}s "
              f"emulator {t2 - t1:.2f}s", flush=True)
    if not args.no_golden:
        recs, cap = golden_records()
        for rec, kw, arrs in recs:
            name = rec["case"]["name"]
            if args.only and not any(s in name for s in args.only):
                continue
            res = twin.forward_on(plan(arrs["q"], arrs["k"], arrs["v"], **kw), device="cuda")
            got = {"out": cap._sha(res.out.view(np.uint16)), "lse": cap._sha(res.lse)}
            eq = {n: got[n] == rec["sha256"][n] for n in ("out", "lse")}
            gold.append(dict(name=name, equal=all(eq.values()), **{f"{n}_equal": e for n, e in eq.items()}))
            print(f"golden {name:40s} {'EQUAL' if all(eq.values()) else 'DIFF ' + json.dumps(eq)}", flush=True)
    prov = run_provenance(script="experiments/gpu/twin_flex_validate.py")
    ran = [r for r in rows if "refused" not in r]
    summary = dict(cases=len(ran), equal=sum(r["equal"] for r in ran), refused=len(rows) - len(ran),
                   golden=len(gold), golden_equal=sum(g["equal"] for g in gold))
    (out / "twin_flex_validate.json").write_text(json.dumps(dict(provenance=prov, summary=summary, cases=rows,
                                                                 golden=gold), indent=1))
    print(json.dumps(summary))
    return 0 if summary["equal"] == summary["cases"] and summary["golden_equal"] == summary["golden"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
