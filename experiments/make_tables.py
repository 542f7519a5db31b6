"""Generate the paper's LaTeX tables and number macros from the results on disk, so no number is typed by hand.

Reads the coefficient sets shipped in polys/ (fitting results, through fa4num.polys), experiments/results/gpu_verify_*.json (instruction level, the
newest run that covers all operations), tests/golden/attention/*.npz|json metadata (softmax stage and kernel
level, captured on the H200) and experiments/results/fa4_knobs.json (the accuracy study; refused unless its skip
counters are today's definition, paper_common.require_skip_definition). Writes
paper/tables/{polys,ladder,knobs_summary,knobs_minilm,knobs_sink}.tex and paper/tables/numbers.tex
(\\newcommand macros used in the text).

    python experiments/make_tables.py
"""
from __future__ import annotations

import argparse
import json
import re
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import paper_common as pc  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def sci(x: float, digits: int = 2) -> str:
    """x as m\\times10^{e} for LaTeX math."""
    if x == 0:
        return "0"
    if not math.isfinite(x):
        return r"\infty"
    e = int(math.floor(math.log10(abs(x))))
    m = x / 10 ** e
    if round(m, digits - 1) >= 10:
        m, e = m / 10, e + 1
    return f"{m:.{digits - 1}f}\\times10^{{{e}}}"


def big(n: int) -> str:
    """Integer as a power of two, or m*2^32 for whole exhaustive sweeps, else with thin-space separators."""
    if n >= 1 << 16 and n & (n - 1) == 0:
        return f"2^{{{n.bit_length() - 1}}}"
    if n and n % (1 << 32) == 0:
        return f"{n >> 32}\\cdot2^{{32}}"
    return f"{n:,}".replace(",", r"\,")


def tex_escape(s: str) -> str:
    return s.replace("_", r"\_").replace("%", r"\%").replace("&", r"\&")


def macro(name: str, value: str) -> str:
    return f"\\newcommand{{\\{name}}}{{{value}}}\n"


def polys_table(reg: dict) -> tuple[str, str]:
    rows, macros = [], ""
    for name, e in reg["entries"].items():
        m = e.get("metrics", {})
        if "max_rel_error" not in m:
            continue
        rows.append((e["degree"], name, m))
    rows.sort(key=lambda r: (r[0], not r[1].startswith("fa4-"), r[1]))
    body = []
    for deg, name, m in rows:
        # a registry name may say "minimax" only if the set is (within 1 %) the real-coefficient optimum: a set
        # clearly above it was renamed in polys/ (fa4num-deg6), and a new one must not carry the claim either
        if "minimax" in name and m["ratio_to_optimum"] > 1.01:
            raise ValueError(f"polys/{name}.json is {m['ratio_to_optimum']:.3f} times the optimum: not minimax, "
                             "rename it")
        if deg == 6 and name.startswith("fa4num-"):
            macros += macro("polyDegSixName", tex_escape(name))
            macros += macro("polyDegSixRatio", f"{m['ratio_to_optimum']:.3f}")
        ev = m.get("evaluated_rel_error")
        bf = m.get("bf16_mismatch_share")
        body.append(f"{tex_escape(name) if '$' not in name else tex_escape(name.split('$')[0]) + '$' + name.split('$', 1)[1]} & {deg} & ${sci(m['max_rel_error'], 4)}$ & "
                    f"${sci(m['certified_rel_bound'], 4)}$ & {m['ratio_to_optimum']:.3f} & "
                    f"{'$' + sci(ev, 4) + '$' if ev is not None else '--'} & "
                    f"{f'{100 * bf:.3f}' if bf is not None else '--'} \\\\")
    tex = ("\\begin{tabular}{lrrrrrr}\n\\toprule\n"
           "set & deg & max rel.\\ err. & certified bound & / optimum & evaluated (fp32) & bf16 differ (\\%) \\\\\n"
           "\\midrule\n" + "\n".join(body) + "\n\\bottomrule\n\\end{tabular}\n")
    named = {a: e for e in reg["entries"].values() for a in (e["name"], *e.get("aliases", ()))}   # FA4's by alias
    e3, b3 = named["fa4-deg3"]["metrics"], named["fa4num-bf16-deg3"]["metrics"]
    e5 = named["fa4-deg5"]["metrics"]
    macros += macro("polyDegThreeRel", sci(e3["max_rel_error"], 3))
    macros += macro("polyDegThreeOpt", sci(e3["rel_optimum"], 3))
    macros += macro("polyDegThreeRatio", f"{e3['ratio_to_optimum']:.3f}")
    macros += macro("polyDegThreeBf", f"{100 * e3['bf16_mismatch_share']:.2f}")
    macros += macro("polyBfDegThreeRel", sci(b3["max_rel_error"], 3))
    macros += macro("polyBfDegThreeBf", f"{100 * b3['bf16_mismatch_share']:.2f}")
    macros += macro("polyDegFiveRel", sci(e5["max_rel_error"], 3))
    ev5 = reg["entries"].get("fa4num-evaluated-deg5", {}).get("metrics", {})
    if "evaluated_rel_error" in ev5:
        macros += macro("polyEvalDegFive", sci(ev5["evaluated_rel_error"], 4))
        macros += macro("polyFaDegFiveEval", sci(e5["evaluated_rel_error"], 4))
    return tex, macros


