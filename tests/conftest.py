"""Shared fixtures: a run isolated from the developer's own fa4num files, and the attention case factory.

- ``_isolated_user_files`` (autouse): the user registry ($XDG_DATA_HOME/fa4num/polys), $FA4NUM_POLYS and the user
  cache ($FA4NUM_CACHE_DIR, $XDG_CACHE_HOME/fa4num) point into pytest's temporary folders, so sets a developer
  fitted into ~/.local/share/fa4num or entries in ~/.cache/fa4num cannot change a result. The registry is fresh
  for every test (a test that writes a set cannot leak it into the next); the cache is shared by the whole run,
  as a cold CI run shares it, so the values it keeps are computed once per run, not once per test. Subprocesses
  inherit the same environment. A test that needs its own registry or cache sets the variables itself
  (monkeypatch), which overrides these.
- ``attention_case``: seeded q, k, v in FA4's layout drawn by :func:`fa4num.attention.inputs.make_inputs` (the
  draw the golden files' inputs come from), named by keyword instead of CaseSpec's nine positional fields.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from fa4num.attention.inputs import CaseSpec, make_inputs


@pytest.fixture(scope="session")
def _run_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("fa4num-cache")


@pytest.fixture(autouse=True)
def _isolated_user_files(monkeypatch, tmp_path_factory, _run_cache):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))
    monkeypatch.delenv("FA4NUM_POLYS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(_run_cache))
    monkeypatch.setenv("FA4NUM_CACHE_DIR", str(_run_cache / "fa4num"))
    # a developer's FA4NUM_NO_CACHE=1 would take the cache out of the run that CI has
    monkeypatch.delenv("FA4NUM_NO_CACHE", raising=False)


@dataclass(frozen=True)
class AttentionCase:
    """q, k, v of one spec; unpacks as ``q, k, v = case``."""
    spec: CaseSpec
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray

    def __iter__(self):
        return iter((self.q, self.k, self.v))


def make_attention_case(*, seqlen_q: int, seqlen_k: int | None = None, heads: int = 2, heads_kv: int | None = None,
                        head_dim: int = 64, batch: int = 1, causal: bool = False, dtype: str = "bfloat16",
                        kind: str = "normal", q_mult: float = 1.0, softmax_scale: float | None = None,
                        seed: int = 0) -> AttentionCase:
    """One attention case: shapes (batch, seqlen, heads, head_dim), seqlen_k defaulting to seqlen_q and heads_kv
    to heads (no GQA); ``kind`` and the draw as :func:`fa4num.attention.inputs.make_inputs` has them."""
    spec = CaseSpec("case", kind, batch, seqlen_q, seqlen_q if seqlen_k is None else seqlen_k, heads,
                    heads if heads_kv is None else heads_kv, head_dim, causal, dtype=dtype,
                    softmax_scale=softmax_scale, q_mult=q_mult, seed=seed)
    return AttentionCase(spec, *make_inputs(spec))


@pytest.fixture
def attention_case():
    """The factory :func:`make_attention_case` (keyword arguments only)."""
    return make_attention_case
