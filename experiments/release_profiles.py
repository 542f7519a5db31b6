"""Write fa4num/data/releases/<release>.json: the facts of each profiled flash-attn-4 release, read from its wheel
by fa4num.upstream (ast, nothing imported), plus the emulator section below (values and switches written from
reading each release's source; see the docstring of fa4num.attention.releases).

    pip download --no-deps flash-attn-4==4.0.0bNN -d WHEELS   # for NN in 10 22 23 26 27 28 30 33 35 36
    python experiments/release_profiles.py WHEELS

Each profile lists, under "covers", the examined wheels whose facts equal its own.
"""
from __future__ import annotations

import glob
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fa4num.upstream import extract_profile_facts  # noqa: E402

FP8_OLD = {"rescale_threshold": {"16-bit": 8.0, "float8_e4m3fn": 4.0, "float8_e5m2": 4.0},
           "max_offset": {"16-bit": 0, "float8_e4m3fn": 8, "float8_e5m2": 8}}
FP8_NEW = {"rescale_threshold": {"16-bit": 8.0, "float8_e4m3fn": 0.0, "float8_e5m2": 0.0},
           "max_offset": {"16-bit": 0, "float8_e4m3fn": 8, "float8_e5m2": 8}}
OLD = {"empty_kv": "an empty KV sequence gave O = 0 * (uninitialised TMEM), NaN possible (zero-filled in 4.0.0b36)",
       "heuristic_splits": "the automatic split count (num_splits < 1) counted the M blocks without the GQA heads "
                           "and read a window side of 0 as unbounded (_get_fwd_config)",
       "sm90_backward_hd_gt_192": "the SM90 backward used 64 x 64 tiles for head dim > 192"}
EMULATOR = {
    "4.0.0b10": dict(FP8_OLD, offset_headroom_assert=False, partial_descale_misplaced=True,
                     not_emulated=dict(OLD, sm100_hd256="SM100 took no head dim 256 in 4.0.0b10")),
    "4.0.0b22": dict(FP8_OLD, offset_headroom_assert=False, partial_descale_misplaced=True, not_emulated=OLD),
    "4.0.0b23": dict(rescale_threshold={"16-bit": 8.0, "float8_e4m3fn": 4.0, "float8_e5m2": 4.0},
                     max_offset={"16-bit": 0, "float8_e4m3fn": 4, "float8_e5m2": 8}, offset_headroom_assert=True,
                     partial_descale_misplaced=False, not_emulated=OLD),
    "4.0.0b27": dict(FP8_NEW, offset_headroom_assert=True, partial_descale_misplaced=False, not_emulated=OLD),
    "4.0.0b36": dict(FP8_NEW, offset_headroom_assert=True, partial_descale_misplaced=False, not_emulated={}),
}


def main(wheels: str) -> int:
    facts = {}
    for w in glob.glob(f"{wheels}/flash_attn_4-*.whl"):
        version = pathlib.Path(w).name.split("-")[1]
        facts[version] = extract_profile_facts(w)
    out = ROOT / "fa4num/data/releases"
    for rel, emu in EMULATOR.items():
        covers = sorted((v for v, f in facts.items() if f == facts[rel]), key=lambda r: int(r.rsplit("b", 1)[1]))
        rec = {"schema": "fa4num-release/1", "release": rel, "covers": covers,
               "source": f"flash_attn_4-{rel}-py3-none-any.whl from PyPI, read by fa4num.upstream.wheel_facts",
               "facts": facts[rel], "emulator": emu}
        (out / f"{rel}.json").write_text(json.dumps(rec, indent=1) + "\n")
        print(rel, "covers", covers)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
