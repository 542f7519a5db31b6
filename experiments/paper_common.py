"""What the paper's figure and table scripts share: one naming scheme for distributions, configurations and
knobs, and the loaders of the committed results (nothing here computes beyond summaries)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
H200 = RESULTS / "h200_20261201"
STUDY_DATA = ROOT / "fa4num" / "study" / "data"   # the study results the report shows too (package data)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# one name per thing, in figures and tables alike
DIST_LABEL = {"gaussian": "Gaussian", "outliers": "outliers", "sink": "sink", "rising": "rising",
              "llm": "LLM-like GQA", "minilm": "MiniLM"}
DIST_ORDER = list(DIST_LABEL)
CFG_LABEL = {"sm100-default": "SM100 default", "sm100-rescale0": "threshold 0", "sm100-emu-off": "emulation off",
             "sm100-both-off": "both off", "sm100-deg4": "degree 4 (FA4)", "sm100-bf16deg3": "bf16-fit cubic",
             "sm100-emu-max": "emulation max", "sm90": "SM90 path"}
def case_label(case: str) -> str:
    """A fa4_knobs.json case id in the paper's words: "gauss-4x-s0" -> "Gaussian, q x 4", "minilm-L1" ->
    "MiniLM layer 1", "sink-8-s0" -> "sink, Delta = 8"."""
    if case.startswith("minilm-L"):
        return f"MiniLM layer {case.removeprefix('minilm-L')}"
    if case.startswith("sink-"):
        return f"sink, $\\Delta$ = {case.split('-')[1]}"
    if case.startswith("fa3-outliers"):
        return "FA3 outliers"
    if case.startswith("gauss-"):
        mult = case.split("-")[1].removesuffix("x")
        return "Gaussian" + (f", q $\\times$ {mult}" if mult != "1" else "") + (", causal" if "causal" in case else "")
    return case


KNOB_LABEL = {"default": "SM100 default", "rescale_threshold=0": "threshold 0", "rescale_threshold=4": "threshold 4",
              "rescale_threshold=16": "threshold 16", "ex2_emu_freq=0": "emulation off",
              "ex2_emu_freq=1,ex2_emu_res=1,ex2_emu_start_frg=0": "emulation max",
              "coeffs=fa4-deg4": "degree 4 (FA4)", "coeffs=fa4num-bf16-deg3": "bf16-fit cubic",
              "poly_degree=2": "degree 2 (FA4)", "max_offset=8": "max_offset 8", "dtype=float16": "fp16 inputs"}
KNOB_ORDER = list(KNOB_LABEL)
SM100_MARK = "SM100, emulated (never run on Blackwell)"


# The skip-rate stores the paper reads: 1k-8k on the CPU, 16k-128k on the H200 (re-run 2026-12-02 with today's
# counter, experiments/gpu/skip_rate_h200.py); require_skip_definition refuses a store or result of an older
# definition.
SKIP_STORES = ("study_skip_rate_cpu", "study_skip_rate_h200")
# the per-row / per-warp / per-tile shares of fa4num.softmax.ballot the paper reports, with their CIs
SKIP_SHARES = tuple(f"{k}_share_{g}" for k in ("avoided", "skipped") for g in ("row", "warp", "tile"))


def skip_definition_version() -> int:
    """Today's skip counter definition (fa4num.softmax.ballot.SKIP_DEFINITION_VERSION)."""
    from fa4num.softmax.ballot import SKIP_DEFINITION_VERSION
    return SKIP_DEFINITION_VERSION


def recorded_skip_definitions(source) -> set:
    """The skip definition versions a result records: a JSON document (``skip_definition_version`` at its top
    or in its provenance; none recorded: {None}) or a result store's DataFrame (its column; none: {None})."""
    if isinstance(source, dict):
        v = source.get("skip_definition_version", source.get("provenance", {}).get("skip_definition_version"))
        return {v}
    if "skip_definition_version" not in source:
        return {None}
    return {None if v != v else int(v) for v in source["skip_definition_version"].unique()}


