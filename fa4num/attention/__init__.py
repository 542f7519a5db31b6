"""FA4's call checked once (``plan`` -> :class:`Problem`), its kernels as objects (``KERNELS``), the attention
forward emulated bit for bit (``forward``; ``mode="statistical"`` for a fast approximate run), the same statistical mode in torch for GPUs (``forward_torch``), fp64 references and accuracy metrics
(``reference``), the seeded inputs used by the GPU checks (``inputs``), and the reproducibility planner: the
decisions that set a call's bits (``plan_of``, :mod:`.schedule`) and which rows of two calls get the same bits
(``same_bits``, :mod:`.compare`); FA4's MLA forward on SM100 and sparse MLA (``mla_forward``, ``mla_fp64``,
:mod:`.mla`, emulated from source)."""
from .backward import BackwardResult, BackwardStats, backward
from .compare import SameBits, same_bits
from .forward import AttentionResult, AttentionStats, forward
from .kernels import KERNELS, Kernel
from .mla import MlaResult, mla_forward, mla_fp64
from .problem import Problem, plan
from .schedule import Plan, plan_of
from .torch_backend import forward_torch

__all__ = ["plan", "Problem", "KERNELS", "Kernel", "forward", "backward", "BackwardResult", "BackwardStats",
           "forward_torch", "AttentionResult", "AttentionStats", "plan_of", "Plan", "same_bits", "SameBits",
           "mla_forward", "mla_fp64", "MlaResult"]
