"""What a section of ``fa4num report`` is made of (a leaf module: every layer that contributes a section uses it,
and the report at the top assembles them; see fa4num.report).

Examples
--------
>>> from pathlib import Path
>>> s = Section("Title", "Some *Markdown*.", data={"n": 1})
>>> s.figures, ReportContext(Path("out"), quick=True, progress=False).grid_bits
([], 10)
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Section", "ReportContext", "GRID_BITS", "QUICK_GRID_BITS"]

GRID_BITS = 16                       # comparison grids: x = k * 2^-16 (8.3 M points on [-126, 0])
QUICK_GRID_BITS = 10                 # --quick


@dataclass
class Section:
    """One part of the report: Markdown text, figure files (relative to the output dir), JSON-able data."""
    title: str
    markdown: str
    figures: list = field(default_factory=list)
    data: dict = field(default_factory=dict)
    headline: str = ""    # one line for the report's summary (numbers with their domain), or "" for none


@dataclass
class ReportContext:
    """Where a section writes its figures and how much it may compute (``quick``: subsampled)."""
    out_dir: Path
    quick: bool
    progress: bool

    @property
    def grid_bits(self) -> int:
        return QUICK_GRID_BITS if self.quick else GRID_BITS

    def say(self, text: str) -> None:
        """A progress line on stderr when progress is on (stdout stays for results); how a provider talks to the
        user without importing the report module above it."""
        if self.progress:
            print(text, file=sys.stderr, flush=True)
