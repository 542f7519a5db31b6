"""fa4num: numerical-accuracy toolkit for FlashAttention-4.

Data flows one way: fp -> hw / ex2 -> softmax -> attention -> experiments -> paper.
Subpackages are imported lazily so that ``import fa4num`` stays cheap and works without a GPU.
"""
import importlib

__version__ = "0.1.0"
_SUBPACKAGES = ("fp", "hw", "ex2", "fit", "softmax", "attention", "gpu")


def __getattr__(name):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"fa4num.{name}")
    raise AttributeError(f"module 'fa4num' has no attribute {name!r}")


__all__ = list(_SUBPACKAGES)
