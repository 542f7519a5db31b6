"""The GPU twin's Triton kernel: FA4's forward, one program per FA4 M block, every fp32 step one PTX instruction.

Imported only when the twin runs (it imports Triton). A module of its own so that ``triton.language`` is among
the jit functions' globals, where Triton's CPU interpreter looks for it.

Why inline PTX for every floating-point step: Triton contracts ``a * b + c`` into FFMA and may reassociate; FA4's
bits depend on where each rounding happens, so each step is the instruction the CPU emulator models
(``fa4num.fp`` / ``fa4num.hw``): ``fma.rn.f32``, ``add/sub/mul.rn.f32`` (the explicit .rn forbids
contraction), ``add.rm.f32``, ``max.f32`` and the MUFU forms ``ex2/rcp/lg2.approx.ftz.f32``, ``tanh.approx.f32``.
On the CPU (Triton's interpreter) :mod:`fa4num.attention._twin_interp` evaluates the same instructions with fa4num's
instruction models, and ``tl.dot`` with the tensor-core model, so the CPU tests run this very kernel source.

The tensor-core steps are ``tl.dot`` on 16-bit operands: on the H200 Triton emits chained
``wgmma.mma_async ... k16`` in ascending K order, whose accumulation is MMA-Sim's model (measured equal on the
H200, reference/h200-measurements.md section 4); fa4num's model gives tcgen05 the same accumulator for 16-bit
inputs, so the same GEMM serves both kernels.

The non-associative reductions keep FA4's order: the row max is exact (a total order: NaN ignored, +0 above
-0, which is ``max.f32`` on the H200 and :func:`_fmax_pair` in the interpreter), so a tree reduction gives
the sequential result; the row sums are added column by column in FA4's order
(SM90: four quad lanes, each its columns 8j + 2q, 8j + 2q + 1 left to right, ``softmax.py`` ``Softmax`` with
arch 80; SM100: ``utils.fadd_reduce``'s eight accumulators), reading P back from a per-program scratch tile 8
columns at a time (registers cannot be indexed): each slab adds one term to every lane or accumulator, and
the final combines are pairs (one commutative RN add each).
"""
import triton
import triton.language as tl

from ._twin_flex import MASK_MODS, SCORE_MODS

# PTX of each step (the interpreter maps these strings to fa4num's instruction models: keep them in sync with
# fa4num.attention._twin_interp.INSTRUCTIONS, which tests/attention/test_twin.py checks)
FMA = tl.constexpr("fma.rn.f32 $0, $1, $2, $3;")
ADD = tl.constexpr("add.rn.f32 $0, $1, $2;")
SUB = tl.constexpr("sub.rn.f32 $0, $1, $2;")
MUL = tl.constexpr("mul.rn.f32 $0, $1, $2;")
DIV = tl.constexpr("div.rn.f32 $0, $1, $2;")
ADD_RM = tl.constexpr("add.rm.f32 $0, $1, $2;")
MAX = tl.constexpr("max.f32 $0, $1, $2;")
EX2_FTZ = tl.constexpr("ex2.approx.ftz.f32 $0, $1;")
EX2 = tl.constexpr("ex2.approx.f32 $0, $1;")
RCP_FTZ = tl.constexpr("rcp.approx.ftz.f32 $0, $1;")
LG2_FTZ = tl.constexpr("lg2.approx.ftz.f32 $0, $1;")
TANH = tl.constexpr("tanh.approx.f32 $0, $1;")
CVT_BF16 = tl.constexpr("{ .reg .b16 h; cvt.rn.bf16.f32 h, $1; cvt.f32.bf16 $0, h; }")
CVT_F16 = tl.constexpr("{ .reg .b16 h; cvt.rn.f16.f32 h, $1; cvt.f32.f16 $0, h; }")


