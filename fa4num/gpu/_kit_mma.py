"""The capture kit's tensor-core probe: ``D = C + A B^T`` for one tile through Triton's ``tl.dot`` (fp32
accumulator). With the whole K axis in one ``tl.dot``, Triton emits a chain of MMA instructions over K in
order into one accumulator -- ``wgmma.mma_async ... k16`` on Hopper, ``tcgen05.mma`` on Blackwell -- the chain
``fa4num.hw.mma.mma_chain`` models. The PTX of the compiled kernel says which instruction ran; the kit records
it. Needs torch with CUDA and Triton (imported by fa4num.gpu.kit only on a GPU)."""
from __future__ import annotations

import re

import numpy as np
import triton
import triton.language as tl


@triton.jit
def _probe(a_ptr, b_ptr, c_ptr, d_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rn[:, None] * K + rk[None, :])
    c = tl.load(c_ptr + rm[:, None] * N + rn[None, :])
    d = tl.dot(a, tl.trans(b), c)
    tl.store(d_ptr + rm[:, None] * N + rn[None, :], d)


def _instruction(compiled) -> str:
    """The MMA instruction names in the compiled PTX (e.g. 'wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16')."""
    text = getattr(compiled, "asm", {}).get("ptx", "") if compiled is not None else ""
    found = sorted(set(re.findall(r"\b(wgmma\.mma_async[\w.]*|tcgen05\.mma[\w.:]*|mma\.sync[\w.]*)", text)))
    return ", ".join(found) or "no MMA instruction found in the PTX"


def probe(a: np.ndarray, b: np.ndarray, c: np.ndarray, torch) -> tuple[np.ndarray, str]:
    """(D as float32 numpy, the MMA instruction(s) of the compiled PTX) for A (M, K), B (N, K), C (M, N)."""
    m, k = a.shape
    n = b.shape[0]
    width = {1: np.uint8, 2: np.int16}[a.dtype.itemsize]
    tdt = getattr(torch, a.dtype.name)
    ta, tb = (torch.from_numpy(np.ascontiguousarray(x).view(width)).view(tdt).cuda() for x in (a, b))
    tc = torch.from_numpy(np.ascontiguousarray(c, np.float32)).cuda()
    td = torch.empty((m, n), dtype=torch.float32, device="cuda")
    compiled = _probe[(1,)](ta, tb, tc, td, M=m, N=n, K=k, num_warps=8)
    torch.cuda.synchronize()
    return td.cpu().numpy(), _instruction(compiled)
