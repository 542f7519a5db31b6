"""Models of NVIDIA instructions that IEEE does not define: MUFU ex2/rcp/lg2 (tables measured per GPU arch).

``mufu_ex2/mufu_rcp/mufu_lg2(x, *, arch="sm90", ftz=True)`` are bit-exact on every fp32 input (checked on an
H200 over all 2^32 inputs); ``mufu_model(arch)`` is the same instructions as one object per table set (or
"libm", the statistical mode) that the emulators are handed; ``load_tables(arch, path=None)`` reads a measured table set. The scalar kernels they
are built from (``fa4num.hw.mufu.ex2_ftz_bits`` ...) are public for loops in higher layers. The tensor-core MMA
model lives in fa4num.hw.mma. Measuring tables on a GPU is fa4num.gpu's job (``fa4num mufu build``).
"""
from .model import MufuModel, mufu_model
from .mufu import MufuTables, load_tables, mufu_ex2, mufu_lg2, mufu_rcp, table_provenance
from .tables import available_archs
from .tanh import mufu_tanh, tanh_table, tanh_table_available

__all__ = ["mufu_ex2", "mufu_rcp", "mufu_lg2", "load_tables", "MufuTables", "table_provenance", "available_archs",
           "mufu_tanh", "tanh_table", "tanh_table_available", "MufuModel", "mufu_model"]
