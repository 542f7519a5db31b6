"""Per-element error bounds of FA4's attention backward (dq, dk, dv, dsink) against real-arithmetic gradients.

An enclosure analysis (docs/bounds.md, section 11): for every quantity the kernel holds in fp32 the bound keeps an
interval that contains it, evaluated in float64 next to the exact value. The recomputed P = ex2(fma(S, sl2, -lse
log2 e)) and dS = RN(P RN(dP - D)) get intervals per element, which the casts to the 16-bit input format map to
intervals of representable values (RN is monotone): where both ends round to one value, the kernel's 16-bit P or
dS is known exactly, and its error enters the GEMMs dV = P^T dO, dK = scale dS^T Q, dQ = scale dS K with its
sign. The GEMMs add the tensor-core model's chain error (fa4num.hw.mma, the forward bound's ``_Gemm``), the dQ
atomics an error that holds for every order of the fp32 adds, and the final casts are bounded through the
monotonicity of RN again. The kernel is never run.

The exact gradients are those of the real attention of the given q, k, v (and sink) with the given dout, as
:func:`fa4num.attention.reference.backward_fp64` evaluates them: the given ``out`` and ``lse`` are the kernel's
inputs, whatever their own error (it is measured against the exact O and LSE, not assumed).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numba import njit, prange

from fa4num.attention import config, masking
from fa4num.attention.backward import LOG2_E_F32, dpsum_layout, dq_postprocess_threads, lse_log2, prepare
from fa4num.attention.problem import Problem, given_or_plan
from fa4num.hw import mufu_model

from .attention import (_PTX_EX2_REL, P_FORMATS, _abs_gemm, _as_array, _delta_lambda, _gemm_model, _rn_format,
                        _round_dir, _scale_vanishes, _softcap_scores, _tanh_abs_error)
from .exp2 import mufu_error_bounds

__all__ = ["BackwardBound", "attention_backward_error_bound"]

U = 2.0 ** -24
TINY = 2.0 ** -149        # bound on one fp32 RN's absolute error in the subnormal range
REL = U + 2.0 ** -50      # one fp32 RN, plus the float64 evaluation of the interval's end
LOG2E = 1.0 / math.log(2.0)
FTZ = 2.0 ** -126         # ex2.approx.ftz flushes results below this to 0


@dataclass
class BackwardBound:
    """Bounds on ``|kernel - exact|`` for FA4's backward, per element.

    Elements without a finite bound are +inf (docs/bounds.md, section 11.8): those a non-finite input reaches,
    those an fp32 or 16-bit overflow can reach, and every element for a negative or vanishing softmax_scale;
    their exact values are NaN where undefined (non-finite inputs).

    Attributes
    ----------
    dq, dk, dv : numpy.ndarray
        float64 bounds in q's, k's and v's shapes.
    dq_exact, dk_exact, dv_exact : numpy.ndarray
        The real-arithmetic gradients (float64; their evaluation error is inside the bound).
    dsink, dsink_exact : numpy.ndarray or None
        (heads,) bound and exact value of the learnable sink's gradient (None without a sink).
    kernel : str
    options : dict
        The tile and models the bound used.
    """
    dq: np.ndarray
    dk: np.ndarray
    dv: np.ndarray
    dq_exact: np.ndarray
    dk_exact: np.ndarray
    dv_exact: np.ndarray
    dsink: np.ndarray | None
    dsink_exact: np.ndarray | None
    kernel: str
    options: dict = field(repr=False, default_factory=dict)


def _gamma(n, u=U):
    """(1 + u)^n - 1 rounded up, elementwise."""
    return np.expm1(np.asarray(n, np.float64) * math.log1p(u)) * (1 + 2.0 ** -30)


def _chain(g, nch, absum, neta):
    """Error of an accumulator that went through ``nch`` chained MMA steps over terms of absolute sum ``absum``
    (fa4num.hw.mma model: per step gamma (|C| + sum |terms|) + eta), with ``neta`` steps' floors eta in all."""
    nch = np.asarray(nch, np.float64)
    growth = np.exp(nch * math.log1p(g.gamma))
    return (np.expm1(nch * math.log1p(g.gamma)) * absum + np.asarray(neta, np.float64) * g.eta * growth) \
        * (1 + 2.0 ** -30)


def _imul(alo, ahi, blo, bhi):
    """Interval product (the four corners), widened by float64's own rounding."""
    c = np.stack([alo * blo, alo * bhi, ahi * blo, ahi * bhi])
    lo, hi = c.min(axis=0), c.max(axis=0)
    return lo - 2.0 ** -52 * np.abs(lo), hi + 2.0 ** -52 * np.abs(hi)


def _cast(lo, hi, dt):
    """[lo, hi] (reals) -> the interval of dt values an fp32 value in [lo, hi] rounds to (cvt.rn: RN is
    monotone; fp32 first, outward)."""
    glo = _round_dir(lo, False).astype(dt).astype(np.float64)
    ghi = _round_dir(hi, True).astype(dt).astype(np.float64)
    return glo, ghi


