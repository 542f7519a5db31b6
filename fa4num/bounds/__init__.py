"""Rigorous and probabilistic error bounds: FA4's software exp2 and MUFU models (``exp2_error_bound``,
``mufu_error_bounds``) and FA4's attention forward per output element (``attention_error_bound``) and its backward per gradient element
(``attention_backward_error_bound``).
Derivations: docs/bounds.md."""
from .attention import AttentionBound, a_priori_bound, attention_error_bound
from .backward import BackwardBound, attention_backward_error_bound
from .exp2 import Exp2Bound, MufuBounds, exp2_error_bound, mufu_error_bounds

__all__ = ["AttentionBound", "BackwardBound", "attention_backward_error_bound", "a_priori_bound", "attention_error_bound", "Exp2Bound", "MufuBounds", "exp2_error_bound", "mufu_error_bounds"]
