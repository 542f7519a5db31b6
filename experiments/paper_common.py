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


def skip_table():
    """CI table (95 % Student-t over seeds) of the skip-rate stores; H200 rows win over CPU rows of a task."""
    from fa4num.study import summary
    from fa4num.study.store import merged_skip_rows, store_dirs
    dirs = store_dirs(STUDY_DATA, "study_skip_rate*")
    df = merged_skip_rows(dirs)
    return summary.skip_table(df), df


def cpu_skip_table():
    """The CPU grid alone (to 8k), for the cross-check of the H200 numbers."""
    from fa4num.study import summary
    from fa4num.study.store import read_store
    return summary.skip_table(read_store(STUDY_DATA / "study_skip_rate_cpu"))


def baselines():
    from fa4num.study.baselines import load_baselines
    return load_baselines([STUDY_DATA / "baselines_h200_fp64gpu.json"])


def error_budget():
    from fa4num.study.store import read_store
    return read_store(RESULTS / "study_error_budget")


def knobs():
    return json.loads((RESULTS / "fa4_knobs.json").read_text())


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
