"""Sphinx configuration of fa4num's documentation.

Build (warnings are errors, as .ci/run builds it)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

The API pages are generated from the docstrings (autodoc + numpydoc); the tutorials' code runs while the pages
are read (``fa4run``, ``docs/_ext/fa4run.py``, and matplotlib's plot directive), so a tutorial that stops working
fails the build.
"""
import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
# the checkout's fa4num, not another copy installed in the environment
sys.path.insert(0, str(DOCS.parent))
os.environ.setdefault("MPLBACKEND", "Agg")

import fa4num  # noqa: E402

project = "fa4num"
author = "the fa4num developers"
copyright = "2026, the fa4num developers"
version = release = fa4num.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_parser",
    "matplotlib.sphinxext.plot_directive",
    "fa4run",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# autodoc: members in the order of each module's __all__ (the order its author chose); signatures without type hints
# (the docstrings give the types)
autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_default_options = {"members": True, "show-inheritance": False}

# numpydoc: the house style's sections; class pages list their members through autodoc, not numpydoc tables
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
# the checks the docs build enforces on every documented object (tests/top/test_doctests.py checks the sections)
numpydoc_validation_checks = {"GL06", "GL07", "SS01"}

# plot directive: the tutorials' figures, drawn by the code shown above each figure
plot_include_source = True
plot_html_show_source_link = False
plot_html_show_formats = False
plot_formats = [("png", 110)]
plot_rcparams = {"figure.figsize": (6.4, 3.6), "figure.dpi": 110}

html_theme = "alabaster"
html_title = "fa4num"
html_static_path = []
html_theme_options = {
    "description": "Bit-exact numerics of FlashAttention-4",
    "fixed_sidebar": True,
    "page_width": "1100px",
    "sidebar_width": "240px",
}