def _group(r: dict) -> tuple[str, str]:
    op = r["meta"].get("op", r["op"])
    kind = ("all" if str(r["inputs"]).startswith("all") else
            "sample" if "generator" in str(r["inputs"]) else "golden")
    family = {"ex2emu": "software exp2 (FA4 forms)", "mufu": "MUFU ex2/rcp/lg2 models"}.get(op)
    if family is None:
        family = ("fp32 add/sub/mul/fma/min/max" if op in ("add", "sub", "mul", "fma", "min", "max")
                  else "conversions (bf16, fp16, fp8)")
    return family, kind


def newest_full_verify() -> tuple[Path, dict]:
    best = None
    for p in sorted((ROOT / "experiments" / "results").glob("gpu_verify_NVIDIA_*Z.json")):
        d = json.loads(p.read_text())
        if d.get("kind") == "fa4num gpu verify" and any(str(r["inputs"]).startswith("all") for r in d["results"]):
            best = (p, d)
    if best is None:
        raise FileNotFoundError("no experiments/results/gpu_verify_NVIDIA_*.json with exhaustive sweeps")
    return best


def ladder_table() -> tuple[str, str]:
    path, d = newest_full_verify()
    agg = defaultdict(lambda: [0, 0, 0])
    for r in d["results"]:
        a = agg[_group(r)]
        a[0] += 1
        a[1] += int(r["n"])
        a[2] += int(r["mismatches"])
    kind_txt = {"all": "all $2^{32}$ inputs", "sample": "random sample", "golden": "golden sets"}
    body = []
    for (fam, kind), (cnt, n, mis) in sorted(agg.items(), key=lambda kv: (kv[0][1] != "all", kv[0])):
        body.append(f"1 instruction & {fam} & {kind_txt[kind]} & {cnt} & ${big(n)}$ & {mis} \\\\")
    macros = macro("verifyComparisons", str(len(d["results"])))
    macros += macro("verifyMismatches", str(d["total_mismatches"]))
    macros += macro("verifySeconds", f"{d['seconds']['total']:.1f}")
    macros += macro("verifyExhaustiveOps", str(sum(1 for r in d["results"] if str(r["inputs"]).startswith("all"))))
    macros += macro("verifyGPU", tex_escape(d["provenance"]["gpu"]["name"]))
    macros += macro("verifyDriver", tex_escape(d["provenance"]["gpu"]["driver"]))
    # breakable after each underscore: a 45-character typewriter name otherwise runs into the margin
    macros += macro("verifyFile", r"\texttt{" + tex_escape(path.name).replace(r"\_", r"\_\allowbreak{}") + "}")

    gdir = ROOT / "tests" / "golden" / "attention"
    twin = json.loads(str(np.load(gdir / "fa4_sm100_softmax_twin_h200.npz")["meta"]))
    rows_t = sum(v["rows"] for v in twin["check_report"].values())
    mis_t = sum(sum(v["mismatches"].values()) for v in twin["check_report"].values())
    fields = len(next(iter(twin["check_report"].values()))["mismatches"])
    nsets = len(twin["check_report"])
    # tanh.approx (the soft cap's tanh) is not in `gpu verify`: experiments/gpu/mufu_tanh.py measured it on the
    # H200 over all 2^32 inputs and rebuilt every output from the compact table before writing it (its log)
    tlog = (ROOT / "experiments" / "results" / "h200_20261201" / "mufu_tanh.log").read_text()
    tmis = int(re.search(r"self-check: (\d+) mismatches", tlog).group(1))
    body.append(f"1 instruction & MUFU tanh model (softcap; separate run) & all $2^{{32}}$ inputs & 1 & $2^{{32}}$ & "
                f"{tmis} \\\\")
    macros += macro("tanhMismatches", str(tmis))
    body.append(f"2 softmax stage & SM100 softmax step vs PTX twin ({nsets} input sets, {fields} fields) & "
                f"rows of {twin['configs']['bf16']['blocks']} KV blocks & {nsets} & ${big(rows_t)}$ rows & "
                f"{mis_t} \\\\")
    macros += macro("twinRows", big(rows_t))
    macros += macro("twinMismatches", str(mis_t))

    sm90 = json.loads(str(np.load(ROOT / "fa4num" / "data" / "golden" / "fa4_sm90_h200.npz")["meta"]))
    large = json.loads((gdir / "fa4_sm90_h200_large.json").read_text())
    ncase = len(sm90["cases"])
    nlarge = len(large["cases"])
    elems = sum(c["spec"]["batch"] * c["spec"]["seqlen_q"] * c["spec"]["heads"] * c["spec"]["head_dim"]
                for c in sm90["cases"] + large["cases"])
    body.append(f"3 kernel & FA4 SM90 forward (flash-attn-4 {sm90['capture']['packages']['flash-attn-4']}) vs "
                f"emulator, out + LSE & exact, one-hot, normal, GQA & {ncase + nlarge} & ${big(elems)}$ outputs & "
                f"0$^\\dagger$ \\\\")
    macros += macro("kernelCases", str(ncase + nlarge))
    macros += macro("kernelOutputs", big(elems))
    macros += macro("faVersion", tex_escape(sm90["capture"]["packages"]["flash-attn-4"]))
    rag = r">{\raggedright\arraybackslash}"
    tex = (f"\\begin{{tabular}}{{l{rag}p{{4.4cm}}{rag}p{{2.3cm}}rrr}}\n\\toprule\n"
           "level & what & inputs & checks & inputs checked & mismatches \\\\\n\\midrule\n"
           + "\n".join(body) + "\n\\bottomrule\n\\end{tabular}\n")
    return tex, macros


