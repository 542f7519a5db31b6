"""The Examples sections of fa4num's docstrings run as doctests (numpydoc ``Examples``; README "Layers").

Every module of the package is imported and its doctests run, except modules that need a GPU stack (Triton) to
import. An example that prints must show what it prints; one that fails is a failing test here."""
from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "fa4num"
# modules that import Triton/CUDA at module level (their examples would need a GPU)
GPU_ONLY = {"fa4num.gpu.kernels"}


def _modules():
    out = []
    for p in sorted(PKG.rglob("*.py")):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if name not in GPU_ONLY and ">>>" in p.read_text():
            out.append(name)
    return out


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples_run(name):
    mod = importlib.import_module(name)
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert res.failed == 0, f"{res.failed} of {res.attempted} doctest examples failed in {name} (run python3 -m " \
                            f"doctest -v {name.replace('.', '/')}.py for details)"


def test_the_public_api_has_examples():
    """The entry points named in the README carry a runnable Examples section."""
    from fa4num import constants, fp, hw, polys, report
    from fa4num.ex2 import emulate
    from fa4num.gpu import ops
    for obj in (fp.fma, fp.to_bf16, emulate.fa4_emulated, hw.mufu_ex2, hw.load_tables, polys.default_registry,
                constants, report.write_report,
                ops):
        assert "Examples\n" in (obj.__doc__ or "") and ">>>" in obj.__doc__, getattr(obj, "__name__", obj)


def test_the_readme_functions_have_numpydoc_sections():
    """The functions the README's API names carry Parameters, Returns and a runnable Examples section."""
    from fa4num import attention, bounds, fp, hw
    from fa4num.ex2 import engine
    fns = (fp.fma, fp.add, fp.sub, fp.mul, fp.max, fp.min, fp.exp2_cr, fp.log2_cr, fp.rcp_cr, fp.ulp_distance,
           hw.mufu_ex2, hw.mufu_rcp, hw.mufu_lg2, engine.sweep, engine.fa4_implementation,
           engine.mufu_implementation, bounds.exp2_error_bound, bounds.mufu_error_bounds, bounds.attention_error_bound,
           attention.forward, attention.backward)
    for fn in fns:
        doc = fn.__doc__ or ""
        missing = [s for s in ("Parameters", "Returns", "Examples") if f"{s}\n    ----" not in doc]
        assert not missing and ">>>" in doc, f"{fn.__module__}.{fn.__name__} lacks {missing}"
