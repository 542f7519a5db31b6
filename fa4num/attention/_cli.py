"""``fa4num attention ...``: run the emulated FA4 forward on seeded inputs and report its accuracy, or re-check
the committed H200 golden outputs."""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time

from fa4num.argtypes import (add_registry_option, add_release_option, any_int, coeffs, finite_float, int_tuple,
                             key_value, nonneg_int, not_nan_float, path_arg, positive_int)
from fa4num.outputs import atomic_files, check_output_dir

from .kernels import KERNELS
from .problem import DEFAULT_KERNEL

_shape = int_tuple(("batch", "seqlen_q", "heads", "head_dim"))


def _nonneg_float(text: str) -> float:
    x = finite_float(text)
    if x < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return x


def _window(text: str) -> tuple:
    try:
        left, right = (int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LEFT,RIGHT (integers, -1: unbounded), got {text!r}") from None
    if left < -1 or right < -1:
        raise argparse.ArgumentTypeError(f"expected sides >= -1 (-1: unbounded), got {text!r}")
    return left, right


def _lengths(text: str) -> tuple:
    try:
        lens = tuple(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N,N,... (integers >= 0), got {text!r}") from None
    if not lens or min(lens) < 0:
        raise argparse.ArgumentTypeError(f"expected N,N,... (integers >= 0), got {text!r}")
    return lens


def _score_mod_spec(text: str) -> tuple:
    """``--score-mod``: alibi (ALiBi, slopes ``flex.alibi_slopes(heads)`` as an aux tensor), alibi-exp2 (the slope
    computed in the kernel), relative-bias[=CLAMP] or softcap=CAP (a built-in of fa4num.attention.flex):
    (kind, parameter)."""
    kind, sep, value = text.partition("=")
    try:
        if kind in ("alibi", "alibi-exp2") and not sep:
            return kind, None
        if kind == "relative-bias":
            clamp = int(value) if sep else None
            if clamp is not None and clamp < 0:
                raise ValueError
            return kind, clamp
        if kind == "softcap" and sep:
            cap = finite_float(value)
            if cap > 0:
                return kind, cap
    except (ValueError, argparse.ArgumentTypeError):
        pass
    raise argparse.ArgumentTypeError(f"expected alibi, alibi-exp2, relative-bias[=CLAMP >= 0] or softcap=CAP > 0, "
                                     f"got {text!r}")


def _mask_mod_spec(text: str) -> tuple:
    """``--mask-mod``: causal, window=LEFT,RIGHT (-1: unbounded), prefix-lm=N or document=N,N,... (the document
    lengths of every batch entry, adding up to the sequence length): (kind, parameter)."""
    kind, sep, value = text.partition("=")
    try:
        if kind == "causal" and not sep:
            return kind, None
        if kind == "window" and sep:
            return kind, _window(value)
        if kind == "prefix-lm" and sep and int(value) >= 0:
            return kind, int(value)
        if kind == "document" and sep:
            lens = _lengths(value)
            if min(lens) > 0:
                return kind, lens
    except (ValueError, argparse.ArgumentTypeError):
        pass
    raise argparse.ArgumentTypeError(f"expected causal, window=LEFT,RIGHT (-1: unbounded), prefix-lm=N >= 0 or "
                                     f"document=N,N,... (lengths > 0), got {text!r}")


def _flex_args(args, q, k) -> dict:
    """FA4's FlexAttention arguments of ``--score-mod`` / ``--mask-mod`` (the built-ins of
    :mod:`fa4num.attention.flex`, their aux tensors in a list: the document ids first)."""
    import numpy as np

    from . import flex
    fa, aux = {}, []
    if args.mask_mod is not None and (args.causal or args.window is not None):
        # interface.py drops causal / window_size when a mask_mod is given: say so rather than run another call
        raise ValueError("--mask-mod: cannot be combined with --causal or --window (FA4 drops them when a mask_mod "
                         "is given); use --mask-mod causal or --mask-mod window=LEFT,RIGHT")
    if args.score_mod is not None and args.softcap:
        raise ValueError("--score-mod: cannot be combined with --softcap (FA4 asserts); use --score-mod softcap=CAP")
    if args.mask_mod is not None:
        kind, par = args.mask_mod
        if kind == "causal":
            fa["mask_mod"] = flex.causal_mask()
        elif kind == "window":
            fa["mask_mod"] = flex.sliding_window_mask(*(None if w < 0 else w for w in par))
        elif kind == "prefix-lm":
            fa["mask_mod"] = flex.prefix_lm_mask(par)
        else:
            sq, sk = q.shape[1], k.shape[1]
            if sq != sk or sum(par) != sk:
                raise ValueError(f"--mask-mod: document lengths must add up to the sequence length (seqlen_q = "
                                 f"seqlen_k = {sk}), got {list(par)} with seqlen_q = {sq}")
            ids = np.repeat(np.arange(len(par), dtype=np.int32), par)
            aux.append(np.ascontiguousarray(np.broadcast_to(ids, (q.shape[0], sk))))
            fa["mask_mod"] = flex.document_mask(aux_index=0)
    if args.score_mod is not None:
        kind, par = args.score_mod
        if kind == "alibi":
            aux.append(flex.alibi_slopes(q.shape[2]))
            fa["score_mod"] = flex.alibi_mod(aux_index=len(aux) - 1)
        elif kind == "alibi-exp2":
            fa["score_mod"] = flex.alibi_exp2_mod()
        elif kind == "relative-bias":
            fa["score_mod"] = flex.rel_bias_mod(clamp=par)
        else:
            fa["score_mod"] = flex.softcap_mod(par)
    if aux:
        fa["aux_tensors"] = aux
    return fa


def _parse_opt(text: str):
    """key=value with value parsed as JSON when possible (numbers, true/false, lists), else a string; the
    forward checks each value (fa4num.attention.config.apply_overrides)."""
    key, sep, value = text.partition("=")
    if sep and key == "coeffs":   # the --coeffs syntax (a set name or c0,c1,...), resolved with --registry by _run
        try:
            coeffs(value)
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentTypeError(f"coeffs: {err}") from None
        return key, value
    return key_value(text)


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


def _feature_inputs(args, q, k, v):
    """(q, k, v, FA4's arguments) of ``attention run``'s feature flags, applied to the seeded dense inputs:
    fp8 (the bf16 values rounded to the fp8 dtype), varlen (the first ``--varlen`` tokens of each batch entry,
    packed), paged KV (the keys cut into ``--page-size`` pages, stored in a seeded order), a learnable sink,
    softcap, a window, splits, pack_gqa."""
    import ml_dtypes
    import numpy as np
    fa = {"softmax_scale": args.scale, "causal": args.causal}
    if args.softcap:
        fa["softcap"] = args.softcap
    if args.window is not None:
        fa["window_size"] = tuple(None if w < 0 else w for w in args.window)
    if args.num_splits != 1:
        fa["num_splits"] = args.num_splits
    if args.pack_gqa != "auto":
        fa["pack_gqa"] = args.pack_gqa == "on"
    rng = np.random.default_rng([args.seed, 1])
    if args.sink_mult:
        fa["learnable_sink"] = (np.float32(args.sink_mult) * rng.standard_normal(q.shape[2], dtype=np.float32))
    if args.varlen is not None:
        lens_q = args.varlen
        lens_k = args.varlen_k if args.varlen_k is not None else lens_q
        if len(lens_q) != q.shape[0] or len(lens_k) != q.shape[0]:
            raise ValueError(f"--varlen: needs batch = {q.shape[0]} lengths, got {len(lens_q)} and {len(lens_k)}")
        if max(lens_q) > q.shape[1] or max(lens_k) > k.shape[1]:
            raise ValueError(f"--varlen: lengths must be <= seqlen_q = {q.shape[1]} (q) and seqlen_k = "
                             f"{k.shape[1]} (k), got {list(lens_q)} and {list(lens_k)}")
        q = np.concatenate([q[b, :n] for b, n in enumerate(lens_q)])
        k = np.concatenate([k[b, :n] for b, n in enumerate(lens_k)])
        v = np.concatenate([v[b, :n] for b, n in enumerate(lens_k)])
        fa["cu_seqlens_q"] = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
        fa["cu_seqlens_k"] = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    elif args.page_size is not None:
        b, sk = k.shape[:2]
        if sk % args.page_size:
            raise ValueError(f"--page-size: must divide seqlen_k = {sk}, got {args.page_size}")
        n = sk // args.page_size
        order = rng.permutation(b * n)
        pages_k = np.empty((b * n, args.page_size, *k.shape[2:]), k.dtype)
        pages_v = np.empty((b * n, args.page_size, *v.shape[2:]), v.dtype)
        pages_k[order] = k.reshape(b * n, args.page_size, *k.shape[2:])
        pages_v[order] = v.reshape(b * n, args.page_size, *v.shape[2:])
        k, v = pages_k, pages_v
        fa["page_table"] = order.reshape(b, n).astype(np.int32)
    if args.fp8 is not None:
        dt = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}[args.fp8]
        q, k, v = (x.astype(np.float32).astype(dt) for x in (q, k, v))
    return q, k, v, fa


def _json_target(args):
    """``--json``'s path, checked before the work (None without it)."""
    if args.json is None:
        return None
    json_path = pathlib.Path(args.json)
    check_output_dir(json_path.parent if str(json_path.parent) else ".", option="--json")
    if json_path.is_dir():
        raise ValueError(f"--json: {json_path} is a folder")
    return json_path


def _seeded(args):
    """(CaseSpec, q, k, v) of the shape flags, seeded as ``attention run`` and ``attention backward`` draw them."""
    from . import inputs
    b, s, h, d = args.shape
    kv_heads = h if args.kv_heads is None else args.kv_heads
    if h % kv_heads:
        raise ValueError(f"--kv-heads: must divide heads={h}, got {kv_heads}")
    spec = inputs.CaseSpec("cli", args.inputs, b, s, s if args.seqlen_k is None else args.seqlen_k, h, kv_heads,
                           d, args.causal, dtype=args.dtype, softmax_scale=args.scale, q_mult=args.q_mult,
                           seed=args.seed)
    return (spec, *inputs.make_inputs(spec))


def _run(args) -> int:
    import numpy as np

    from . import plan
    from .twin import forward_on
    from .reference import attention_fa_reference, attention_fp64, fa_rule, metrics, round_once
    json_path = _json_target(args)
    spec, q, k, v = _seeded(args)
    opts = dict(args.opt)
    twice = sorted({key for key, _ in args.opt if [k for k, _ in args.opt].count(key) > 1})
    if twice:   # dict() would keep the last one silently
        raise ValueError(f"--opt: {twice[0]} given more than once; give each option once")
    kw = dict(opts)
    if "coeffs" in kw:   # searched in --registry, $FA4NUM_POLYS, the user registry, the shipped sets
        from fa4num import polys
        kw["coeffs"] = polys.resolve(kw["coeffs"], registry=args.registry).coeffs
    q, k, v, fa = _feature_inputs(args, q, k, v)
    flex_fa = _flex_args(args, q, k)
    problem = plan(q, k, v, kernel=args.kernel, mode=args.mode, fa4_release=args.fa4_release, **fa, **flex_fa,
                   **kw)
    t0 = time.perf_counter()
    res = forward_on(problem, device=args.device)
    seconds = time.perf_counter() - t0
    # the reference of the same planned call: every option (softcap, window, sink, varlen, pages, descales)
    ref, lse_ref = attention_fp64(problem=problem)
    fin = np.isfinite(lse_ref)
    features = {n: (x.tolist() if hasattr(x, "tolist") else x) for n, x in fa.items()
                if n not in ("softmax_scale", "causal")}
    if args.fp8:
        features["fp8"] = args.fp8
    for name in ("score_mod", "mask_mod"):
        if name in flex_fa:
            features[name] = flex_fa[name].__name__
    report = {"spec": spec.as_dict(), "kernel": args.kernel, "mode": args.mode, "device": args.device,
              "options": opts,
              "features": features, "num_splits": res.num_splits,
              "seconds": round(seconds, 3), "vs_fp64": metrics(res.out, ref).as_dict(),
              "floor_bf16_rounded_once": metrics(round_once(ref, res.out.dtype), ref).as_dict(),
              "lse_max_abs_err": float(np.abs(res.lse[fin] - lse_ref[fin]).max(initial=0)),
              "stats": res.stats.summary()}
    if set(features) - {"num_splits", "pack_gqa"}:
        # FA's test rule (testing.attention_ref as fa4num has it) knows only causal masking of dense inputs
        report["fa_rule"] = None
    else:
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
    _write_json(report, json_path)
    if not report["finite"]:
        n = report["nonfinite"]
        print(f"fa4num: warning: non-finite results: {n['out']} of {n['out_size']} outputs, {n['lse']} of "
              f"{n['lse_size']} LSE values; fields {', '.join(flagged) or '-'} written as null"
              f"{'' if args.allow_nonfinite else ' (exit status 3; --allow-nonfinite to exit 0)'}", file=sys.stderr)
        return 0 if args.allow_nonfinite else 3
    return 0


def _backward(args) -> int:
    import numpy as np

    from . import backward, forward, plan
    from .reference import backward_fp64, backward_metrics, metrics, round_once
    json_path = _json_target(args)
    spec, q, k, v = _seeded(args)
    q, k, v, fa = _feature_inputs(args, q, k, v)
    problem = plan(q, k, v, kernel=args.kernel, fa4_release=args.fa4_release, **fa)
    fw = forward(problem=problem)
    rng = np.random.default_rng([args.seed, 2])
    dout = rng.standard_normal(fw.out.shape, dtype=np.float32).astype(fw.out.dtype)
    dlse = None
    if args.dlse_mult:
        dlse = (np.float32(args.dlse_mult) * rng.standard_normal(fw.lse.shape, dtype=np.float32))
    t0 = time.perf_counter()
    g = backward(out=fw.out, dout=dout, lse=fw.lse, problem=problem, deterministic=not args.nondeterministic,
                 dlse=dlse)
    seconds = time.perf_counter() - t0
    ref = backward_fp64(problem=problem, dout=dout, dlse=dlse)
    features = {n: (x.tolist() if hasattr(x, "tolist") else x) for n, x in fa.items()
                if n not in ("softmax_scale", "causal")}
    if dlse is not None:
        features["dlse_mult"] = args.dlse_mult
    report = {"spec": spec.as_dict(), "kernel": args.kernel, "features": features,
              "deterministic": not args.nondeterministic, "seconds": round(seconds, 3),
              "vs_fp64": {n: m.as_dict() for n, m in backward_metrics(g, ref).items()},
              # each gradient's fp64 value rounded once to the dtype: the floor of any 16-bit backward
              "floor_rounded_once": {n: metrics(round_once(getattr(ref, n), q.dtype), getattr(ref, n)).as_dict()
                                     for n in ("dq", "dk", "dv")},
              "stats": g.stats.summary()}
    _write_json(report, json_path)
    grads = [np.asarray(getattr(g, n), np.float32) for n in ("dq", "dk", "dv")]
    if not all(np.isfinite(x).all() for x in grads):
        print("fa4num: warning: non-finite gradients (exit status 3)", file=sys.stderr)
        return 3
    return 0


_CALL_KEYS = {"batch": "batch", "sq": "seqlen_q", "sk": "seqlen_k", "heads": "heads", "kv_heads": "heads_kv",
              "d": "head_dim", "dv": "head_dim_v", "first": "first"}


def _call(text: str):
    """A CALL of ``attention plan/compare``: comma-separated KEY=VALUE. Shape keys: batch, sq (query tokens per
    sequence, the last ones), sk (keys), heads, kv_heads, d, dv, dtype, first (the first logical sequence),
    varlen=1 (pack the batch with cu_seqlens), seqlens_q / seqlens_k (varlen lengths, N:N:...), window=L:R
    (-1: unbounded); any other key is one of FA4's arguments or a kernel knob (kernel, causal, pack_gqa,
    num_splits, softcap, seqlen_k_per_split, tile_n, ...), its value read as JSON when it parses."""
    from .compare import CallSpec
    kw, fa = {}, {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE,..., got {item!r} in {text!r}")
        try:
            if key in _CALL_KEYS:
                kw[_CALL_KEYS[key]] = int(value)
            elif key == "dtype":
                kw["dtype"] = value
            elif key == "varlen":
                kw["varlen"] = bool(int(value))
            elif key in ("seqlens_q", "seqlens_k"):
                kw[key] = tuple(int(t) for t in value.split(":"))
            elif key == "window":
                fa["window_size"] = tuple(None if int(t) < 0 else int(t) for t in value.split(":"))
            else:
                try:
                    fa[key] = json.loads(value)
                except json.JSONDecodeError:
                    fa[key] = value
        except ValueError:
            raise argparse.ArgumentTypeError(f"{key}: expected an integer (N:N:... for lengths, L:R for window), "
                                             f"got {value!r}") from None
    if "seqlen_q" in kw and "seqlen_k" not in kw:
        kw["seqlen_k"] = kw["seqlen_q"]
    if "seqlen_k" in kw and "seqlen_q" not in kw:
        kw["seqlen_q"] = kw["seqlen_k"]
    try:
        return CallSpec(**kw, fa4=fa)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _write_json(report: dict, path) -> None:
    text = json.dumps(_nulls(report), indent=1, default=_default, allow_nan=False)
    print(text)
    if path is not None:
        p = pathlib.Path(path)
        check_output_dir(p.parent if str(p.parent) else ".", option="--json")
        with atomic_files(p.parent if str(p.parent) else ".") as tmp:
            (tmp / p.name).write_text(text + "\n")


def _default(x):
    if hasattr(x, "tolist"):
        return x.tolist()
    return float(x)


def _with_release(specs, release) -> None:
    """--fa4-release for the CALLs that do not name their own ``fa4_release``."""
    for spec in specs:
        if release is not None:
            spec.fa4.setdefault("fa4_release", release)


def _plan(args) -> int:
    from .compare import plan_call
    from .schedule import plan_of
    _with_release([args.call], args.fa4_release)
    p = plan_of(plan_call(args.call, store=[args.call], seed=args.seed))
    report = {"call": args.call.as_dict(), **p.as_dict()}
    if not args.tiles:
        report["tiles"] = len(p.tiles)
        orders = {}
        for t in p.tiles:
            orders[repr(t.visits)] = orders.get(repr(t.visits), 0) + 1
        report["visiting_orders"] = orders     # distinct per-split visiting orders -> number of tiles
    _write_json(report, args.json)
    return 0


def _compare(args) -> int:
    from .compare import plan_call, same_bits
    store = [args.call_a, args.call_b]
    _with_release(store, args.fa4_release)
    pa, pb = (plan_call(c, store=store, seed=args.seed) for c in store)
    r = same_bits(pa, pb, rows=args.rows)
    report = {"call_a": args.call_a.as_dict(), "call_b": args.call_b.as_dict(), "seed": args.seed,
              "all_equal": r.all_equal, **r.as_dict(rows=args.row_results)}
    _write_json(report, args.json)
    return 0


def _pairs(text: str) -> list:
    try:
        return [tuple(int(x) for x in p.split(":")) for p in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected A:B,A:B,... (sequence of call A : of call B), got {text!r}") \
            from None


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


def _input_flags(r) -> None:
    """The flags ``attention run`` and ``attention backward`` share: the seeded inputs' shape and draw, and the
    features both passes take (softcap, window, sink, varlen)."""
    r.add_argument("--shape", type=_shape, default=(1, 1024, 2, 128), help="batch,seqlen_q,heads,head_dim")
    r.add_argument("--seqlen-k", type=nonneg_int, default=None, help="default = seqlen_q")
    r.add_argument("--kv-heads", type=positive_int, default=None, help="k/v heads (GQA/MQA); default = heads")
    r.add_argument("--causal", action="store_true")
    r.add_argument("--kernel", default=DEFAULT_KERNEL, choices=sorted(KERNELS))
    r.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    r.add_argument("--inputs", default="normal", choices=("normal", "exact", "exact_onehot"))
    r.add_argument("--q-mult", type=finite_float, default=1.0, help="scale q (larger logits)")
    r.add_argument("--scale", type=not_nan_float, default=None,
                   help="softmax_scale (default 1/sqrt(head_dim)); any value FA4 accepts, negative included")
    r.add_argument("--seed", type=nonneg_int, default=0)
    r.add_argument("--softcap", type=_nonneg_float, default=0.0, help="FA4's softcap (0: none)")
    r.add_argument("--window", type=_window, default=None, metavar="LEFT,RIGHT",
                   help="sliding window (left,right; -1 for an unbounded side)")
    r.add_argument("--sink-mult", type=finite_float, default=0.0,
                   help="a seeded learnable sink per head, N(0, 1) times this (0: none)")
    r.add_argument("--varlen", type=_lengths, default=None, metavar="N,N,...",
                   help="varlen: the first N tokens of each batch entry, packed with cu_seqlens (q; k too unless "
                        "--varlen-k)")
    r.add_argument("--varlen-k", type=_lengths, default=None, metavar="N,N,...", help="varlen key lengths")


def register(subparsers) -> None:
    p = subparsers.add_parser("attention", help="emulated FA4 forward and backward: accuracy runs, plans, golden checks")
    sub = p.add_subparsers(dest="attention_command", metavar="ACTION")
    r = sub.add_parser("run", help="emulate one forward on seeded inputs; print accuracy vs fp64 and stats (JSON)")
    _input_flags(r)
    r.add_argument("--mode", default="bitexact", choices=("bitexact", "statistical"))
    r.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="cpu: the emulator; cuda: the GPU twin (bit-exact mode, the same bits) or the torch path "
                        "(statistical mode) on the GPU")
    r.add_argument("--allow-nonfinite", action="store_true",
                   help="exit 0 even when the output or LSE has NaN/inf (default: warn and exit 3)")
    r.add_argument("--score-mod", type=_score_mod_spec, default=None, metavar="MOD",
                   help="FlexAttention score_mod (a built-in of fa4num.attention.flex): alibi, alibi-exp2, "
                        "relative-bias[=CLAMP] or softcap=CAP")
    r.add_argument("--mask-mod", type=_mask_mod_spec, default=None, metavar="MASK",
                   help="FlexAttention mask_mod: causal, window=LEFT,RIGHT (-1: unbounded), prefix-lm=N or "
                        "document=N,N,... (document lengths adding up to the sequence length)")
    r.add_argument("--num-splits", type=any_int, default=1, help="split-KV (fa4-sm100): < 1 FA4's heuristic")
    r.add_argument("--pack-gqa", default="auto", choices=("auto", "on", "off"))
    r.add_argument("--page-size", type=positive_int, default=None, help="paged KV with this page size")
    r.add_argument("--fp8", default=None, choices=("e4m3", "e5m2"),
                   help="fp8 inputs (fa4-sm100): the seeded values rounded to float8_e4m3fn / float8_e5m2")
    r.add_argument("--opt", action="append", type=_parse_opt, default=[], metavar="KEY=VALUE",
                   help="kernel option, e.g. rescale_threshold=4 ex2_emu_freq=0 coeffs=fa4-deg4 gemm=exact")
    add_registry_option(r)
    r.add_argument("--json", type=path_arg, default=None, help="also write the report here")
    add_release_option(r)
    r.set_defaults(func=_run)
    pl = sub.add_parser("plan", help="the decisions that set one call's bits: tiles, q_stage, CTAs, pack_gqa, "
                                     "software-exp2 columns, KV-block ranges and order, splits, combine (JSON)")
    pl.add_argument("call", type=_call, metavar="CALL", help="KEY=VALUE,... e.g. batch=8,sq=1,sk=512,heads=16,d=256,"
                                                             "kernel=fa4-sm100")
    pl.add_argument("--tiles", action="store_true", help="list every M tile (default: a count per visiting order)")
    pl.add_argument("--seed", type=nonneg_int, default=0)
    pl.add_argument("--json", type=path_arg, default=None, help="also write the report here")
    add_release_option(pl)
    pl.set_defaults(func=_plan)
    c = sub.add_parser("compare", help="which shared rows of two calls get the same bits, which decision differs, "
                                       "and by how many ulps (seeded inputs; JSON)")
    c.add_argument("call_a", type=_call, metavar="CALL_A")
    c.add_argument("call_b", type=_call, metavar="CALL_B")
    c.add_argument("--rows", type=_pairs, default=None, metavar="A:B,...",
                   help="sequence pairs holding the same logical sequence (default: i with i); with first= in a "
                        "CALL both index the same seeded store")
    c.add_argument("--row-results", action="store_true", help="list every compared row")
    c.add_argument("--seed", type=nonneg_int, default=0)
    c.add_argument("--json", type=path_arg, default=None, help="also write the report here")
    add_release_option(c)
    c.set_defaults(func=_compare)
    bw = sub.add_parser("backward", help="emulate one forward and backward on seeded inputs (and dout); print the "
                                         "gradients' accuracy vs fp64 and the backward's stats (JSON)")
    _input_flags(bw)
    bw.add_argument("--dlse-mult", type=finite_float, default=0.0,
                    help="a seeded gradient reaching the LSE (FA4's dlse), N(0, 1) times this (0: none)")
    bw.add_argument("--nondeterministic", action="store_true",
                    help="FA4's deterministic=False (one admissible order of the dQ adds)")
    bw.add_argument("--json", type=path_arg, default=None, help="also write the report here")
    add_release_option(bw)
    # the forward-only features stay off (FA4's backward takes no paged KV, split-KV or fp8)
    bw.set_defaults(func=_backward, shape=(1, 512, 2, 128), num_splits=1, pack_gqa="auto", page_size=None, fp8=None)
    g = sub.add_parser("golden", help="re-check the H200 golden outputs of the SM90 kernel, bit for bit")
    g.add_argument("--file", type=path_arg, default=None, help="a golden .npz (default: the shipped SM90 file)")
    g.set_defaults(func=_golden)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
