"""Triton kernels that run one PTX string (fa4num.gpu.ptx) elementwise over raw 32-bit patterns.

Two launch shapes: :func:`run` over given input tensors, and :func:`run_range` over a contiguous range of fp32
bit patterns generated in the kernel (``start + i``), so an exhaustive sweep of 2^32 inputs needs no input
memory. Needs torch with CUDA and Triton; import through :mod:`fa4num.gpu`, which checks that first.
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from .ptx import Op

_BLOCK = 1024


@triton.jit
def _k1(x_ptr, o_ptr, n, ASM: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    o = tl.inline_asm_elementwise(ASM, "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(o_ptr + offs, o, mask=m)


@triton.jit
def _k2(x_ptr, y_ptr, o_ptr, n, ASM: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    o = tl.inline_asm_elementwise(ASM, "=r,r,r", [x, y], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(o_ptr + offs, o, mask=m)


@triton.jit
def _k3(x_ptr, y_ptr, z_ptr, o_ptr, n, ASM: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    z = tl.load(z_ptr + offs, mask=m)
    o = tl.inline_asm_elementwise(ASM, "=r,r,r,r", [x, y, z], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(o_ptr + offs, o, mask=m)


@triton.jit
def _k_range(o_ptr, start, n, ASM: tl.constexpr, BLOCK: tl.constexpr):
    # Inputs are the 32-bit patterns start, start+1, ... (mod 2^32); start < 2^32 is passed as int64.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = ((start + offs) & 0xFFFFFFFF).to(tl.uint32).to(tl.int32, bitcast=True)
    o = tl.inline_asm_elementwise(ASM, "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(o_ptr + offs, o, mask=m)


def _as_i32(t) -> torch.Tensor:
    """Bits as an int32 CUDA tensor (Triton and torch handle int32 everywhere; uint32 support is partial)."""
    if not isinstance(t, torch.Tensor):
        t = np.ascontiguousarray(t)
        if t.dtype.itemsize != 4:
            raise ValueError(f"inputs must be 32-bit arrays (uint32/int32/float32 bit patterns), got {t.dtype}")
        t = torch.from_numpy(t.view(np.int32))
    if t.dtype not in (torch.uint32, torch.int32, torch.float32):
        raise ValueError(f"inputs must be 32-bit arrays (uint32/int32/float32 bit patterns), got {t.dtype}")
    return t.contiguous().view(torch.int32).cuda()


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """uint32 numpy array of the bits in an int32 tensor returned by :func:`run` / :func:`run_range`."""
    return t.cpu().numpy().view(np.uint32)


def run(op: Op, *inputs) -> torch.Tensor:
    """Run ``op`` elementwise over ``inputs`` (same-length 32-bit arrays or CUDA tensors). Returns the result bits as an int32 CUDA tensor."""
    if len(inputs) != op.n_in:
        raise ValueError(f"{op.name} takes {op.n_in} inputs, got {len(inputs)}")
    xs = [_as_i32(x) for x in inputs]
    n = xs[0].numel()
    if any(x.numel() != n for x in xs):
        raise ValueError("inputs must have the same length")
    out = torch.empty(n, dtype=torch.int32, device=xs[0].device)
    grid = (triton.cdiv(n, _BLOCK),)
    kern = {1: _k1, 2: _k2, 3: _k3}[op.n_in]
    kern[grid](*xs, out, n, ASM=op.asm, BLOCK=_BLOCK)
    return out


def run_range(op: Op, start: int, n: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Run the unary ``op`` over the fp32 bit patterns start .. start+n-1 (mod 2^32). Returns the result bits as an int32 CUDA tensor."""
    if op.n_in != 1:
        raise ValueError(f"run_range needs a unary op, {op.name} takes {op.n_in} inputs")
    if out is None:
        out = torch.empty(n, dtype=torch.int32, device="cuda")
    _k_range[(triton.cdiv(n, _BLOCK),)](out, int(start), n, ASM=op.asm, BLOCK=_BLOCK)
    return out
