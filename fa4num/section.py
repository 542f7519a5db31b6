"""What a section of ``fa4num report`` is made of (a leaf module: every layer that contributes a section uses it,
and the report at the top assembles them; see fa4num.report).

Examples
--------
>>> from pathlib import Path
>>> s = Section("Title", "Some *Markdown*.", data={"n": 1})
>>> s.figures, ReportContext(Path("out"), quick=True, progress=False).grid_bits
([], 10)
>>> Check("bound vs emulator", compared=0).empty
True
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Section", "Check", "ReportContext", "GRID_BITS", "QUICK_GRID_BITS"]

GRID_BITS = 16                       # comparison grids: x = k * 2^-16 (8.3 M points on [-126, 0])
QUICK_GRID_BITS = 10                 # --quick


@dataclass(frozen=True)
class Check:
    """One comparison a section made: how many values it compared and how many of them failed.

    ``compared == 0`` (no case found, every output NaN, ...) is a check that checked nothing: the report says so
    and ``fa4num report`` exits non-zero, as it does when ``failed > 0`` (a claim the data refutes, such as a
    violated rigorous bound). ``failed`` is None for a measurement with no pass/fail criterion (an error
    against fp64)."""
    name: str
    compared: int
    failed: int | None = None
    unit: str = "values"

    @property
    def empty(self) -> bool:
        return self.compared == 0


@dataclass
class Section:
    """One part of the report: Markdown text, figure files (relative to the output dir), JSON-able data, and the
    checks it made (a section that only shows numbers has none)."""
    title: str
    markdown: str
    figures: list = field(default_factory=list)
    data: dict = field(default_factory=dict)
    headline: str = ""    # one line for the report's summary (numbers with their domain), or "" for none
    checks: list = field(default_factory=list)   # of Check


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
