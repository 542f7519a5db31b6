"""FA4's attention forward, emulated bit for bit (``forward``; ``mode="statistical"`` for a fast approximate
run), the same statistical mode in torch for GPUs (``forward_torch``), fp64 references and accuracy metrics
(``reference``), and the seeded inputs used by the GPU checks (``inputs``)."""
from .backward import BackwardResult, BackwardStats, backward
from .forward import AttentionResult, AttentionStats, forward
from .torch_backend import forward_torch

__all__ = ["forward", "backward", "BackwardResult", "BackwardStats", "forward_torch", "AttentionResult", "AttentionStats"]