def _bound_of(c, r, exact, margin, dt):
    """max |RN_dt(x) - exact| over fp32 x in [c - r, c + r], plus the exact value's evaluation margin."""
    with np.errstate(invalid="ignore"):
        glo, ghi = _cast(c - r, c + r, dt)
        b = np.maximum(np.abs(glo - exact), np.abs(ghi - exact)) + margin
    return np.where(np.isnan(b), np.inf, b) * (1 + 2.0 ** -40)


@dataclass(frozen=True)
class _Ctx:
    """What every (sequence, head) shares."""
    tile: object
    gemm: str
    g_s: object
    g_dp: object
    g_dkv: object
    g_dq: object
    s32: float
    scale: float
    sl2: float
    lam: float
    dlam: float
    ex2_rel: float
    softcap: float
    tanh_err: object
    window: masking.Window
    dt: np.dtype
    dtn: str
    d: int
    dv: int
    dvp: int
    causal: bool


def _nch(g, gemm, k):
    """MMA steps of a chain over k elements (one BLAS call per GEMM in the statistical mode)."""
    return np.where(np.asarray(k) > 0, 1, 0) if gemm == "blas" else -(-np.asarray(k) // g.chunk)


def _blocks(sq, sk, ctx):
    """Per query row: the KV blocks whose dQ tile is added into its dQaccum; per key: the rows (a multiple of
    tile_m) its KV block's dK/dV chain runs over (BlockInfo.get_m_block_min_max, masking.m_block_range)."""
    tm, tn = ctx.tile.tile_m, ctx.tile.tile_n
    nb = np.zeros(sq, np.int64)
    rows = np.zeros(sk, np.int64)
    for n in range(-(-sk // tn)):
        m0, m1 = masking.m_block_range(n, tile_m=tm, tile_n=tn, seqlen_q=sq, seqlen_k=sk, window=ctx.window)
        if m0 >= m1:
            continue
        nb[m0 * tm:min(m1 * tm, sq)] += 1
        rows[n * tn:min(n * tn + tn, sk)] = (m1 - m0) * tm
    return nb, rows


@njit(cache=True, nogil=True, inline="always")
def _rn16(x, u_p, ulp_min, pmax):
    """RN of the real x to the 16-bit format (cvt.rn; monotone), +-inf past its largest finite value."""
    g = _rn_format(abs(x), u_p, ulp_min)
    if g > pmax:
        g = np.inf
    return -g if x < 0 else g


@njit(inline="always")
def _corners(alo, ahi, blo, bhi):
    """Interval product, widened by float64's rounding (2^-52) and one fp32 RN (REL, TINY)."""
    c1, c2, c3, c4 = alo * blo, alo * bhi, ahi * blo, ahi * bhi
    lo = min(min(c1, c2), min(c3, c4))
    hi = max(max(c1, c2), max(c3, c4))
    lo -= 2.0 ** -52 * abs(lo)
    hi += 2.0 ** -52 * abs(hi)
    return lo - REL * abs(lo) - TINY, hi + REL * abs(hi) + TINY


@njit(parallel=True, cache=True)
def _enclose(first, last, Sx, rho_x, A, dPs, Adp, sig, Dc, rD, l2, zs, lam, sl2, dlam, ex2_rel, ovf_fac, d, dv,
             softcap, z, dtanh, scale_cap, u_p, ulp_min, pmax):
    """Per visible element (docs/bounds.md, section 11, Lemmas B2-B5), one row per task: the exact log2 LSE
    L2 (logsumexp of lam Sx with the sink's logit zs) and its margin Lm, P* = 2^(lam Sx - L2) and D* = sum P* dP*;
    the enclosure [plo, phi] of the kernel's fp32 P = ex2.approx.ftz(RN(S sl2 - l2)), of RN(dP - D), of
    dS = RN(P RN(dP - D)) (times RN(1 - t^2) under a soft cap), and the 16-bit values they round to, as centre and
    radius (0 where the value is known exactly); bad where the kernel's fp32 or 16-bit arithmetic can overflow."""
    sq, sk = Sx.shape
    u = 2.0 ** -24
    ln2 = math.log(2.0)
    cP = np.zeros((sq, sk))
    rP = np.zeros((sq, sk))
    cS = np.zeros((sq, sk))
    rS = np.zeros((sq, sk))
    pst = np.zeros((sq, sk))
    mPa = np.zeros((sq, sk))
    dsx = np.zeros((sq, sk))
    mS = np.zeros((sq, sk))
    badP = np.zeros((sq, sk), np.bool_)
    badS = np.zeros((sq, sk), np.bool_)
    mxa = np.zeros((sq, sk))
    L2o = np.full(sq, -np.inf)
    Lmo = np.zeros(sq)
    dl2o = np.zeros(sq)
    Dso = np.zeros(sq)
    mDo = np.zeros(sq)
    for i in prange(sq):
        a, b = first[i], last[i]
        zmax = zs
        mxm = 0.0
        for j in range(a, b + 1):
            zmax = max(zmax, lam * Sx[i, j])
            if softcap > 0:
                mxs = (d * 2.0 ** -52 * A[i, j] * scale_cap * softcap + 2.0 ** -50 * softcap * (1 + abs(z[i, j]))) \
                    / ln2
            else:
                mxs = lam * d * 2.0 ** -52 * A[i, j]
            mxm = max(mxm, mxs)
        if not math.isfinite(zmax):
            continue
        ssum = math.exp2(zs - zmax) if zs > -np.inf else 0.0
        for j in range(a, b + 1):
            ssum += math.exp2(lam * Sx[i, j] - zmax)
        L2 = zmax + math.log2(ssum)
        nvis = max(b - a + 1, 0)
        Lm = mxm + (nvis + 4) * 2.0 ** -52 * (1 + abs(L2))
        dl2 = abs(l2[i] - L2)
        if math.isnan(dl2):
            dl2 = np.inf
        L2o[i], Lmo[i], dl2o[i] = L2, Lm, dl2
        Ds = 0.0
        mDs = 0.0
        aPd = 0.0
        for j in range(a, b + 1):
            zz = lam * Sx[i, j]
            if softcap > 0:
                mxs = (d * 2.0 ** -52 * A[i, j] * scale_cap * softcap + 2.0 ** -50 * softcap * (1 + abs(z[i, j]))) \
                    / ln2
            else:
                mxs = lam * d * 2.0 ** -52 * A[i, j]
            mx = mxs + (abs(zz) + abs(L2) + 4) * 2.0 ** -51 + Lm
            p = math.exp2(zz - L2)
            y = mx * ln2 * (1 + 2.0 ** -50)
            # expm1(y) <= y + y^2 for 0 <= y <= 1: no libm call for the (tiny) margins
            mp = (y + y * y if y < 0.5 else math.expm1(y)) + 2.0 ** -51
            pst[i, j] = p
            mPa[i, j] = mp          # relative for now, P*'s absolute margin below
            mxa[i, j] = mx
            Ds += p * dPs[i, j]
            mDs += p * (mp * abs(dPs[i, j]) + (1 + mp) * dv * 2.0 ** -51 * Adp[i, j])
            aPd += p * abs(dPs[i, j])
        mD = mDs + (nvis + 2) * 2.0 ** -52 * aPd
        Dso[i], mDo[i] = Ds, mD
        dci = Dc[i]
        for j in range(a, b + 1):
            zz = lam * Sx[i, j]
            xs = zz - L2
            p = pst[i, j]
            mp = mPa[i, j]
            mx = mxa[i, j]
            e0 = sl2 * rho_x[i, j] + dlam * abs(Sx[i, j]) + dl2 + mx
            e = (e0 + u * (abs(xs) + e0)) * (1 + 2.0 ** -40)
            y = e * ln2 * (1 + 2.0 ** -50)
            if y < 0.5 and p >= 2.0 ** -960:
                # 2^(xs -+ e) = P* e^(-+y) with e^-y >= 1 - y and e^y <= 1 + y + y^2 (0 <= y <= 1): float64's few
                # ulps are inside the 2^-50 widening (P* normal; below 2^-960 both ends are far below ex2's flush
                # threshold)
                plo = p * (1 - y) * (1 - ex2_rel) * (1 - 2.0 ** -50)
                phi = p * (1 + y + y * y) * (1 + ex2_rel) * (1 + 2.0 ** -50)
            else:
                plo = math.exp2(xs - e) * (1 - ex2_rel) * (1 - 2.0 ** -50)
                phi = math.exp2(xs + e) * (1 + ex2_rel) * (1 + 2.0 ** -50)
            if plo < 2.0 ** -126:
                plo = 0.0
            ovf = (A[i, j] + rho_x[i, j]) * ovf_fac >= 2.0 ** 126 or not phi < 2.0 ** 127 \
                or abs(dPs[i, j]) + sig[i, j] >= 2.0 ** 126 or abs(dci) + rD[i] >= 2.0 ** 126
            dc = dPs[i, j] - dci
            dr = sig[i, j] + rD[i] + 2.0 ** -52 * (abs(dPs[i, j]) + abs(dci))
            dr = dr + u * (abs(dc) + dr) + 2.0 ** -149
            ylo, yhi = _corners(plo, phi, dc - dr, dc + dr)
            delta = dPs[i, j] - Ds
            ds = p * delta
            ms = p * (mp * abs(delta) + (1 + mp) * (dv * 2.0 ** -51 * Adp[i, j] + mD + 2.0 ** -52 * abs(delta)))
            if softcap > 0:
                tz = math.tanh(z[i, j])
                f = 1 - tz * tz
                ta_lo = max(abs(tz) - dtanh[i, j], 0.0)
                ta_hi = abs(tz) + dtanh[i, j]
                flo = 1 - ta_hi * ta_hi
                fhi = 1 - ta_lo * ta_lo
                flo -= (u + 2.0 ** -50) * abs(flo) + 2.0 ** -149
                fhi += (u + 2.0 ** -50) * abs(fhi) + 2.0 ** -149
                ylo, yhi = _corners(ylo, yhi, flo, fhi)
                ms = ms * f + abs(ds) * 2 * (d * 2.0 ** -52 * A[i, j] * scale_cap + 2.0 ** -50)
                ds = ds * f
            dsx[i, j] = ds
            mS[i, j] = ms
            mPa[i, j] = mp * p
            pl = _rn16(plo, u_p, ulp_min, pmax)
            ph = _rn16(min(phi, 2.0 ** 128), u_p, ulp_min, pmax)
            sl = _rn16(ylo, u_p, ulp_min, pmax)
            sh = _rn16(yhi, u_p, ulp_min, pmax)
            bp = ovf or not (abs(pl) <= pmax and abs(ph) <= pmax)
            bs = ovf or not (abs(sl) <= pmax and abs(sh) <= pmax)
            badP[i, j] = bp
            badS[i, j] = bs
            if not bp:
                cP[i, j] = (pl + ph) / 2
                rP[i, j] = (ph - pl) / 2
            if not bs:
                cS[i, j] = (sl + sh) / 2
                rS[i, j] = (sh - sl) / 2
    return cP, rP, cS, rS, pst, mPa, dsx, mS, badP, badS, L2o, Lmo, dl2o, Dso, mDo


def _product_error(dO, V, g, gemm):
    """(X Y^T, A, sigma) for S = Q K^T and dP = dO V^T: the product and A = |X||Y|^T (BLAS) and sigma >= |kernel -
    exact| from Lemma 1 with every partial sum bounded by A (section 11, Lemmas B1, B3): per MMA step sigma grows
    to sigma (1 + alpha) + beta A + eta, alpha = (t + r (1 + t)) / (1 - r), beta = (2 t + r (1 + 2 t)) / (1 - r)
    (t the alignment truncation, r the final rounding), so after n steps sigma <= ((1 + alpha)^n - 1) / alpha
    (beta A + eta); plus float64's error in the product, (K + 4) 2^-52 A. Looser than the forward's chain (which
    tracks |S_k|, ``_s_error``) but two BLAS calls: these errors only widen the enclosures."""
    dp = dO @ V.T
    A = _abs_gemm(np.abs(dO), np.abs(V).T)
    dv = dO.shape[1]
    if gemm == "blas":
        return dp, A, g.chain(1, A) + dv * 2.0 ** -52 * A
    t = g.gamma - 2.0 ** -23 if gemm == "wgmma" else 0.0
    r = 2.0 ** -23 if gemm == "wgmma" else 2.0 ** -24
    alpha = (t + r * (1 + t)) / (1 - r)
    beta = (2 * t + r * (1 + 2 * t)) / (1 - r)
    n = -(-dv // g.chunk)
    grow = math.expm1(n * math.log1p(alpha)) / alpha * (1 + 2.0 ** -30)
    return dp, A, grow * (beta * A + g.eta) + (dv + 4) * 2.0 ** -52 * A


def _head(Q, K, V, O, dO, lse, first, last, sigma, ctx: _Ctx):
    """One (sequence, head): per-element enclosures of the kernel's 16-bit P and dS, the exact P and dS, and
    the per-row / per-key quantities the GEMMs and dsink need (docs/bounds.md, section 11, Lemmas B1-B5)."""
    d, dv = Q.shape[1], V.shape[1]
    # Lemma B1: S = Q K^T through the tensor-core chain (rho >= |S_kernel - S|, float64 evaluation included)
    S, A, rho = _product_error(Q, K, ctx.g_s, ctx.gemm)
    one = np.zeros((1, 1))
    if ctx.softcap:
        # score_mod before the mask (utils.create_softcap_scoremod): S' = cap tanh(S scale / cap), exponent
        # multiplier LOG2_E; |t - tanh z| <= dt for the 1 - t^2 of the backward
        z = S * (ctx.scale / ctx.softcap)
        Sx, rho_x, _, dtanh = _softcap_scores(S, A, rho, softcap=ctx.softcap, scale=ctx.scale, d=d,
                                              tanh_err=ctx.tanh_err)
    else:
        Sx, rho_x, z, dtanh = S, rho, one, one
    # Lemma B2: the kernel's exponent x = RN(S sl2 - RN(lse LOG2_E)) (flash_bwd_preprocess.py lse_log2, the
    # FFMA of mma_one_m_block), P = ex2.approx.ftz(x)
    lse32 = np.asarray(lse, np.float32)
    l2 = lse_log2(lse32).astype(np.float64)
    # Lemma B3: dP = dO V^T (sigma), D = rowsum(dO * O) (the preprocess: exact products, depth roundings)
    dPs, Adp, sig = _product_error(dO, V, ctx.g_dp, ctx.gemm)
    kblk, tpr = dpsum_layout(ctx.dvp)
    depth = 8 * (ctx.dvp // kblk) + int(math.log2(tpr))
    OdO = O * dO
    Dc = OdO.sum(axis=1)
    aOdO = np.abs(OdO).sum(axis=1)
    rD = _gamma(depth) * aOdO + ctx.dvp * TINY + dv * 2.0 ** -52 * aOdO
    zs = -np.inf if sigma is None else sigma * LOG2E
    u_p, eta_p, pmax = P_FORMATS[ctx.dtn]
    (cP, rP, cS, rS, pstar, mP, dsx, mS, badP, badS, L2, Lm, dl2, Dstar, mD) = _enclose(
        first, last, Sx, rho_x, A, dPs, Adp, sig, Dc, rD, l2, zs, ctx.lam, ctx.sl2, ctx.dlam, ctx.ex2_rel,
        max(1.0, ctx.s32 if ctx.softcap else 1.0), d, dv, float(ctx.softcap), z, dtanh,
        ctx.scale / ctx.softcap if ctx.softcap else 0.0, u_p, 2 * eta_p, pmax)
    L2f = np.where(np.isfinite(L2), L2, 0.0)
    sink = None
    if sigma is not None:
        # dsink's term per row (flash_bwd_postprocess.py dsink_row_term): -p D with p = ex2(RN(RN(sink - lse)
        # LOG2_E)), 1 for lse = -inf
        xss = zs - L2f
        ps = np.exp2(xss)
        sl = np.abs(sigma - lse32.astype(np.float64))
        es0 = float(LOG2_E_F32) * (U * sl + dl2 / LOG2E + Lm / LOG2E) + abs(float(LOG2_E_F32) - LOG2E) * (
            sl + dl2 / LOG2E + Lm / LOG2E)
        es = (es0 + U * (np.abs(xss) + es0)) * (1 + 2.0 ** -40)
        with np.errstate(over="ignore", invalid="ignore"):
            qlo = np.exp2(xss - es) * (1 - ctx.ex2_rel) * (1 - 2.0 ** -50)
            qhi = np.exp2(xss + es) * (1 + ctx.ex2_rel) * (1 + 2.0 ** -50)
        qlo = np.where(qlo < FTZ, 0.0, qlo)
        inf_lse = lse32 == -np.inf
        qlo, qhi = np.where(inf_lse, 1.0, qlo), np.where(inf_lse, 1.0, qhi)
        tlo, thi = _imul(-qhi, -qlo, Dc - rD, Dc + rD)
        mps = np.expm1(Lm * math.log(2)) + 2.0 ** -51
        sink = dict(lo=tlo, hi=thi, exact=-ps * Dstar, margin=ps * (mps * np.abs(Dstar) + (1 + mps) * mD),
                    bad=~(np.isfinite(tlo) & np.isfinite(thi)))
    return dict(cP=cP, rP=rP, cS=cS, rS=rS, badP=badP, badS=badS, pstar=pstar, mP=mP, dsx=dsx, mS=mS,
                sink=sink)


def _sparse_abs_gemm(r, b, transpose):
    """r^T @ b (or r @ b) for the enclosures' radii r >= 0, which are 0 wherever the 16-bit value is known:
    a sparse product where few are not."""
    m = r.T if transpose else r
    nz = np.count_nonzero(m)
    if nz == 0:
        return np.zeros((m.shape[0], b.shape[1]))
    if nz > m.size // 20:
        return m @ b
    from scipy import sparse
    return np.asarray(sparse.csr_matrix(m) @ b)


def _gemms(hd, Q, K, dO, nb, rows, ctx: _Ctx):
    """The three GEMMs of one head on the enclosures (center c, radius r): dV's and dK's fp32 accumulators per
    key (before the GQA sum and the scale), dQ's dQaccum per row (Lemma B6), with the exact values and their
    float64 evaluation margins. The float64 products of the centres and of the exact values share one BLAS call
    per GEMM; the absolute sums that only scale error terms are taken in fp32, rounded up (:func:`_abs_gemm`)."""
    cP, rP, cS, rS = hd["cP"], hd["rP"], hd["cS"], hd["rS"]
    aO, aQ, aK = np.abs(dO), np.abs(Q), np.abs(K)
    sq, sk = Q.shape[0], K.shape[0]
    nk = _nch(ctx.g_dkv, ctx.gemm, rows)[:, None]
    f64k = (max(sq, sk) + 4) * 2.0 ** -52
    aS = np.abs(cS)
    # centres and exact values: [c | exact] in one product per GEMM
    cv, ex_dv = np.split(np.concatenate([cP, hd["pstar"]], axis=1).T @ dO, 2)
    ck, ex_dk = np.split(np.concatenate([cS, hd["dsx"]], axis=1).T @ Q, 2)
    cq, ex_dq = np.split(np.concatenate([cS, hd["dsx"]], axis=0) @ K, 2)
    rv, rk, rq = _sparse_abs_gemm(rP, aO, True), _sparse_abs_gemm(rS, aQ, True), _sparse_abs_gemm(rS, aK, False)
    ab = _abs_gemm(cP.T, aO) + rv
    dv = (cv, rv + _chain(ctx.g_dkv, nk, ab, nk) + f64k * ab)
    ab = _abs_gemm(aS.T, aQ) + rk
    dk = (ck, rk + _chain(ctx.g_dkv, nk, ab, nk) + f64k * ab)
    # dQ: per KV block a chain of ceil(tile_n / L) steps from zero, then nb fp32 adds in any order
    nq = int(_nch(ctx.g_dq, ctx.gemm, ctx.tile.tile_n))
    ab = _abs_gemm(aS, aK) + rq
    ch = _chain(ctx.g_dq, nq, ab, (nb * nq)[:, None])
    dq = (cq, rq + ch + _gamma(nb)[:, None] * (ab + ch) + f64k * ab)
    # margins of the exact values (their own float64 error and that of the products): sum_i m_i |b_i| <=
    # (sum_i m_i) max_i |b_i|, loose but 2^-40 below everything else
    mv = hd["mP"] + f64k * hd["pstar"]
    ms = hd["mS"] + f64k * np.abs(hd["dsx"])
    m_dv = mv.sum(axis=0)[:, None] * aO.max(axis=0, initial=0.0)[None, :] * (1 + 2.0 ** -40)
    m_dk = ms.sum(axis=0)[:, None] * aQ.max(axis=0, initial=0.0)[None, :] * (1 + 2.0 ** -40)
    m_dq = ms.sum(axis=1)[:, None] * aK.max(axis=0, initial=0.0)[None, :] * (1 + 2.0 ** -40)
    return dv, dk, dq, (ex_dv, m_dv), (ex_dk, m_dk), (ex_dq, m_dq)


def attention_backward_error_bound(q=None, k=None, v=None, out=None, dout=None, lse=None, *,
                                   problem: Problem | None = None, **fa4_args) -> BackwardBound:
    """Rigorous per-element bounds on FA4's backward ``|dq - dq_exact|``, ``|dk - dk_exact|``, ``|dv - dv_exact|``
    (and ``|dsink - dsink_exact|``), the exact values being the real-arithmetic gradients of the given inputs.

    The bound holds for whatever bits the kernel produces within its hardware models (fa4num.hw.mma tensor
    cores, the measured MUFU ex2 tables) and for every order of the dQ atomics (``deterministic`` either way; with
    GQA also of the dK/dV head adds). Derivation: docs/bounds.md, section 11.

    Parameters
    ----------
    q, k, v, out, dout, lse
        As :func:`fa4num.attention.backward` takes them: FA4's layouts, the forward's output and LSE (whatever
        produced them; their error is measured, not assumed) and the incoming gradient.
    problem : Problem, optional
        ``plan(q, k, v, **fa4_args)`` already made (then only out, dout, lse).
    **fa4_args
        FA4's arguments and the backward's knobs, resolved by the forward's own :func:`fa4num.attention.plan`
        and checked by :func:`fa4num.attention.backward.prepare` (what the backward refuses, this refuses);
        ``seqused_q``/``seqused_k`` and FlexAttention's arguments (score_mod, mask_mod, block sparsity) are
        refused by name (not modelled).

    Returns
    -------
    BackwardBound

    Examples
    --------
    >>> import numpy as np, ml_dtypes
    >>> from fa4num.attention import backward, forward
    >>> rng = np.random.default_rng(0)
    >>> q, k, v, do = (rng.standard_normal((1, 64, 1, 64)).astype(ml_dtypes.bfloat16) for _ in range(4))
    >>> fw = forward(q, k, v)
    >>> b = attention_backward_error_bound(q, k, v, fw.out, do, fw.lse)
    >>> g = backward(q, k, v, fw.out, do, fw.lse)
    >>> bool((np.abs(g.dq.astype(np.float64) - b.dq_exact) <= b.dq).all())
    True
    """
    problem = given_or_plan(problem, q, k, v, fa4_args, who="attention_backward_error_bound")
    # the backward's mods and sparse tensors are not modelled here (the forward bound's are): refused by name
    problem.refuse_flex("attention_backward_error_bound")
    if problem.seqused_q is not None or problem.seqused_k is not None:
        raise ValueError("seqused_q/seqused_k: not modelled by attention_backward_error_bound")
    oa, doa, lsea, tile = prepare(problem, out, dout, lse)
    qa, ka, va = _as_array(problem.q, "q"), _as_array(problem.k, "k"), _as_array(problem.v, "v")
    kern, opts = problem.kernel, problem.opts
    scale, softcap = problem.softmax_scale, problem.softcap
    s32 = float(problem.softmax_scale_f32)
    gemm = config.GEMM_IMPL[opts.gemm][0]
    arch, dtn = kern.accumulator, problem.dtype
    d, dvd = problem.head_dim, problem.head_dim_v
    rows_max = max(16, -(-(qa.shape[-3] if not problem.varlen else qa.shape[0]) // tile.tile_m) * tile.tile_m)
    if mufu_model(opts.mufu_arch).exact("ex2"):
        ex2_rel = mufu_error_bounds(opts.mufu_arch).ex2_relative
    else:                                   # the statistical mode's libm: PTX's documented bound
        ex2_rel = _PTX_EX2_REL
    with np.errstate(over="ignore"):
        sl2, lam, dlam, _ = _delta_lambda(1.0 if softcap else scale)
    ctx = _Ctx(tile=tile, gemm=gemm, g_s=_gemm_model(gemm, arch, dtn, d), g_dp=_gemm_model(gemm, arch, dtn, dvd),
               g_dkv=_gemm_model(gemm, arch, dtn, rows_max), g_dq=_gemm_model(gemm, arch, dtn, tile.tile_n),
               s32=s32, scale=scale, sl2=abs(sl2), lam=lam, dlam=dlam,
               ex2_rel=ex2_rel, softcap=softcap, tanh_err=_tanh_abs_error(opts.mufu_arch) if softcap else None,
               window=problem.window, dt=qa.dtype, dtn=dtn, d=d, dv=dvd,
               dvp=-(-dvd // tile.hdim_multiple_of) * tile.hdim_multiple_of, causal=problem.window.causal)
    # no finite bound at all: masked scores give -inf * sl2 = NaN or +inf in the exponent (docs/bounds.md, 11.8)
    unbounded = scale < 0 and not softcap or _scale_vanishes(scale, softcap)
    f64 = [np.asarray(x).astype(np.float64) for x in (qa, ka, va, oa, doa)]
    shapes = [x.shape for x in f64[:3]]
    res = {n: np.zeros(s) for n, s in zip(("dq", "dk", "dv"), shapes)}
    ex = {n: np.zeros(s) for n, s in zip(("dq", "dk", "dv"), shapes)}
    h, hk = problem.heads, problem.heads_kv
    g = h // hk
    sink = problem.sink
    nthr = dq_postprocess_threads(kern, tile)
    sink_terms = [[] for _ in range(h)]
    if problem.varlen:
        cq, ck = problem.cu_seqlens_q, problem.cu_seqlens_k
        seqs = [((slice(cq[i], cq[i + 1]),), (slice(ck[i], ck[i + 1]),), (lambda hh, s_=slice(cq[i], cq[i + 1]):
                                                                             (hh, s_))) for i in range(cq.size - 1)]
    else:
        seqs = [((b,), (b,), (lambda hh, b=b: (b, hh))) for b in range(qa.shape[0])]
    with np.errstate(invalid="ignore", over="ignore"):
        for qi, ki, li in seqs:
            Qs, Ks, Vs, Os, dOs = f64[0][qi], f64[1][ki], f64[2][ki], f64[3][qi], f64[4][qi]
            sq, sk = Qs.shape[0], Ks.shape[0]
            if sq == 0:
                continue
            vis = np.broadcast_to(masking.visible(np.arange(sq)[:, None], np.arange(sk)[None, :], seqlen_q=sq,
                                                  seqlen_k=sk, window=problem.window), (sq, sk))
            any_ = vis.any(axis=1)
            first = np.where(any_, vis.argmax(axis=1), 0).astype(np.int64)
            last = np.where(any_, sk - 1 - vis[:, ::-1].argmax(axis=1), -1).astype(np.int64)
            nb, rows = _blocks(sq, sk, ctx)
            acc = {n: [np.zeros((sk, x)), np.zeros((sk, x)), np.zeros((sk, x)), np.zeros((sk, x)),
                       np.zeros((sk, x)), np.zeros(sk, bool), np.zeros(sk, bool)] for n, x in (("dk", d), ("dv", dvd))}
            for hh in range(h):
                kv = hh // g
                Q, K, V, O, dO = Qs[:, hh], Ks[:, kv], Vs[:, kv], Os[:, hh], dOs[:, hh]
                finite = all(np.isfinite(x).all() for x in (Q, K, V, O, dO))
                if not finite:
                    Q, K, V, O, dO = (np.where(np.isfinite(x), x, 0.0) for x in (Q, K, V, O, dO))
                lse_h = np.asarray(lsea[li(hh)], np.float32)
                finite &= bool((~np.isnan(lse_h) & (lse_h < np.inf)).all())
                hd = _head(Q, K, V, O, dO, np.where(np.isnan(lse_h) | (lse_h == np.inf), 0, lse_h), first, last,
                           None if sink is None else float(sink[hh]), ctx)
                dvv, dkk, dqq, exv, exk, exq = _gemms(hd, Q, K, dO, nb, rows, ctx)
                # dQ: RN(dQaccum * scale) (flash_bwd_postprocess.py), then the cast
                c, r = dqq[0] * s32, dqq[1] * s32
                r = r + U * (np.abs(c) + r) + TINY
                bq = _bound_of(c, r, exq[0] * scale, exq[1] * abs(scale) + 2.0 ** -52 * np.abs(exq[0] * scale),
                               ctx.dt)
                bq[hd["badS"].any(axis=1)] = np.inf
                if not finite:
                    bq[:] = np.inf
                res["dq"][qi][:, hh] = bq
                ex["dq"][qi][:, hh] = exq[0] * scale if finite else np.nan
                for n, (gc, gr), (e_, m_), bad in (("dk", dkk, exk, hd["badS"]), ("dv", dvv, exv, hd["badP"])):
                    a = acc[n]
                    a[0] += gc
                    a[1] += gr
                    a[2] += np.abs(gc) + gr
                    a[3] += e_
                    a[4] += m_
                    a[5] |= bad.any(axis=0) | (not finite)
                    a[6] |= not finite
                if hd["sink"] is not None:
                    sink_terms[hh].append((hd["sink"], finite))
                if (hh + 1) % g:
                    continue
                # the group's heads are summed in fp32 (dK/dVaccum, any order; none without GQA), dK scaled
                for n in ("dk", "dv"):
                    c, r, aab, e_, m_, bad, _ = acc[n]
                    if g > 1:
                        r = r + _gamma(g - 1) * aab + 2.0 ** -50 * aab
                    fac = s32 if n == "dk" else 1.0
                    xs = scale if n == "dk" else 1.0
                    c, r = c * fac, r * fac
                    if n == "dk":
                        r = r + U * (np.abs(c) + r) + TINY
                    b = _bound_of(c, r, e_ * xs, m_ * abs(xs) + 2.0 ** -52 * np.abs(e_ * xs), ctx.dt)
                    b[bad] = np.inf
                    res[n][ki][:, kv] = b
                    ex[n][ki][:, kv] = np.where(acc[n][6][:, None], np.nan, e_ * xs)
                    for arr in acc[n][:5]:
                        arr[...] = 0
                    acc[n][5][...] = False
                    acc[n][6][...] = False
    dsink = dsink_x = None
    if sink is not None:
        dsink, dsink_x = np.zeros(h), np.zeros(h)
        sdt = np.dtype(problem.sink_dtype)
        for hh in range(h):
            parts = sink_terms[hh]
            lo = np.concatenate([p["lo"] for p, _ in parts])
            hi = np.concatenate([p["hi"] for p, _ in parts])
            c, r = (lo + hi) / 2, (hi - lo) / 2
            depth = sum(-(-p["lo"].size // nthr) for p, _ in parts) + 10
            tot_c, tot_r = c.sum(), r.sum() + _gamma(depth) * np.maximum(np.abs(lo), np.abs(hi)).sum() \
                + lo.size * 2.0 ** -52 * np.abs(c).sum() + (lo.size + 10) * TINY
            e_ = sum(p["exact"].sum() for p, _ in parts)
            m_ = sum(p["margin"].sum() for p, _ in parts) + lo.size * 2.0 ** -52 * sum(np.abs(p["exact"]).sum()
                                                                                        for p, _ in parts)
            glo = _round_dir(np.array([tot_c - tot_r]), False).astype(sdt).astype(np.float64)
            ghi = _round_dir(np.array([tot_c + tot_r]), True).astype(sdt).astype(np.float64)
            b = float(max(abs(glo[0] - e_), abs(ghi[0] - e_)) + m_) * (1 + 2.0 ** -40)
            ok = all(f for _, f in parts) and not any(p["bad"].any() for p, _ in parts) and math.isfinite(b)
            dsink[hh] = b if ok else math.inf
            dsink_x[hh] = e_
    if unbounded:
        for a in res.values():
            a[...] = np.inf
        if dsink is not None:
            dsink[...] = np.inf
    used = {"tile_m": tile.tile_m, "tile_n": tile.tile_n, "cta_group": tile.cta_group, "gemm": gemm,
            "accumulator": arch, "mufu_arch": opts.mufu_arch, "ex2_relative": ex2_rel}
    return BackwardBound(res["dq"], res["dk"], res["dv"], ex["dq"], ex["dk"], ex["dv"], dsink, dsink_x,
                         kern.name, used)