def require_skip_definition(source, name: str):
    """``source`` unchanged if it was written by today's skip counter definition; else ValueError naming it.

    Examples
    --------
    >>> require_skip_definition({"skip_definition_version": skip_definition_version()}, "x")["skip_definition_version"] > 1
    True
    """
    found = recorded_skip_definitions(source)
    if found != {skip_definition_version()}:
        raise ValueError(f"{name} was written by skip counter definition {sorted(found, key=str)}, today's is "
                         f"{skip_definition_version()} (fa4num.softmax.ballot): re-run it before building the paper")
    return source


def skip_rows():
    """The rows of the paper's skip-rate stores (:data:`SKIP_STORES`), each checked for today's definition; one
    sample per (dist, seqlen, threshold, seed): where a GPU and a CPU store both ran one, the GPU row is kept
    (their task keys differ by the device, and their random streams too)."""
    import pandas as pd

    from fa4num.study.store import device_used, read_store
    df = pd.concat([require_skip_definition(read_store(STUDY_DATA / d), f"fa4num/study/data/{d}")
                    for d in SKIP_STORES], ignore_index=True)
    df = df.assign(_gpu=device_used(df).str.startswith("cuda")).sort_values("_gpu", kind="stable")
    return (df.drop_duplicates(["dist", "seqlen", "threshold", "seed"], keep="last").drop(columns="_gpu")
            .reset_index(drop=True))


def skip_table():
    """CI table (95 % Student-t over seeds) of the paper's skip-rate stores by (dist, seqlen, threshold): that of
    fa4num.study.summary.skip_table (events and rescales per row, from rows' votes, and lags), the shares of :data:`SKIP_SHARES`
    and ``mults_share`` (FA4's O-rescale multiplies over always-rescale's, per task); and the rows."""
    from fa4num.study import summary
    df = skip_rows()
    # per row in today's counters (the stores' events_per_row / done_per_row are the version-1 ones)
    df = df.assign(mults_share=df.rescale_mults_ballot / df.rescale_mults_always,
                   events_per_row=df.events_row / df.rows, done_per_row=df.rescales_row / df.rows)
    t = summary.skip_table(df)
    shares = summary.ci_table(df, ["dist", "seqlen", "threshold"], [*SKIP_SHARES, "mults_share"])
    return t.merge(shares.drop(columns="n"), on=["dist", "seqlen", "threshold"]), df


def baselines():
    from fa4num.study.baselines import load_baselines
    return load_baselines([STUDY_DATA / "baselines_h200_fp64gpu.json"])


def error_budget():
    from fa4num.study.store import read_store
    return read_store(RESULTS / "study_error_budget")


def knobs():
    """experiments/results/fa4_knobs.json, refused when its skip counters are not today's."""
    return require_skip_definition(json.loads((RESULTS / "fa4_knobs.json").read_text()),
                                   "experiments/results/fa4_knobs.json")


BOUNDS_VALIDATION = ROOT / "fa4num" / "bounds" / "data" / "bounds_validation.json"
BV_GROUPS = {"h200_plain": "H200 kernel, plain cases", "h200_features_dev": "H200 kernel, feature cases (dev)",
             "h200_features_holdout": "H200 kernel, feature cases (holdout)", "emulator_gaussian": "emulator, Gaussian",
             "emulator_outliers": "emulator, outliers", "emulator_sink": "emulator, sink",
             "emulator_rising": "emulator, rising", "emulator_large_scale": "emulator, q $\\times$ 4",
             "emulator_minilm": "emulator, MiniLM"}


def bounds_validation(path=None):
    """fa4num/bounds/data/bounds_validation.json (experiments/bounds_validation.py), or None before it exists."""
    p = Path(path) if path else BOUNDS_VALIDATION
    return json.loads(p.read_text()) if p.exists() else None


def bounds():
    return json.loads((RESULTS / "paper_bounds.json").read_text())
