"""Tile-level emulation of FA4's online softmax: the Hopper path (``sm90``) and the Blackwell path (``sm100``:
lazy rescale, software/MUFU exp2 split, 8-accumulator row sum), bit for bit, vectorised over rows.

The elementwise operations the stages are made of are public for the attention layer: ``ffma`` (fma.rn.f32),
``mufu(name, arch)`` (MUFU ex2/rcp/lg2 .ftz from the fa4num.hw table models, or libm for the statistical mode),
``scale_log2_of`` (FA4's softmax_scale * LOG2_E in fp32), ``f32``, ``LN2_F32`` and ``LOG2_E_F32``."""
from . import sm90, sm100
from fa4num.constants import LN2_F32, LOG2_E_F32

from ._ops import f32, ffma, mufu, scale_log2_of
from .sm90 import Sm90State
from .sm100 import Sm100State, Sm100Step, emulated_columns

__all__ = ["sm90", "sm100", "Sm90State", "Sm100State", "Sm100Step", "emulated_columns", "LN2_F32", "LOG2_E_F32",
           "f32", "ffma", "mufu", "scale_log2_of"]