@triton.jit
def _op1(asm: tl.constexpr, a):
    return tl.inline_asm_elementwise(asm, "=f,f", [a], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _op2(asm: tl.constexpr, a, b):
    return tl.inline_asm_elementwise(asm, "=f,f,f", [a, b], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _op3(asm: tl.constexpr, a, b, c):
    return tl.inline_asm_elementwise(asm, "=f,f,f,f", [a, b, c], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _fmax_pair(a, b):
    """max.f32's total order as a reduction combine: a NaN operand is ignored, +0 wins over -0 in either order
    (``fa4num.softmax._ops._fmax``), so any reduction tree gives the sequential bits."""
    take_a = (a > b) | (b != b) | ((a == b) & (a.to(tl.int32, bitcast=True) > b.to(tl.int32, bitcast=True)))
    return tl.where(take_a, a, b)


@triton.jit
def _group_any(flags, BLOCK_M: tl.constexpr):
    """Per row, whether any row of its 32-row warp is set (int32 0/1): ``vote_ballot_sync`` over a warp."""
    warp = tl.max(tl.reshape(flags.to(tl.int32), [BLOCK_M // 32, 32]), 1)
    return tl.reshape(tl.broadcast_to(warp[:, None], [BLOCK_M // 32, 32]), [BLOCK_M])


@triton.jit
def _ex2_emulation_2(x, Coef, POLY_DEG: tl.constexpr):
    """``utils.py`` ``ex2_emulation_2`` (fa4num.ex2 variant "packed", no .ftz): max.f32 with -127, add.rm with
    the shifter 0f4B400000, two sub.rn, Horner fma.rn from c_deg down, then (r << 23) + bits(p) on the bits."""
    shifter = tl.full(x.shape, 12582912.0, tl.float32)
    a = _op2(MAX, x, tl.full(x.shape, -127.0, tl.float32))
    r = _op2(ADD_RM, a, shifter)
    t = _op2(SUB, r, shifter)
    f = _op2(SUB, a, t)
    p = tl.zeros_like(f) + tl.load(Coef + POLY_DEG)
    for j in tl.static_range(POLY_DEG):
        p = _op3(FMA, p, f, tl.zeros_like(f) + tl.load(Coef + POLY_DEG - 1 - j))
    bits = (r.to(tl.uint32, bitcast=True) << 23) + p.to(tl.uint32, bitcast=True)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _slab(Scr, j, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Columns 8j .. 8j + 7 of the program's P tile (row-major scratch): (BLOCK_M, 8)."""
    return tl.load(Scr + tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + 8 * j + tl.arange(0, 8)[None, :])


@triton.jit
def _pair(x, BLOCK_M: tl.constexpr, N: tl.constexpr):
    """(even, odd) columns of a (BLOCK_M, 2N) tensor."""
    return tl.split(tl.reshape(x, [BLOCK_M, N, 2]))


@triton.jit
def _lane_sums_sm90(Scr, prev, rs, first, TILE_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The four quad lanes' row sums over a block, (BLOCK_M, 4) (``Softmax.online_softmax`` with ``fadd_reduce``
    arch < 100): lane q's first block 0 + P[2q] + P[2q+1] + P[8+2q] + P[8+2q+1] + ...; later fma.rn(sum,
    row_scale, P[2q]) + P[2q+1] + ... A slab of 8 columns holds each lane's pair (2q, 2q+1)."""
    even, odd = _pair(_slab(Scr, 0, BLOCK_M, BLOCK_N), BLOCK_M, 4)
    acc = tl.where(first, _op2(ADD, even, tl.zeros_like(even)),
                   _op3(FMA, prev, rs[:, None] + tl.zeros_like(prev), even))
    acc = _op2(ADD, acc, odd)
    for j in tl.static_range(1, TILE_N // 8):
        even, odd = _pair(_slab(Scr, j, BLOCK_M, BLOCK_N), BLOCK_M, 4)
        acc = _op2(ADD, _op2(ADD, acc, even), odd)
    return acc


@triton.jit
def _sum_pairs(x, BLOCK_M: tl.constexpr, N: tl.constexpr):
    """x[:, 2i] + x[:, 2i + 1] for a (BLOCK_M, 2N) tensor: one RN add each (commutative, so exact in any
    order)."""
    even, odd = _pair(x, BLOCK_M, N)
    return _op2(ADD, even, odd)


@triton.jit
def _row_sum_sm100(Scr, row_sum, acc_scale, first, TILE_N: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr):
    """``SoftmaxSm100.update_row_sum``: ``utils.fadd_reduce``'s eight accumulators A_m (column m of a slab),
    A0 seeded with RN(row_sum * acc_scale) + P0 and A1 with 0 + P1 after the first block, each adding its
    columns 8 + m, 16 + m, ... in order; then (A0+A2, A1+A3, A4+A6, A5+A7) and (A0+A4) + (A1+A5)."""
    s0 = _slab(Scr, 0, BLOCK_M, BLOCK_N)
    m = tl.arange(0, 8)[None, :] + tl.zeros([BLOCK_M, 8], tl.int32)
    init = _op2(MUL, row_sum, acc_scale)[:, None] + tl.zeros_like(s0)
    seeded = tl.where(m == 0, _op2(ADD, init, s0), tl.where(m == 1, _op2(ADD, tl.zeros_like(s0), s0), s0))
    acc = tl.where(first, s0, seeded)
    for j in tl.static_range(1, TILE_N // 8):
        acc = _op2(ADD, acc, _slab(Scr, j, BLOCK_M, BLOCK_N))
    return _combine_sm100(acc, BLOCK_M)


@triton.jit
def _add_rn(a, b):
    """The row sums' reduction combine, ``add.rn.f32``: the reductions below run over an axis that each thread
    holds in its own registers (FA4's columns of one quad lane, or of one accumulator), which Triton reduces in
    register order, left to right, so the result is the sequential sum (the interpreter's generic reduction is
    sequential too)."""
    return _op2(ADD, a, b)


@triton.jit
def _lane_sums_sm90_reg(p, lanes, rs, first, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """:func:`_lane_sums_sm90` from P in registers: P's columns regrouped (lane q, then its columns 8j + 2q,
    8j + 2q + 1 in order), the lane's first column seeded with fma.rn(sum, row_scale, P[2q]) after the first
    block, then one sequential reduction per lane."""
    x = tl.reshape(tl.permute(tl.reshape(p, [BLOCK_M, BLOCK_N // 8, 4, 2]), (0, 2, 1, 3)),
                   [BLOCK_M, 4, BLOCK_N // 4])
    kk = tl.arange(0, BLOCK_N // 4)[None, None, :]
    seeded = _op3(FMA, lanes[:, :, None] + tl.zeros_like(x), rs[:, None, None] + tl.zeros_like(x), x)
    x = tl.where((kk == 0) & (not first), seeded, x)
    return tl.reduce(x, 2, _add_rn)


@triton.jit
def _row_sum_sm100_reg(p, row_sum, acc_scale, first, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """:func:`_row_sum_sm100` from P in registers: the eight accumulators are P's columns 8j + m reduced over j
    in order, A0 seeded with RN(row_sum * acc_scale) + P0 after the first block (A1's 0 + P1 is P1)."""
    x = tl.reshape(p, [BLOCK_M, BLOCK_N // 8, 8])
    jj = tl.arange(0, BLOCK_N // 8)[None, :, None]
    mm = tl.arange(0, 8)[None, None, :]
    init = _op2(MUL, row_sum, acc_scale)
    seeded = _op2(ADD, init[:, None, None] + tl.zeros_like(x), x)
    x = tl.where((jj == 0) & (mm == 0) & (not first), seeded, x)
    return _combine_sm100(tl.reduce(x, 1, _add_rn), BLOCK_M)


@triton.jit
def _combine_sm100(acc, BLOCK_M: tl.constexpr):
    """The eight accumulators' combine: (A0+A2, A1+A3, A4+A6, A5+A7), then (A0+A4) + (A1+A5)."""
    # m = 4a + 2b + c: A[a,0,c] + A[a,1,c] (A0+A2, A1+A3, A4+A6, A5+A7), then over a, then over c
    t = tl.permute(tl.reshape(acc, [BLOCK_M, 2, 2, 2]), (0, 1, 3, 2))      # [.., a, c, b]
    x = _sum_pairs(tl.reshape(t, [BLOCK_M, 8]), BLOCK_M, 4)                 # [.., (a, c)]
    y = _sum_pairs(tl.reshape(tl.permute(tl.reshape(x, [BLOCK_M, 2, 2]), (0, 2, 1)), [BLOCK_M, 4]), BLOCK_M, 2)
    even, odd = _pair(y, BLOCK_M, 1)
    return _op2(ADD, tl.reshape(even, [BLOCK_M]), tl.reshape(odd, [BLOCK_M]))


# ---------------------------------------------------------------------------------------------- FlexAttention
# The built-in score_mods and mask_mods of fa4num.attention.flex, the only mods the twin runs (a Python callable
# cannot run inside Triton): each is the numpy rule there, the same int32 index math and the same fp32 operations
# in the same order, one PTX instruction per rounding. The kernel's SCORE_MOD / MASK_MOD constexprs are the ids of
# fa4num.attention._twin_flex (0: none; softcap_mod runs the soft-cap step, flex.softcap_mod being softcap='s rule).
ALIBI = tl.constexpr(SCORE_MODS["alibi_mod"])
ALIBI_EXP2 = tl.constexpr(SCORE_MODS["alibi_exp2_mod"])
REL_BIAS = tl.constexpr(SCORE_MODS["rel_bias_mod"])
CAUSAL = tl.constexpr(MASK_MODS["causal_mask"])
WINDOW = tl.constexpr(MASK_MODS["sliding_window_mask"])
PREFIX_LM = tl.constexpr(MASK_MODS["prefix_lm_mask"])
DOCUMENT = tl.constexpr(MASK_MODS["document_mask"])


@triton.jit
def _add_bias(s, scale, bias, contract):
    """``flex._add_bias`` on the mod's score RN(S * scale): contracted with FA4's scale multiply,
    fma.rn(S, scale, bias) (``flex.scaled_add``), or add.rn(mul.rn(S, scale), bias)."""
    sc = tl.zeros_like(s) + scale
    return tl.where(contract != 0, _op3(FMA, s, sc, bias), _op2(ADD, _op2(MUL, s, sc), bias))


@triton.jit
def _score_mod(SCORE_MOD: tl.constexpr, s, scale, qpos, head, cols, row_ok, Aux, contract, clamp, c_exp2):
    """The built-in score_mod on the block's S (before the scale): ``flex.alibi_mod`` (slope[h] read from the
    aux tensor, score - RN(slope * float(|q - kv|))), ``flex.alibi_exp2_mod`` (slope = ex2.approx, no ftz, of
    RN(float(-8 (h + 1)) * c)) or ``flex.rel_bias_mod`` (score + float(min(|q - kv|, clamp))). Distances are
    int32 (``flex._distance``), converted to float32 with cvt.rn."""
    dist = tl.abs(qpos[:, None] - cols[None, :])
    zero = tl.zeros_like(s)
    if SCORE_MOD == ALIBI:
        slope = tl.load(Aux + head, mask=row_ok, other=0.0)
        bias = -_op2(MUL, slope[:, None] + zero, dist.to(tl.float32))
    elif SCORE_MOD == ALIBI_EXP2:
        expo = ((head + 1) * -8).to(tl.float32)
        slope = _op1(EX2, _op2(MUL, expo, tl.zeros_like(expo) + c_exp2))
        bias = -_op2(MUL, slope[:, None] + zero, dist.to(tl.float32))
    else:       # REL_BIAS
        bias = tl.minimum(dist, clamp).to(tl.float32) + zero
    return _add_bias(s, scale, bias, contract)


@triton.jit
def _mask_mod(MASK_MOD: tl.constexpr, ok, bb, head, qpos, cols, seqlen_q, seqlen_k, mm_a, mm_b, Aux, sab, sah,
              sas):
    """The built-in mask_mod's verdict on the block, AND ``ok`` (valid rows, keys < seqlen_k): ``flex.causal_mask``
    (kv <= q + seqlen_k - seqlen_q), ``flex.sliding_window_mask`` (center - left <= kv <= center + right, with
    ``mm_a``/``mm_b`` = left/right, a width no sequence reaches for an open side), ``flex.prefix_lm_mask`` (q and
    kv below ``mm_a``, or q >= kv) or ``flex.document_mask`` (doc[b, (h,) q] == doc[b, (h,) kv], the ids read
    with strides ``sab``/``sah`` (0 for (batch, seqlen) ids)/``sas``). Keys beyond seqlen_k and rows outside the
    program are masked by ``ok`` whatever the mod says (FA4's seqlen mask; FA4 wraps the mod's indices there,
    which changes no kept entry)."""
    q = qpos[:, None]
    kv = cols[None, :]
    if MASK_MOD == CAUSAL:
        keep = kv <= q + (seqlen_k - seqlen_q)
    elif MASK_MOD == WINDOW:
        center = q + (seqlen_k - seqlen_q)
        keep = (kv >= center - mm_a) & (kv <= center + mm_b)
    elif MASK_MOD == PREFIX_LM:
        keep = ((q < mm_a) & (kv < mm_a)) | (q >= kv)
    else:       # DOCUMENT: each row's id and each key's id loaded once (a (rows, keys) gather of both asked
        # the H200 for 426 KB of shared memory); per-head ids with packed heads need the keys' ids per row
        rows = Aux + bb * sab + head * sah
        idq = tl.load(rows + qpos * sas, mask=qpos < seqlen_q, other=0)
        if sah == 0:
            idk = tl.load(Aux + bb * sab + cols * sas, mask=cols < seqlen_k, other=0)
            keep = idq[:, None] == idk[None, :]
        else:
            keep = idq[:, None] == tl.load(rows[:, None] + kv * sas, mask=ok, other=0)
    return keep & ok


@triton.jit
def twin_fwd(Q, K, V, Out, Lse, Events, Done, Lag, Sat, Skips, Progs, Ranges, EmuMask, Coef, Sink, Scr,
             seqlen_q, seqlen_k, heads, rep, group, nrows, left, right, scale_ex2_ftz, fused_bias, has_sink,
             sqb, sqs, sqh, skb, sks, skh, svb, svs, svh, sob, sos, soh,
             sl2, scale, softcap, threshold, offset, sink_m_factor, sink_empty_sum, p_limit, d_real, dv_real,
             AuxS, AuxM, contract, clamp, c_exp2, mm_a, mm_b, sab, sah, sas, SpVisits, SpCount, sp_nmb, sp_len,
             TILE_M: tl.constexpr, TILE_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             HEAD_D: tl.constexpr, HEAD_DV: tl.constexpr, SM100: tl.constexpr, HAS_EMU: tl.constexpr,
             POLY_DEG: tl.constexpr, P_DTYPE: tl.constexpr, UPCAST: tl.constexpr,
             STATS: tl.constexpr = True, RS_REG: tl.constexpr = False, SCORE_MOD: tl.constexpr = 0,
             MASK_MOD: tl.constexpr = 0, SPARSE: tl.constexpr = False):
    """The rows of one FA4 M block (``TILE_M`` packed rows) within one group of ``BLOCK_M`` = 128 packed rows
    (the host's program table), so that a program holds whole warps and whole 128-row tiles as
    fa4num.softmax.ballot groups them (a row's bits depend only on its M block's KV range); packed row = query * group + head offset under pack-GQA) of one
    (batch, KV head or q head): the KV blocks ``Ranges`` gives it (host-made by
    ``fa4num.attention.masking.n_block_range``), right to left; per block the steps of
    ``fa4num.attention.forward`` ``_run_mblock`` with the kernel's softmax step; then its ``finalize``.
    Options that change no loop structure are runtime arguments (one compiled kernel serves them all): the
    window as key offsets ``left``/``right`` from the diagonal (the host passes a width no sequence reaches for
    an open side, 0 on the right for causal), softcap (0: off), the sink and the SM100 flags. FlexAttention:
    ``SCORE_MOD`` / ``MASK_MOD`` pick a built-in (``_twin_flex.SCORE_MODS`` / ``MASK_MODS``), applied where
    ``_run_mblock`` applies them (the score_mod after the GEMM, then the mask_mod; the window is open then), with
    their parameters and aux tensors (``AuxS`` for the score_mod, ``AuxM`` for the mask_mod). ``SPARSE``: the
    M block visits its block-sparse lists instead (``SpVisits``: per program group and M block ``sp_len`` codes
    2 n + (mask_mod applies), ``SpCount`` of them; the host's table from the emulator's ``flex_visits``)."""
    pid = tl.program_id(0)
    pid_g = tl.program_id(1)
    # this program's rows (host table): packed rows [lo, hi) of FA4 M block pid_m within the 128-row group that
    # starts at base, so that its warps and its tile are the groups fa4num.softmax.ballot counts
    pid_m = tl.load(Progs + pid * 4)
    prow = tl.load(Progs + pid * 4 + 1) + tl.arange(0, BLOCK_M)
    row_ok = (prow >= tl.load(Progs + pid * 4 + 2)) & (prow < tl.load(Progs + pid * 4 + 3))
    bb = pid_g // (heads // group)
    gidx = pid_g % (heads // group)
    qpos = prow // group
    head = gidx * group + prow % group
    kvh0 = (gidx * group) // rep
    dq = tl.arange(0, HEAD_D)
    dv = tl.arange(0, HEAD_DV)
    c_in = tl.arange(0, BLOCK_N)
    q = tl.load(Q + bb * sqb + qpos[:, None] * sqs + head[:, None] * sqh + dq[None, :],
                mask=row_ok[:, None] & (dq < d_real)[None, :], other=0.0)
    first_blk = tl.load(Ranges + pid_m * 2)
    count = tl.load(Ranges + pid_m * 2 + 1)
    if SPARSE:
        count = tl.load(SpCount + pid_g * sp_nmb + pid_m)
    if HAS_EMU:
        emu = tl.load(EmuMask + c_in) != 0
    scr = Scr + (pid_g * tl.num_programs(0) + pid) * (BLOCK_N * BLOCK_M)
    ninf = float("-inf")
    m = tl.full([BLOCK_M], ninf, tl.float32)
    true_m = tl.full([BLOCK_M], ninf, tl.float32)
    row_sum = tl.zeros([BLOCK_M], tl.float32)
    lanes = tl.zeros([BLOCK_M, 4], tl.float32)
    lag = tl.zeros([BLOCK_M], tl.float32)
    events = tl.zeros([BLOCK_M], tl.int32)
    done = tl.zeros([BLOCK_M], tl.int32)
    sat = tl.zeros([BLOCK_M], tl.int32)
    r_row = tl.zeros([BLOCK_M], tl.int32)
    r_warp = tl.zeros([BLOCK_M], tl.int32)
    r_tile = tl.zeros([BLOCK_M], tl.int32)
    e_row = tl.zeros([BLOCK_M], tl.int32)
    e_warp = tl.zeros([BLOCK_M], tl.int32)
    e_tile = tl.zeros([BLOCK_M], tl.int32)
    o = tl.zeros([BLOCK_M, HEAD_DV], tl.float32)
    kbase = K + bb * skb + kvh0 * skh
    vbase = V + bb * svb + kvh0 * svh
    sl2_t = tl.zeros([BLOCK_M], tl.float32) + sl2
    for it in range(0, count):
        n = first_blk - it
        use_mod = True
        if SPARSE:
            code = tl.load(SpVisits + (pid_g * sp_nmb + pid_m) * sp_len + it)
            n = code >> 1
            use_mod = (code & 1) != 0
        first = it == 0
        cols = n * TILE_N + c_in
        kmask = (c_in < TILE_N) & (cols >= 0) & (cols < seqlen_k)
        k = tl.load(kbase + cols[:, None] * sks + dq[None, :], mask=kmask[:, None] & (dq < d_real)[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k))
        if softcap > 0:
            # utils.create_softcap_scoremod: softcap * tanh.approx(RN(RN(S * softmax_scale) / softcap))
            cap = tl.zeros_like(s) + softcap
            s = _op2(MUL, cap, _op1(TANH, _op2(DIV, _op2(MUL, s, tl.zeros_like(s) + scale), cap)))
        if SCORE_MOD != 0:
            # softmax.apply_score_mod_inner: the mod on RN(S * softmax_scale) (flex.apply_score_mod)
            s = _score_mod(SCORE_MOD, s, scale, qpos, head, cols, row_ok, AuxS, contract, clamp, c_exp2)
        if MASK_MOD != 0:
            # flex.block_keep with a mask_mod (a sparse call's mask blocks only); the window below is open then
            # (plan refuses both), so it adds only the keys < seqlen_k this mask already has (a sparse list's later
            # blocks end before seqlen_k: _twin_flex refuses others)
            if use_mod:
                ok = kmask[None, :] & row_ok[:, None]
                s = tl.where(_mask_mod(MASK_MOD, ok, bb, head, qpos, cols, seqlen_q, seqlen_k, mm_a, mm_b, AuxM,
                                       sab, sah, sas), s, ninf)
        # fa4num.attention.masking.visible: bottom-right aligned causal / local window, keys < seqlen_k; a block
        # every valid row sees whole needs no mask (rows outside [lo, hi) are never stored nor counted)
        diag = qpos + (seqlen_k - seqlen_q)
        c0 = n * TILE_N
        d_lo = tl.min(tl.where(row_ok, diag, 2147483647), 0)
        d_hi = tl.max(tl.where(row_ok, diag, -2147483647), 0)
        whole = (c0 >= 0) & (c0 + TILE_N <= seqlen_k) & (c0 + TILE_N - 1 <= d_lo + right) & (c0 >= d_hi - left)
        if not whole:
            vis = kmask[None, :] & row_ok[:, None] & (cols[None, :] <= diag[:, None] + right) \
                & (cols[None, :] >= diag[:, None] - left)
            s = tl.where(vis, s, ninf)
        if UPCAST:
            m_blk = tl.reduce(s, 1, _fmax_pair)
        else:
            m_blk = tl.max(s, 1)     # max.f32 on the GPU: the same total order (NaN ignored, +0 above -0)
        if STATS:
            started = (true_m > ninf) & (true_m < float("inf")) & (it > 0)
            events += (started & (m_blk > true_m)).to(tl.int32)
            # the eager kernel's vote (fa4num.softmax.ballot): the lazy rule at threshold 0 on the true max
            e_max = _fmax_pair(true_m, m_blk)
            e_arg = _op2(MUL, _op2(SUB, true_m, tl.where(e_max == ninf, 0.0, e_max)), sl2_t)
            e_vote = (_op1(EX2_FTZ, e_arg) < 1.0) & row_ok & (it > 0)
            true_m = e_max
        prev = m
        if SM100:
            # softmax.py SoftmaxSm100.update_row_max (the rule of fa4num.softmax.lazy.lazy_rescale)
            m_new = tl.where(first, m_blk, _fmax_pair(m, m_blk))
            m_safe = tl.where(m_new == ninf, 0.0, m_new)
            scale_ = _op2(MUL, _op2(SUB, m, m_safe), sl2_t)
            keep = (threshold > 0) & (scale_ >= -threshold) & (it > 0)
            m_new = tl.where(keep, m, m_new)
            m_safe = tl.where(keep, m, m_safe)
            acc_scale = tl.where(scale_ex2_ftz != 0, _op1(EX2_FTZ, scale_), _op1(EX2, scale_))
            acc_scale = tl.where(keep | first, 1.0, acc_scale)
            m = m_new
            bias = tl.where(fused_bias != 0, _op3(FMA, -m_safe, sl2_t, tl.zeros_like(m_safe) + offset),
                            _op2(SUB, tl.zeros_like(m_safe) + offset, _op2(MUL, m_safe, sl2_t)))
            x = _op3(FMA, s, tl.zeros_like(s) + sl2, bias[:, None] + tl.zeros_like(s))
            p = _op1(EX2_FTZ, x)
            if HAS_EMU:
                p = tl.where(emu[None, :], _ex2_emulation_2(x, Coef, POLY_DEG), p)
            if STATS:
                d = (true_m.to(tl.float64) - m.to(tl.float64)) * sl2_t.to(tl.float64)
                lag = tl.maximum(lag, tl.where(tl.abs(d) < float("inf"), d.to(tl.float32), 0.0))
        else:
            # softmax.py Softmax.online_softmax (fa4num.softmax.sm90)
            m = tl.where(first, m_blk, _fmax_pair(m_blk, m))
            m_safe = tl.where(m == ninf, 0.0, m)
            neg_t = -_op2(MUL, m_safe, sl2_t)
            x = _op3(FMA, s, tl.zeros_like(s) + sl2, neg_t[:, None] + tl.zeros_like(s))
            p = _op1(EX2_FTZ, x)
            acc_scale = tl.where(first, 1.0, _op1(EX2_FTZ, _op2(MUL, _op2(SUB, prev, m_safe), sl2_t)))
        if BLOCK_N > TILE_N:
            p = tl.where((c_in < TILE_N)[None, :], p, 0.0)
        if STATS:
            done += ((prev > ninf) & (prev < float("inf")) & (m > prev) & (it > 0)).to(tl.int32)
            # the ballot counters (fa4num.softmax.ballot.count_block): a row votes when its factor is below 1;
            # warps are 32 rows and tiles 128 rows of the packed row sequence (the program holds whole groups)
            vote = (acc_scale < 1.0) & row_ok & (it > 0)
            r_row += vote.to(tl.int32)
            r_warp += _group_any(vote, BLOCK_M)
            r_tile += (tl.max(vote.to(tl.int32), 0) + tl.zeros([BLOCK_M], tl.int32)) * (it > 0)
            e_row += e_vote.to(tl.int32)
            e_warp += _group_any(e_vote, BLOCK_M)
            e_tile += (tl.max(e_vote.to(tl.int32), 0) + tl.zeros([BLOCK_M], tl.int32)) * (it > 0)
            sat += tl.sum((p > p_limit).to(tl.int32), 1)
        if RS_REG:
            if SM100:
                row_sum = _row_sum_sm100_reg(p, row_sum, acc_scale, first, BLOCK_M, BLOCK_N)
            else:
                lanes = _lane_sums_sm90_reg(p, lanes, acc_scale, first, BLOCK_M, BLOCK_N)
        else:
            # the row sums in FA4's order, through the program's scratch tile (P transposed)
            tl.debug_barrier()
            tl.store(scr + tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + c_in[None, :], p)
            tl.debug_barrier()
            if SM100:
                row_sum = _row_sum_sm100(scr, row_sum, acc_scale, first, TILE_N, BLOCK_M, BLOCK_N)
            else:
                lanes = _lane_sums_sm90(scr, lanes, acc_scale, first, TILE_N, BLOCK_M, BLOCK_N)
        vv = tl.load(vbase + cols[:, None] * svs + dv[None, :], mask=kmask[:, None] & (dv < dv_real)[None, :],
                     other=0.0)
        if it > 0:
            if SM100:
                # correction_loop: a warp of 32 rows rescales O when one of its rows has acc_scale < 1
                wrow = _group_any((acc_scale < 1.0) & row_ok, BLOCK_M) != 0
                o = tl.where(wrow[:, None], _op2(MUL, o, acc_scale[:, None] + tl.zeros_like(o)), o)
            else:
                o = _op2(MUL, o, acc_scale[:, None] + tl.zeros_like(o))
        if UPCAST:
            if P_DTYPE == tl.bfloat16:
                pq = _op1(CVT_BF16, p)
            else:
                pq = _op1(CVT_F16, p)
        else:
            pq = p.to(P_DTYPE)
        o = tl.dot(pq, vv, o)
    # the epilogue: Softmax.finalize (SM90) / correction_loop (SM100), with the learnable sink
    sk = tl.load(Sink + head, mask=row_ok, other=0.0)
    with_sink = has_sink != 0
    if SM100:
        # softmax.py apply_learnable_sink
        empty = m == ninf
        xs = _op2(ADD, _op3(FMA, sk, tl.zeros_like(sk) + 1.4426950216293335, -_op2(MUL, m, sl2_t)),
                  tl.zeros_like(sk) + offset)
        added = _op2(ADD, row_sum, _op1(EX2_FTZ, xs))
        m = tl.where(with_sink & empty, _op2(MUL, sk, tl.zeros_like(sk) + sink_m_factor), m)
        rs = tl.where(with_sink, tl.where(empty, tl.zeros_like(row_sum) + sink_empty_sum, added), row_sum)
        bad = (rs == 0.0) | (rs != rs)
        safe = tl.where(bad, 1.0, rs)
        fin = _op1(RCP_FTZ, safe)
        lg = _op2(SUB, _op1(LG2_FTZ, safe), tl.zeros_like(safe) + offset)
        lse = _op2(MUL, _op3(FMA, m, sl2_t, lg), tl.zeros_like(lg) + 0.6931471805599453)
    else:
        # the butterfly over the quad: (l0 + l1) + (l2 + l3)
        halves = _sum_pairs(lanes, BLOCK_M, 2)
        even, odd = _pair(halves, BLOCK_M, 1)
        total = _op2(ADD, tl.reshape(even, [BLOCK_M]), tl.reshape(odd, [BLOCK_M]))
        sk2 = _op2(MUL, sk, tl.zeros_like(sk) + 1.4426950216293335)
        m_scaled = tl.where(m == ninf, sk2, _op2(MUL, m, sl2_t))
        total = tl.where(with_sink, _op2(ADD, total, _op1(EX2_FTZ, _op2(SUB, sk2, m_scaled))), total)
        bad = (total == 0.0) | (total != total)
        safe = tl.where(bad, 1.0, total)
        fin = _op1(RCP_FTZ, safe)
        lg = _op1(LG2_FTZ, safe)
        lse = _op2(MUL, tl.where(with_sink, _op2(ADD, m_scaled, lg), _op3(FMA, m, sl2_t, lg)),
                   tl.zeros_like(lg) + 0.6931471805599453)
    lse = tl.where(bad, ninf, lse)
    out = _op2(MUL, o, fin[:, None] + tl.zeros_like(o))
    optr = Out + bb * sob + qpos[:, None] * sos + head[:, None] * soh + dv[None, :]
    if UPCAST:
        tl.store(optr, out, mask=row_ok[:, None] & (dv < dv_real)[None, :])
    else:
        tl.store(optr, out.to(Out.dtype.element_ty), mask=row_ok[:, None] & (dv < dv_real)[None, :])
    stat = (bb * heads + head) * seqlen_q + qpos
    tl.store(Lse + stat, lse, mask=row_ok)
    if STATS:
        tl.store(Events + stat, events, mask=row_ok)
        tl.store(Done + stat, done, mask=row_ok)
        tl.store(Lag + stat, lag, mask=row_ok)
        tl.store(Sat + stat, sat, mask=row_ok)
        plane = tl.num_programs(1) // (heads // group) * heads * seqlen_q    # batch * heads * seqlen_q
        tl.store(Skips + stat, r_row, mask=row_ok)
        tl.store(Skips + plane + stat, r_warp, mask=row_ok)
        tl.store(Skips + 2 * plane + stat, r_tile, mask=row_ok)
        tl.store(Skips + 3 * plane + stat, e_row, mask=row_ok)
        tl.store(Skips + 4 * plane + stat, e_warp, mask=row_ok)
        tl.store(Skips + 5 * plane + stat, e_tile, mask=row_ok)
