"""fa4num's FlexAttention front door (score_mod, mask_mod, aux tensors, block sparsity) against the real FA4 SM90
kernel (4.0.0b36) on an H200, bit for bit: tests/golden/attention/fa4_sm90_flex_h200.npz, written by
experiments/gpu/flex_capture.py (provenance inside). Each case's inputs are rebuilt from its seed (their SHA-256
is checked), the mods are fa4num's built-ins standing for the CuTe DSL mods the capture ran, and the emulator's
whole output and LSE must have the kernel's SHA-256. Block-sparse cases also check that the emulator predicts
the GPU's answer to "does the sparse call give the dense call's bits?".

The golden tests skip only while the capture file is absent; the bookkeeping is tested on a dry run of the
capture script (fa4num's emulator standing in for the kernel) either way."""
import json
import pathlib

import numpy as np
import pytest

from _captures import load_experiment

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "attention" / "fa4_sm90_flex_h200.npz"


def _load_capture():
    return load_experiment("flex_capture")


cap = _load_capture()


def _records(path=GOLDEN):
    if not path.exists():
        return []
    return [r for r in cap.read(path)[1]["cases"] if "error" not in r]


def check_case(rec, arrays):
    """Assert one captured case: inputs, the emulator's forward bits, for backward cases dq, dk, dv, and for
    sparse cases the dense twin."""
    case, name = rec["case"], rec["case"]["name"]
    arrs = cap.case_inputs(case)
    assert cap._sha(*(arrs[n] for n in ("q", "k", "v", "dout") if n in arrs)) == rec["input_sha256"], \
        f"{name}: regenerated inputs differ from the ones the H200 saw"
    for i, a in enumerate(arrs["aux"]):
        assert np.array_equal(a, arrays[f"{name}.aux{i}"]), f"{name}: aux tensor {i} differs from the captured one"
    for f in ("mask_block_cnt", "mask_block_idx", "full_block_cnt", "full_block_idx"):
        if "bs" in arrs:
            assert np.array_equal(arrs["bs"][f], arrays[f"{name}.bs.{f}"]), f"{name}: block-sparse {f} differs"
    got = cap.emulate(case, arrs)
    want = rec["sha256"]
    ok = cap._sha(got["out"]) == want["out"] and cap._sha(got["lse"]) == want["lse"]
    if not ok:
        lse_bad = int((got["lse"].view(np.uint32) != arrays[f"{name}.lse"].view(np.uint32)).sum())
        idx = cap.sample_index(got["out"].shape[1])
        rows_bad = int((got["out"][:, idx] != arrays[f"{name}.out_rows"]).sum())
        hint = ""
        if case["score_mod"] in ("rel_bias", "rel_bias_clamped", "alibi_aux", "alibi_exp2"):
            alt = cap.emulate(case, arrs, contract=False)
            if cap._sha(alt["out"]) == want["out"] and cap._sha(alt["lse"]) == want["lse"]:
                hint = "; with contract=False (no FFMA of the bias add with the scale multiply) the bits match"
        pytest.fail(f"{name}: {lse_bad}/{got['lse'].size} LSE values and {rows_bad} sampled output elements "
                    f"differ; digest of all outputs differs{hint}")
    for g in ("dq", "dk", "dv"):
        if g in got:
            if cap._sha(got[g]) != want[g]:
                bad = int((got[g][:, cap.sample_index(got[g].shape[1])] != arrays[f"{name}.{g}_rows"]).sum())
                pytest.fail(f"{name}: {g} differs ({bad} sampled elements)")
    if "equal_to_dense" in rec:
        dense = cap.emulate(case, arrs, sparse=False)
        assert cap._sha(dense["out"]) == rec["twin_sha256"]["out"], f"{name}: the dense twin's bits differ"
        same = cap._same(got, dense)
        assert same == rec["equal_to_dense"], (f"{name}: on the H200 sparse == dense is {rec['equal_to_dense']}, "
                                               f"fa4num says {same}")


@pytest.mark.skipif(not GOLDEN.exists(), reason="tests/golden/attention/fa4_sm90_flex_h200.npz not captured yet "
                    "(experiments/gpu/flex_capture.py)")
@pytest.mark.parametrize("rec", _records(), ids=lambda r: r["case"]["name"])
def test_flex_case_bit_exact(rec):
    arrays, _ = cap.read(GOLDEN)
    check_case(rec, arrays)


@pytest.mark.skipif(not GOLDEN.exists(), reason="capture file absent")
def test_capture_provenance_and_coverage():
    _, meta = cap.read(GOLDEN)
    prov = meta["provenance"]
    assert not prov.get("dry_run"), "the committed capture is a dry run, not the H200's"
    assert "H200" in prov.get("gpu", "") and prov["packages"]["flash-attn-4"] == "4.0.0b36"
    ran = {r["case"]["name"].split(".", 1)[1] for r in meta["cases"] if "error" not in r}
    assert {n for n in ran if n.startswith(("sm_", "mm_", "bs_"))}, "no forward case ran"


