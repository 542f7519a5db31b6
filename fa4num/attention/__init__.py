"""FA4's attention forward, emulated bit for bit (``forward``), fp64 references and accuracy metrics
(``reference``), and the seeded inputs used by the GPU checks (``inputs``)."""
from .forward import AttentionResult, AttentionStats, forward

__all__ = ["forward", "AttentionResult", "AttentionStats"]
