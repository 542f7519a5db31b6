"""The GPU twin's kernel on the CPU: Triton's interpreter, with each PTX instruction and each ``tl.dot``
evaluated by fa4num's instruction and tensor-core models.

Triton's interpreter runs a kernel's Python source on numpy arrays but refuses inline assembly and computes
``tl.dot`` with numpy's matmul. :func:`cpu_instructions` patches both for the duration of a launch: every
instruction string of :mod:`fa4num.attention._twin_kernel` maps to the fa4num model that the H200 validated at the
instruction level (``fa4num.fp`` for IEEE operations, ``fa4num.hw`` for MUFU), and ``tl.dot`` to
``fa4num.hw.mma.mma_chain`` with the wgmma model on the problem's 16-bit operands. So the CPU tests run the twin's
own kernel source, its orchestration and its order of operations, and compare its bits with the emulator's.
"""
from __future__ import annotations

import contextlib
import threading

import ml_dtypes
import numpy as np

from fa4num import fp, hw
from fa4num.hw.mma import mma_chain

from . import _twin_kernel as K

_LOCK = threading.Lock()
_ADD_RN = getattr(K._add_rn, "fn", K._add_rn)


def _cvt(dtype):
    def cvt(x):
        return np.asarray(x, np.float32).astype(dtype).astype(np.float32)
    return cvt


INSTRUCTIONS = {k.value: f for k, f in {
    K.FMA: lambda a, b, c: fp.fma(a, b, c),
    K.ADD: lambda a, b: fp.add(a, b),
    K.SUB: lambda a, b: fp.sub(a, b),
    K.MUL: lambda a, b: fp.mul(a, b),
    K.DIV: lambda a, b: np.divide(a, b, dtype=np.float32),     # div.rn.f32 is IEEE division
    K.ADD_RM: lambda a, b: fp.add(a, b, rounding="rm"),
    K.MAX: lambda a, b: fp.max(a, b),
    K.EX2_FTZ: lambda x: hw.mufu_ex2(x, arch="sm90", ftz=True),
    K.EX2: lambda x: hw.mufu_ex2(x, arch="sm90", ftz=False),
    K.RCP_FTZ: lambda x: hw.mufu_rcp(x, arch="sm90", ftz=True),
    K.LG2_FTZ: lambda x: hw.mufu_lg2(x, arch="sm90", ftz=True),
    K.TANH: lambda x: hw.mufu_model("sm90").fn("tanh")(x),
    K.CVT_BF16: _cvt(ml_dtypes.bfloat16),
    K.CVT_F16: _cvt(np.float16),
}.items()}


class _Call:
    def __init__(self, handles):
        self._handles = handles

    def get_result(self, i):
        return self._handles[i]


@contextlib.contextmanager
def cpu_instructions(*, dtype: str, accumulator: str):
    """Within the block, Triton's interpreter evaluates the twin's PTX strings and ``tl.dot`` with fa4num's
    models; ``dtype`` is the 16-bit input dtype the interpreted float32 operands hold ("bfloat16"/"float16"),
    ``accumulator`` the kernel's tensor-core accumulator table (``Kernel.accumulator``)."""
    from triton.runtime import interpreter as interp
    import triton.language as tl
    np_dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16

    def create_inline_asm(self, asm, constraints, values, type, is_pure, pack):
        fn = INSTRUCTIONS.get(asm)
        if fn is None:
            raise NotImplementedError(f"the twin's interpreter has no model for the instruction {asm!r}")
        args = [np.asarray(v.data, np.float32) for v in values]
        with np.errstate(all="ignore"):
            out = np.asarray(fn(*np.broadcast_arrays(*args)), np.float32).reshape(args[0].shape)
        return _Call([interp.TensorHandle(out, tl.float32)])

    def reduce_apply(self, input):
        # the row sums' sequential add.rn.f32 reduction (_twin_kernel._add_rn), vectorised: numpy's accumulate
        # is strictly left to right in float32 (the generic interpreter path calls the combine per element)
        if getattr(self.combine_fn, "fn", None) is _ADD_RN and len(input) == 1:
            x = np.asarray(input[0].handle.data, np.float32)
            with np.errstate(all="ignore"):
                acc = np.take(np.add.accumulate(x, axis=self.axis, dtype=np.float32), -1, axis=self.axis)
            if self.keep_dims:
                acc = np.expand_dims(acc, self.axis)
            return self.to_tensor(acc, input[0].dtype)
        return saved_reduce(self, input)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        # a (M, K) and b (K, N) hold 16-bit values in float32: the wgmma chain over K in chunks of 16
        av = np.asarray(a.data, np.float32).astype(np_dt)
        bv = np.ascontiguousarray(np.asarray(b.data, np.float32).T).astype(np_dt)
        c = np.asarray(d.data, np.float32)
        with np.errstate(all="ignore"):
            out = mma_chain(av, bv, c, model="wgmma", arch=accumulator)
        return interp.TensorHandle(np.asarray(out, np.float32), tl.float32)

    with _LOCK:
        cls = interp.InterpreterBuilder
        saved = cls.create_inline_asm, cls.create_dot
        saved_reduce = interp.ReduceOps.apply_impl
        cls.create_inline_asm, cls.create_dot = create_inline_asm, create_dot
        interp.ReduceOps.apply_impl = reduce_apply
        try:
            yield
        finally:
            cls.create_inline_asm, cls.create_dot = saved
            interp.ReduceOps.apply_impl = saved_reduce
