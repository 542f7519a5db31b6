"""``fa4num attention ...``: run the emulated FA4 forward on seeded inputs and report its accuracy, or re-check
the committed H200 golden outputs."""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time

from fa4num.argtypes import (add_registry_option, coeffs, finite_float, int_tuple, nonneg_int, not_nan_float,
                             path_arg, positive_int)
from fa4num.outputs import atomic_files, check_output_dir

from .kernels import KERNELS
from .problem import DEFAULT_KERNEL

_shape = int_tuple(("batch", "seqlen_q", "heads", "head_dim"))


def _parse_opt(text: str):
    """key=value with value parsed as JSON when possible (numbers, true/false, lists), else a string; the
    forward checks each value (fa4num.attention.config.apply_overrides)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    if key == "coeffs":   # the --coeffs syntax (a set name or c0,c1,...), resolved with --registry by _run
        try:
            coeffs(value)
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentTypeError(f"coeffs: {err}") from None
        return key, value
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _nonfinite(report: dict) -> list:
    """Paths of the NaN or infinite numbers in a JSON-able report (what the CLI must flag, not bury)."""
    found = []

    def walk(v, path):
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, f"{path}.{k}" if path else str(k))
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                walk(x, f"{path}[{i}]")
        elif isinstance(v, float) and not math.isfinite(v):
            found.append(path)
    walk(report, "")
    return found


def _run(args) -> int:
    import numpy as np

    from . import forward, inputs
    from .reference import attention_fa_reference, attention_fp64, fa_rule, metrics, round_once
    b, s, h, d = args.shape
    json_path = None
    if args.json is not None:   # checked before the work
        json_path = pathlib.Path(args.json)
        check_output_dir(json_path.parent if str(json_path.parent) else ".", option="--json")
        if json_path.is_dir():
            raise ValueError(f"--json: {json_path} is a folder")
    kv_heads = h if args.kv_heads is None else args.kv_heads
    if h % kv_heads:
        raise ValueError(f"--kv-heads: must divide heads={h}, got {kv_heads}")
    spec = inputs.CaseSpec("cli", args.inputs, b, s, s if args.seqlen_k is None else args.seqlen_k, h, kv_heads,
                           d, args.causal, dtype=args.dtype, softmax_scale=args.scale, q_mult=args.q_mult,
                           seed=args.seed)
    q, k, v = inputs.make_inputs(spec)
    opts = dict(args.opt)
    twice = sorted({key for key, _ in args.opt if [k for k, _ in args.opt].count(key) > 1})
    if twice:   # dict() would keep the last one silently
        raise ValueError(f"--opt: {twice[0]} given more than once; give each option once")
    kw = dict(opts)
    if "coeffs" in kw:   # searched in --registry, $FA4NUM_POLYS, the user registry, the shipped sets
        from fa4num import polys
        kw["coeffs"] = polys.resolve(kw["coeffs"], registry=args.registry).coeffs
    t0 = time.perf_counter()
    res = forward(q, k, v, softmax_scale=args.scale, causal=args.causal, kernel=args.kernel, mode=args.mode,
                  **kw)
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
    out_f = np.asarray(res.out, np.float32)
    # an LSE of -inf is FA4's value for a row with no visible key (out 0 there), not a failure
    report["nonfinite"] = {"out": int((~np.isfinite(out_f)).sum()), "out_size": int(out_f.size),
                           "lse": int((np.isnan(res.lse) | (res.lse == np.inf)).sum()), "lse_size": int(res.lse.size),
                           "empty_rows": int((res.lse == -np.inf).sum())}
    flagged = _nonfinite(report)
    report["finite"] = not flagged and report["nonfinite"]["out"] == 0 and report["nonfinite"]["lse"] == 0
    # strict JSON: NaN/inf become null (with the paths listed), so that any JSON reader can load the report
    report["nonfinite_fields"] = flagged
    text = json.dumps(_nulls(report), indent=1, default=float, allow_nan=False)
    print(text)
    if json_path is not None:
        with atomic_files(json_path.parent if str(json_path.parent) else ".") as tmp:
            (tmp / json_path.name).write_text(text + "\n")
    if not report["finite"]:
        n = report["nonfinite"]
        print(f"fa4num: warning: non-finite results: {n['out']} of {n['out_size']} outputs, {n['lse']} of "
              f"{n['lse_size']} LSE values; fields {', '.join(flagged) or '-'} written as null"
              f"{'' if args.allow_nonfinite else ' (exit status 3; --allow-nonfinite to exit 0)'}", file=sys.stderr)
        return 0 if args.allow_nonfinite else 3
    return 0


def _nulls(v):
    if isinstance(v, dict):
        return {k: _nulls(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_nulls(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _golden(args) -> int:
    if args.file is not None and not pathlib.Path(args.file).is_file():
        raise ValueError(f"--file: no such file: {args.file}")
    from .golden import check_case, load
    try:
        z, meta = load(args.file)
    except (OSError, ValueError, KeyError, EOFError) as err:   # not an npz (an empty file: EOFError), or no metadata
        raise ValueError(f"--file: {args.file} is not a golden file ({' '.join(str(err).split())})") from None
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
    r.add_argument("--shape", type=_shape, default=(1, 1024, 2, 128), help="batch,seqlen_q,heads,head_dim")
    r.add_argument("--seqlen-k", type=nonneg_int, default=None, help="default = seqlen_q")
    r.add_argument("--kv-heads", type=positive_int, default=None, help="k/v heads (GQA/MQA); default = heads")
    r.add_argument("--causal", action="store_true")
    r.add_argument("--kernel", default=DEFAULT_KERNEL, choices=sorted(KERNELS))
    r.add_argument("--mode", default="bitexact", choices=("bitexact", "statistical"))
    r.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    r.add_argument("--inputs", default="normal", choices=("normal", "exact", "exact_onehot"))
    r.add_argument("--q-mult", type=finite_float, default=1.0, help="scale q (larger logits)")
    r.add_argument("--scale", type=not_nan_float, default=None,
                   help="softmax_scale (default 1/sqrt(head_dim)); any value FA4 accepts, negative included")
    r.add_argument("--seed", type=nonneg_int, default=0)
    r.add_argument("--allow-nonfinite", action="store_true",
                   help="exit 0 even when the output or LSE has NaN/inf (default: warn and exit 3)")
    r.add_argument("--opt", action="append", type=_parse_opt, default=[], metavar="KEY=VALUE",
                   help="kernel option, e.g. rescale_threshold=4 ex2_emu_freq=0 coeffs=fa4-deg4 gemm=exact")
    add_registry_option(r)
    r.add_argument("--json", type=path_arg, default=None, help="also write the report here")
    r.set_defaults(func=_run)
    g = sub.add_parser("golden", help="re-check the H200 golden outputs of the SM90 kernel, bit for bit")
    g.add_argument("--file", type=path_arg, default=None, help="a golden .npz (default: the shipped SM90 file)")
    g.set_defaults(func=_golden)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