CFG_LABEL = {"sm100-default": "SM100 default", "sm100-rescale0": "threshold 0", "sm100-emu-off": "emulation off",
             "sm100-both-off": "both off", "sm100-deg4": "degree 4 (FA4)", "sm100-bf16deg3": "bf16-fit cubic",
             "sm100-emu-max": "emulation max", "sm90": "SM90 path"}


def _avoided(v: dict) -> str:
    """The rescales avoided per row and per 32-row warp (fa4num.softmax.ballot's counters), two cells."""
    return f"{100 * v['avoided_share_row']:.0f} & {100 * v['avoided_share_warp']:.0f}"


def knobs_tables(k: dict) -> tuple[str, str, str, str]:
    pc.require_skip_definition(k, "experiments/results/fa4_knobs.json")
    s = k["summary"]
    body = []
    for c, v in s.items():
        body.append(f"{CFG_LABEL.get(c, c)} & {v['mean_rel_l2_over_floor']:.3f} & {v['max_rel_l2_over_floor']:.3f} & "
                    f"${sci(v['max_lse_abs'])}$ & {v['max_fa_budget_used']:.2f} & "
                    f"{100 * v['mean_bits_changed_vs_both_off']:.1f} & {_avoided(v)} & "
                    f"{v['max_lag_log2']:.2f} \\\\")
    summ = ("\\begin{tabular}{lrrrrrrrr}\n\\toprule\n"
            "configuration & \\multicolumn{2}{c}{rel.\\ $L_2$ / floor} & max LSE err. & FA budget & "
            "bits changed (\\%) & \\multicolumn{2}{c}{avoided (\\%)} & max lag \\\\\n"
            " & mean & max & & used (max) & vs both off & row & warp & ($\\log_2$) \\\\\n\\midrule\n"
            + "\n".join(body) + "\n\\bottomrule\n\\end{tabular}\n")
    rows = k["rows"]
    by = {(r["case"], r["config"]): r for r in rows}
    cfgs = ["sm100-default", "sm100-rescale0", "sm100-emu-off", "sm100-both-off", "sm90"]
    ml = sorted({r["case"] for r in rows if r["family"] == "minilm"})
    body = []
    for case in ml:
        d = by[(case, "sm100-default")]
        cells = " & ".join(f"{by[(case, c)]['rel_l2'] / d['floor_rel_l2']:.3f}" for c in cfgs)
        body.append(f"{case.removeprefix('minilm-L')} & {d['shape'][1]} & ${sci(d['floor_rel_l2'])}$ & {cells} & "
                    f"${sci(d['lse_max_abs'])}$ & ${sci(by[(case, 'sm100-emu-off')]['lse_max_abs'])}$ & "
                    f"{_avoided(d)} \\\\")
    minilm = ("\\begin{tabular}{rrr" + "r" * len(cfgs) + "rrrr}\n\\toprule\n"
              " & & & \\multicolumn{" + str(len(cfgs)) + "}{c}{rel.\\ $L_2$ / floor} & "
              "\\multicolumn{2}{c}{LSE err.} & \\multicolumn{2}{c}{avoided (\\%)} \\\\\n"
              "layer & tokens & floor & " + " & ".join(CFG_LABEL[c] for c in cfgs) +
              " & default & emu.\\ off & row & warp \\\\\n\\midrule\n" + "\n".join(body) +
              "\n\\bottomrule\n\\end{tabular}\n")
    sinks = sorted({(r["param"], r["case"]) for r in rows if r["family"] == "sink"})
    body = []
    for p, case in sinks:
        d = by[(case, "sm100-default")]
        cells = " & ".join(f"{by[(case, c)]['rel_l2'] / d['floor_rel_l2']:.3f}" for c in cfgs)
        body.append(f"{p:g} & {cells} & {_avoided(d)} & {d['stats']['max_lag']:.2f} \\\\")
    sink = ("\\begin{tabular}{r" + "r" * len(cfgs) + "rrr}\n\\toprule\n"
            " & \\multicolumn{" + str(len(cfgs)) + "}{c}{rel.\\ $L_2$ / floor} & "
            "\\multicolumn{2}{c}{avoided (\\%)} & \\\\\n"
            "$\\Delta$ (nats) & " + " & ".join(CFG_LABEL[c] for c in cfgs) +
            " & row & warp & max lag \\\\\n\\midrule\n" + "\n".join(body) + "\n\\bottomrule\n\\end{tabular}\n")
    macros = macro("knobsMode", k["mode"])
    macros += macro("knobsShape", r"$" + r"\times".join(str(x) for x in k["synthetic_shape"]) + "$")
    macros += macro("knobsSeeds", str(len(k["seeds"])))
    macros += macro("knobsCases", str(len({r["case"] for r in rows})))
    d, z, e, b = (s[c] for c in ("sm100-default", "sm100-rescale0", "sm100-emu-off", "sm100-both-off"))
    macros += macro("knobsDefaultMean", f"{d['mean_rel_l2_over_floor']:.3f}")
    macros += macro("knobsRescaleZeroMean", f"{z['mean_rel_l2_over_floor']:.3f}")
    macros += macro("knobsEmuOffMean", f"{e['mean_rel_l2_over_floor']:.3f}")
    macros += macro("knobsBothOffMean", f"{b['mean_rel_l2_over_floor']:.3f}")
    macros += macro("knobsDefaultLse", sci(d["max_lse_abs"]))
    macros += macro("knobsEmuOffLse", sci(e["max_lse_abs"]))
    macros += macro("knobsBfLse", sci(s["sm100-bf16deg3"]["max_lse_abs"]))
    macros += macro("knobsDegFourLse", sci(s["sm100-deg4"]["max_lse_abs"]))
    macros += macro("knobsSkipped", f"{100 * d['avoided_share_row']:.1f}")
    macros += macro("knobsSkippedWarp", f"{100 * d['avoided_share_warp']:.1f}")
    macros += macro("knobsMaxLag", f"{d['max_lag_log2']:.2f}")
    macros += macro("knobsEmuBits", f"{100 * z['mean_bits_changed_vs_both_off']:.1f}")
    macros += macro("knobsLazyBits", f"{100 * e['mean_bits_changed_vs_both_off']:.1f}")
    macros += macro("knobsBudget", f"{max(v['max_fa_budget_used'] for v in s.values()):.2f}")
    macros += macro("knobsAllPassed", "all" if all(v["fa_rule_all_passed"] for v in s.values()) else "not all")
    macros += macro("knobsSaturated", str(sum(v["p_saturated"] for v in s.values())))
    mean = (lambda fam, c: float(np.mean([r["rel_l2"] / r["floor_rel_l2"] for r in rows
                                            if r["family"] == fam and r["config"] == c])))
    macros += macro("knobsMinilmDefault", f"{mean('minilm', 'sm100-default'):.3f}")
    macros += macro("knobsMinilmRescaleZero", f"{mean('minilm', 'sm100-rescale0'):.3f}")
    g4 = (lambda c: float(np.mean([r["rel_l2"] / r["floor_rel_l2"] for r in rows
                                   if r["case"].startswith("gauss-4x") and r["config"] == c])))
    macros += macro("knobsGaussFourDefault", f"{g4('sm100-default'):.3f}")
    macros += macro("knobsGaussFourRescaleZero", f"{g4('sm100-rescale0'):.3f}")
    sm90_bits = max(r["bits_changed_vs_both_off"] for r in rows if r["config"] == "sm90")
    macros += macro("knobsSmNinetyBits", sci(100 * sm90_bits) if sm90_bits else "0")
    mech = k.get("lag_mechanism", {})
    for case, tag in (("gauss-4x-s0", "GaussFour"), ("minilm-L1", "MinilmOne")):
        if case in mech:
            macros += macro(f"mech{tag}Exact", f"{mech[case]['exact_max']:.3f}")
            macros += macro(f"mech{tag}Lag", f"{mech[case]['lag_uniform_0_8']:.3f}")
    macros += macro("minilmTokens", str(next(r["shape"][1] for r in rows if r["family"] == "minilm")))
    return summ, minilm, sink, macros


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "paper" / "tables")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    header = "% generated by experiments/make_tables.py -- do not edit\n"
    from fa4num import polys as polys_registry
    reg = polys_registry.read()   # the shipped sets (polys/), not a user's registries
    polys, m1 = polys_table(reg)
    ladder, m2 = ladder_table()
    k = json.loads((ROOT / "experiments" / "results" / "fa4_knobs.json").read_text())
    summ, minilm, sink, m3 = knobs_tables(k)
    full = ROOT / "experiments" / "results" / "fa4_knobs_full.json"
    if full.exists():
        # the larger run (fa4_knobs.py --full): only its headline means, quoted in the text
        kf = json.loads(full.read_text())
        sf = kf["summary"]
        m3 += macro("knobsFullShape", r"$" + r"\times".join(str(x) for x in kf["synthetic_shape"]) + "$")
        m3 += macro("knobsFullSeeds", str(len(kf["seeds"])))
        m3 += macro("knobsFullCases", str(len({r["case"] for r in kf["rows"]})))
        m3 += macro("knobsFullDefaultMean", f"{sf['sm100-default']['mean_rel_l2_over_floor']:.3f}")
        m3 += macro("knobsFullRescaleZeroMean", f"{sf['sm100-rescale0']['mean_rel_l2_over_floor']:.3f}")
        m3 += macro("knobsFullDefaultLse", sci(sf["sm100-default"]["max_lse_abs"]))
        m3 += macro("knobsFullEmuOffLse", sci(sf["sm100-emu-off"]["max_lse_abs"]))
    for name, tex in (("polys", polys), ("ladder", ladder), ("knobs_summary", summ), ("knobs_minilm", minilm),
                      ("knobs_sink", sink), ("numbers", m1 + m2 + m3)):
        (a.out / f"{name}.tex").write_text(header + tex)
        print("wrote", a.out / f"{name}.tex")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