# ---------------------------------------------------------------------------------------------- bookkeeping
DRY = ("sm_rel_bias_d128", "mm_document_d64", "bs_document_d128", "bs_causal_gqa_bcast_d128")


@pytest.fixture(scope="module")
def dry_capture(tmp_path_factory):
    out = tmp_path_factory.mktemp("flex") / "dry.npz"
    assert cap.main(["--dry-run", "--sets", "dev", "--only", ",".join(DRY), "--out", str(out)]) == 0
    return out


def test_dry_run_file_checks_out(dry_capture):
    """The capture's bookkeeping and this test's checker agree on a file whose 'kernel' is fa4num itself."""
    arrays, meta = cap.read(dry_capture)
    assert [r["case"]["name"] for r in meta["cases"]] == [c["name"] for c in cap.select(cap.cases(), ",".join(DRY))]
    # the one case fa4num refuses is the one FA4 refuses (the deterministic block-sparse backward; "bs_document"
    # selects it too)
    refused = [r["case"]["name"] for r in meta["cases"] if "error" in r]
    assert refused == ["dev.bwd_bs_document_d128"], refused
    assert "deterministic=True with block_sparse_tensors_bwd" in meta["cases"][[r["case"]["name"] for r in
                                                                                meta["cases"]].index(refused[0])]["error"]
    assert meta["provenance"]["dry_run"]
    for rec in meta["cases"]:
        if "error" not in rec:
            check_case(rec, arrays)
    # a document mask's full blocks interleave with its partial ones: the sparse order is not the dense one
    for name in ("dev.bs_document_d128",):
        rec = next(r for r in meta["cases"] if r["case"]["name"] == name)
        assert rec["equal_to_dense"] is False, name


@pytest.mark.skipif(not GOLDEN.exists(), reason="capture file absent")
def test_what_fa4_refused_on_the_h200_fa4num_refuses():
    """The deterministic block-sparse backward: FA4 b36's SM90 kernel asserts (the capture recorded it), and
    fa4num refuses the same call instead of computing one FA4 cannot."""
    arrays, meta = cap.read(GOLDEN)
    refused = [r for r in meta["cases"] if "Deterministic not implemented for block-sparse backward"
               in r.get("error", "")]
    assert refused, "the capture recorded no FA4 refusal"
    for rec in refused:
        case = rec["case"]
        arrs = cap.case_inputs(case)
        with pytest.raises(ValueError, match="deterministic=True with block_sparse_tensors_bwd"):
            cap.emulate(case, arrs)


def test_checker_catches_a_changed_bit(dry_capture):
    arrays, meta = cap.read(dry_capture)
    rec = next(r for r in meta["cases"] if r["case"]["name"] == "dev.sm_rel_bias_d128")
    bad = json.loads(json.dumps(rec))
    bad["case"]["params"]["clamp"] = 1
    bad["case"]["score_mod"] = "rel_bias_clamped"
    with pytest.raises(pytest.fail.Exception, match="differ"):
        check_case(bad, arrays)


def test_a_failing_case_is_recorded_and_the_rest_run(tmp_path):
    case_list = cap.select(cap.cases(), "sm_times_two,mm_causal_d128")
    assert len(case_list) == 3    # the bwd_ case matches too
    broken = json.loads(json.dumps(case_list[0]))
    broken["name"], broken["aux"] = "dev.broken", ["no_such_aux"]
    arrays, meta = cap.capture([broken] + case_list, cap.EmulatorRunner(), {"dry_run": True})
    assert "unknown aux" in meta["cases"][0]["error"]
    assert [("error" in r) for r in meta["cases"]] == [True, False, False, False]


def test_merge_keeps_every_case_once(tmp_path, dry_capture):
    other = tmp_path / "b.npz"
    cap.main(["--dry-run", "--sets", "holdout", "--only", "sm_times_two", "--out", str(other)])
    merged = tmp_path / "m.npz"
    meta = cap.merge([dry_capture, other, dry_capture], merged)
    names = [r["case"]["name"] for r in meta["cases"]]
    assert sorted(names) == sorted(set(names)) and "holdout.sm_times_two_d64" in names
    assert merged.stat().st_size < 4e6


def test_case_list_is_complete_and_small():
    dev, hold = cap.cases(), cap.cases(1000)
    assert len(dev) == len(hold) and len({c["name"] for c in dev + hold}) == 2 * len(dev)
    kinds = {c["mask_mod"] for c in dev} | {c["score_mod"] for c in dev}
    assert {"causal", "window", "prefix_lm", "document", "alibi_aux", "rel_bias", "softcap"} <= kinds
    assert any(c["sparse"] and c["twin"] for c in dev) and any(c["backward"] for c in dev)
    assert all(128 <= c["seqlen_q"] <= 1024 and c["head_dim"] in (64, 128) for c in dev + hold)
    assert cap.select(dev, "nothing_matches") == []
