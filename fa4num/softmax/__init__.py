"""Tile-level emulation of FA4's online softmax: the Hopper path (``sm90``) and the Blackwell path (``sm100``:
FA4's named steps ``update_row_max``, ``scale_subtract_rowmax``, ``apply_exp2_convert``, ``update_row_sum``),
bit for bit, vectorised over rows; ``mla`` arranges the same steps as FA4's MLA kernels do (two threads per row).

``lazy`` holds FA4 SM100's lazy-rescale rule, written once (``lazy_rescale``, a numba scalar function, and
``lazy_rescale_rows``): the specification that every other copy calls or is tested against.
The elementwise operations the stages are made of are public for the attention layer: ``ffma`` (fma.rn.f32),
``mufu(name, arch)`` (MUFU ex2/rcp/lg2 .ftz from a ``fa4num.hw.MufuModel`` or its name: the table models, or
libm for the statistical mode), ``scale_log2_of`` (FA4's softmax_scale * LOG2_E in fp32), ``f32``, ``LN2_F32``
and ``LOG2_E_F32``."""
from fa4num.constants import LN2_F32, LOG2_E_F32

from . import ballot, lazy, mla, sm90, sm100
from ._ops import f32, ffma, mufu, scale_log2_of
from .lazy import lazy_rescale, lazy_rescale_rows
from .sm90 import Sm90State
from .sm100 import Sm100State, Sm100Step, emulated_columns

__all__ = ["ballot", "sm90", "sm100", "mla", "lazy", "Sm90State", "Sm100State", "Sm100Step", "emulated_columns", "lazy_rescale",
           "lazy_rescale_rows", "LN2_F32", "LOG2_E_F32", "f32", "ffma", "mufu", "scale_log2_of"]
