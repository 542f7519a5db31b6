"""``fa4num attention ...``: run the emulated FA4 forward on seeded inputs and report its accuracy, or re-check
the committed H200 golden outputs."""
from __future__ import annotations

import json
import pathlib
import time


def _parse_opt(text: str):
    """key=value with value parsed as JSON when possible (numbers, true/false, lists), else a string."""
    if "=" not in text:
        raise ValueError(f"--opt expects key=value, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _run(args) -> int:
    import numpy as np

    from . import forward, inputs
    from .reference import attention_fa_reference, attention_fp64, fa_rule, metrics, round_once
    b, s, h, d = (int(x) for x in args.shape.split(","))
    spec = inputs.CaseSpec("cli", args.inputs, b, s, args.seqlen_k or s, h, args.kv_heads or h, d, args.causal,
                           dtype=args.dtype, softmax_scale=args.scale, q_mult=args.q_mult, seed=args.seed)
    q, k, v = inputs.make_inputs(spec)
    opts = dict(_parse_opt(o) for o in args.opt)
    t0 = time.perf_counter()
    res = forward(q, k, v, softmax_scale=args.scale, causal=args.causal, kernel=args.kernel, mode=args.mode,
                  **opts)
    seconds = time.perf_counter() - t0
    ref, lse_ref = attention_fp64(q, k, v, softmax_scale=args.scale, causal=args.causal)
    fin = np.isfinite(lse_ref)
    report = {"spec": spec.as_dict(), "kernel": args.kernel, "mode": args.mode, "options": opts,
              "seconds": round(seconds, 3), "vs_fp64": metrics(res.out, ref).as_dict(),
              "floor_bf16_rounded_once": metrics(round_once(ref, q.dtype), ref).as_dict(),
              "lse_max_abs_err": float(np.abs(res.lse[fin] - lse_ref[fin]).max(initial=0)),
              "stats": res.stats.summary()}
    out_ref, out_pt = attention_fa_reference(q, k, v, softmax_scale=args.scale, causal=args.causal)
    report["fa_rule"] = vars(fa_rule(res.out, out_ref, out_pt))
    text = json.dumps(report, indent=1, default=float)
    print(text)
    if args.json:
        pathlib.Path(args.json).write_text(text)
    return 0


def _golden(args) -> int:
    from .golden import check_case, load
    z, meta = load(args.file)
    bad_cases = 0
    for case in meta["cases"]:
        c = check_case(case, z)
        bad_cases += not c.bit_exact
        print(f"{c.name:20s} out mismatches {c.out_mismatches:6d} / {c.out_size:7d}   lse mismatches "
              f"{c.lse_mismatches:5d} / {c.lse_size}" + ("" if c.inputs_match else "   INPUTS DIFFER from the GPU's"))
    print(f"{len(meta['cases']) - bad_cases}/{len(meta['cases'])} cases bit-exact "
          f"(captured on {meta['capture']['gpu']}, flash-attn-4 {meta['capture']['packages'].get('flash-attn-4')})")
    return 1 if bad_cases else 0


def register(subparsers) -> None:
    p = subparsers.add_parser("attention", help="emulated FA4 forward: accuracy runs and golden checks")
    sub = p.add_subparsers(dest="attention_command", metavar="ACTION")
    r = sub.add_parser("run", help="emulate one forward on seeded inputs; print accuracy vs fp64 and stats (JSON)")
    r.add_argument("--shape", default="1,1024,2,128", help="batch,seqlen_q,heads,head_dim")
    r.add_argument("--seqlen-k", type=int, default=None)
    r.add_argument("--kv-heads", type=int, default=None, help="k/v heads (GQA/MQA); default = heads")
    r.add_argument("--causal", action="store_true")
    r.add_argument("--kernel", default="fa4-sm90", choices=("fa4-sm90", "fa4-sm100"))
    r.add_argument("--mode", default="bitexact", choices=("bitexact", "statistical"))
    r.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    r.add_argument("--inputs", default="normal", choices=("normal", "exact", "exact_onehot"))
    r.add_argument("--q-mult", type=float, default=1.0, help="scale q (larger logits)")
    r.add_argument("--scale", type=float, default=None, help="softmax_scale (default 1/sqrt(head_dim))")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                   help="kernel option, e.g. rescale_threshold=4 ex2_emu_freq=0 coeffs=fa4-deg4 gemm=exact")
    r.add_argument("--json", default=None, help="also write the report here")
    r.set_defaults(func=_run)
    g = sub.add_parser("golden", help="re-check the H200 golden outputs of the SM90 kernel, bit for bit")
    g.add_argument("--file", default=None)
    g.set_defaults(func=_golden)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
