"""Tile-level emulation of FA4's online softmax: the Hopper path (``sm90``) and the Blackwell path (``sm100``:
lazy rescale, software/MUFU exp2 split, 8-accumulator row sum), bit for bit, vectorised over rows."""
from . import sm90, sm100
from .sm90 import Sm90State
from .sm100 import Sm100State, Sm100Step, emulated_columns

__all__ = ["sm90", "sm100", "Sm90State", "Sm100State", "Sm100Step", "emulated_columns"]
