"""The exp2 sections of ``fa4num report`` (FA4's software exp2 against the correctly rounded 2^x: every fp32
input in the softmax range, below it, the degrees and forms, MUFU), from embedded defaults.

:func:`report_sections` is what fa4num.report (the top layer, which assembles the report) calls; DEFINITIONS
is the report's "how to read the numbers" paragraph.
"""
from __future__ import annotations

import numpy as np

from fa4num.section import ReportContext, Section

from .emulate import POLY_EX2, VARIANTS, fa4_emulated, poly_coeffs
from .engine import Domain, SweepResult, fa4_implementation, mufu_implementation, sweep

# Embedded defaults. The softmax feeds exp2 with x = S*scale_log2 - max <= 0 (plus max_offset/threshold <= 8),
# so the main sweep covers every fp32 x in [-126, 0], where 2^x is a normal number.
MAIN_DOMAIN = Domain(lo=-126.0, hi=0.0)
UNDERFLOW_DOMAIN = Domain(lo=-150.0, hi=-126.0, stride=1)
QUICK_MAIN_STRIDE = 257              # --quick: every 257th bit pattern of the main domain


def _pct(a: int, n: int) -> str:
    return f"{100.0 * a / n:.4g} %" if n else "n/a"


def _row(label: str, r: SweepResult, *, rel: str | None = None) -> str:
    if rel is None:
        rel = f"{r.max_rel:.3e}" if r.max_rel_x is not None else "n/a"
    return (f"| {label} | {r.max_ulp} | {rel} | {r.mean_ulp:.1f} | {_pct(r.exact, r.count)} | "
            f"{_pct(r.bf16_mismatch, r.count)} |")


_TABLE_HEAD = ("| inputs x (domain and grid) | max error (ulp) | max rel. error | mean error (ulp) | "
               "correctly rounded | bf16 mismatch share |\n|---|---|---|---|---|---|")

# Each metric defined once; every number in the report names its inputs (domain and grid) beside it.
DEFINITIONS = """\
- **error (ulp)**: distance between the result and 2^x correctly rounded to fp32, counted in fp32 values
  (positions apart on fp32's ordered line, `fa4num.fp.ulp_distance`); "max" and "mean" are over the inputs named
  in the same row.
- **max rel. error**: max |y / 2^x - 1| over the inputs of the row where 2^x is a normal fp32 number (libm's
  float64 2^x as reference); "n/a" where there is no such input.
- **correctly rounded**: share of inputs whose result equals the correctly rounded fp32 2^x.
- **bf16 mismatch share**: share of inputs whose result, rounded to bf16 as FA4 does before the P·V MMA, differs
  from 2^x correctly rounded to bf16. It depends on how inputs are counted, so each number says which:
  *every fp32 bit pattern* of a range (this weights tiny |x| heavily: half of all negative fp32 values lie in
  (-1, 0)), *the grid* x = k*2^-g (a uniform sample of x), or *the uniform measure* on [-126, 0) (every fp32 x
  weighted by the width it covers; exact, `fa4num.fit.bf16_mismatch_share`; the coefficient table uses it).
- **softmax domain**: x in [-126, 0], the exp2 inputs FA4's softmax produces (x = S*scale_log2 - rowmax <= 0;
  FA4 clamps at -127, and 2^x is a normal fp32 above -126).
"""


def _main_section(ctx: ReportContext) -> Section:
    from .plots import plot_error_vs_x, plot_ulp_histogram
    impl = fa4_implementation(3, variant="packed")
    dom = Domain(lo=MAIN_DOMAIN.lo, hi=MAIN_DOMAIN.hi, stride=QUICK_MAIN_STRIDE if ctx.quick else 1)
    # numba compiles the sweep kernels on the first run (cached on disk afterwards)
    ctx.say("report: compiling the sweep kernels (numba; up to ~30 s on the first run only) ...")
    full = sweep(impl, dom, progress=ctx.progress)
    grid = sweep(impl, Domain(kind="grid", lo=-126.0, hi=0.0, grid_bits=ctx.grid_bits), progress=ctx.progress)
    # 2^(n + f) = 2^n 2^f exactly and FA4 adds n to the exponent, so one period shows the error's shape
    period = sweep(impl, Domain(kind="grid", lo=-1.0, hi=0.0, grid_bits=ctx.grid_bits + 4), progress=ctx.progress)
    plot_error_vs_x(period, ctx.out_dir / "exp2_error_vs_x.png",
                    title=f"FA4 cubic exp2 (ex2_emulation_2) vs correctly rounded 2^x, x = k*2^-{ctx.grid_bits + 4} "
                          "in [-1, 0]\n(the same shape on every unit interval below)")
    plot_ulp_histogram(grid, ctx.out_dir / "exp2_ulp_histogram.png",
                       title=f"FA4 cubic exp2, x = k*2^-{ctx.grid_bits} in [-126, 0]")
    coeffs = ", ".join(f"{float(c):.9g}" for c in poly_coeffs(3))
    uniform = _registry_metric("fa4-deg3", "bf16_mismatch_share")
    uniform_text = f"{100 * uniform:.4g} %" if uniform is not None else "n/a"
    p1 = float(fa4_emulated(np.array([-1e-30], np.float32))[0])
    md = f"""FA4 computes 2^x for some softmax columns in software (`flash_attn/cute/utils.py`, `ex2_emulation_2`):
clamp at -127, split x = n + f with `add.rm` against 1.5*2^23, evaluate the cubic p(f) = {coeffs} (c0 first)
with three `fma.rn`, then add n to the exponent bits. Emulated here bit for bit and compared with 2^x rounded
once to fp32 (and to bf16 for the bf16 column).

{_TABLE_HEAD}
{_row(f"every fp32 bit pattern in [-126, 0]{' (every %dth)' % QUICK_MAIN_STRIDE if ctx.quick else ''}", full)}
{_row(f"grid x = k*2^-{ctx.grid_bits} in [-126, 0] (uniform sample)", grid)}
| uniform measure on [-126, 0) (exact; polys registry, fa4-deg3) | | | | | {uniform_text} |

- Max error {full.max_ulp} ulp at x = {full.max_ulp_x!r}; max relative error {full.max_rel:.4g} at
  x = {full.max_rel_x!r} (every fp32 bit pattern in [-126, 0]).
- Of the bf16 mismatches, {full.bf16_mismatch_far + grid.bf16_mismatch_far} differ by more than one bf16 ulp
  (both rows together).
- Counting every fp32 bit pattern weights tiny |x| heavily: for -2^-24 < x < 0 the floor is -1 and f = RN(1 + x)
  is 1 or just below, so the result is about p(1)/2 = {p1!r} instead of ~1 (the largest errors). The grid row
  weights x uniformly.
- Sweep times on this machine: {full.seconds:.1f} s ({full.count:,} inputs) and {grid.seconds:.1f} s.

![error vs x](exp2_error_vs_x.png)
![ulp histogram](exp2_ulp_histogram.png)
"""
    headline = (f"FA4's cubic software exp2 on the softmax domain [-126, 0]: max error {full.max_ulp} ulp and max "
                f"relative error {full.max_rel:.3g} (every fp32 bit pattern{' sampled' if ctx.quick else ''}); bf16 P "
                f"differs from the correctly rounded bf16 on {uniform_text} of x (uniform measure).")
    return Section("FA4's cubic exp2 against the correctly rounded 2^x", md,
                   ["exp2_error_vs_x.png", "exp2_ulp_histogram.png"],
                   {"all_fp32": full.to_dict(), "grid": grid.to_dict(), "unit_interval": period.to_dict(),
                    "bf16_mismatch_share_uniform": uniform}, headline)


def _underflow_section(ctx: ReportContext) -> Section:
    r = sweep(fa4_implementation(3, variant="packed"), UNDERFLOW_DOMAIN, progress=ctx.progress)
    x = np.array([-126.5], np.float32)
    got, exact = float(fa4_emulated(x)[0]), 2.0 ** -126.5
    md = f"""Every fp32 x in [-150, -126] ({r.count:,} inputs). FA4 assumes its inputs stay above -127. For x in
(-127, -126) the exponent field becomes 0 and the bits decode as a wrong subnormal (x = -126.5 gives {got:.4g}
instead of {exact:.4g}); x <= -127 gives +0 (MUFU's ex2.approx.ftz flushes these outputs to 0 as well).

{_TABLE_HEAD}
{_row("every fp32 bit pattern in [-150, -126] (outside the softmax domain)", r, rel="n/a (2^x subnormal)")}
"""
    headline = (f"Below the softmax domain (x in [-150, -126], which FA4's softmax never produces): errors up to "
                f"{r.max_ulp} ulp where the exponent add builds a wrong subnormal; MUFU flushes these to 0 too.")
    return Section("Below the normal range", md, [], {"underflow": r.to_dict()}, headline)


def _comparison_section(ctx: ReportContext) -> Section:
    grid = Domain(kind="grid", lo=-126.0, hi=0.0, grid_bits=ctx.grid_bits)
    rows, data = [], {}
    for degree in sorted(POLY_EX2):
        r = sweep(fa4_implementation(degree, variant="packed"), grid, progress=ctx.progress, xbins=0)
        rows.append(_row(f"FA4 degree {degree} (POLY_EX2)", r))
        data[f"degree{degree}"] = r.to_dict()
    mufu_note = ""
    try:
        m = sweep(mufu_implementation(arch="sm90", ftz=True), grid, progress=ctx.progress, xbins=0)
        rows.append(_row("MUFU ex2.approx.ftz.f32 (sm90 table model)", m))
        data["mufu_sm90"] = m.to_dict()
    except (ImportError, ValueError, OSError) as err:
        mufu_note = f"\n(MUFU model not available here: {err})\n"
    sub = np.array([-(2.0 ** -140), -(2.0 ** -130)], np.float32)
    variants = []
    for name, v in VARIANTS.items():
        vals = fa4_emulated(sub, variant=name)
        same = all(np.array_equal(fa4_emulated(np.arange(-126, 1, 2.0 ** -8, dtype=np.float32), d, variant=name),
                                  fa4_emulated(np.arange(-126, 1, 2.0 ** -8, dtype=np.float32), d))
                   for d in sorted(POLY_EX2))
        variants.append(f"| {name} | `{v.fa4_function}` | {v.description} | {float(vals[0])!r} | "
                        f"{'yes' if same else 'no'} |")
    md = f"""Every row: the grid x = k*2^-{ctx.grid_bits} in [-126, 0] (a uniform sample of the softmax domain), every
degree of FA4's POLY_EX2 (packed form) and the MUFU model.
{mufu_note}
{_TABLE_HEAD.replace("inputs x (domain and grid)", "implementation")}
{chr(10).join(rows)}

The three forms of the emulation differ only in PTX's `.ftz` (flush subnormals): on normal inputs and FA4's
coefficients they agree bit for bit; a negative subnormal x shows the difference.

| form | FA4 function | instructions | result at x = -2^-140 | equal to packed on the grid (all degrees) |
|---|---|---|---|---|
{chr(10).join(variants)}
"""
    degs = {d: data[f"degree{d}"] for d in sorted(POLY_EX2)}
    first_exact = next((d for d, r in degs.items() if r["bf16_mismatch"] == 0), None)
    mufu = data.get("mufu_sm90")
    headline = (f"Degrees (grid x = k*2^-{ctx.grid_bits} in [-126, 0]): bf16 mismatch share "
                + ", ".join(f"deg {d} {100 * r['bf16_mismatch'] / r['count']:.3g} %" for d, r in degs.items())
                + (f"; MUFU ex2.approx {mufu['max_ulp']} ulp max, {100 * mufu['bf16_mismatch'] / mufu['count']:.3g} %"
                   if mufu else "")
                + (f"; degree {first_exact} is the first with no bf16 mismatch." if first_exact else "."))
    return Section("Degrees, forms and MUFU", md, [], data, headline)


def _registry_metric(name: str, key: str):
    """A metric the polys registry holds for ``name`` (computed when the set was registered), or None."""
    from fa4num.polys import poly_entry
    try:
        return poly_entry(name)["metrics"].get(key)
    except ValueError:
        return None


def report_sections(ctx: ReportContext) -> list:
    """The exp2 sections: all fp32 x in [-126, 0], the range below, and degrees / forms / MUFU compared.

    Parameters
    ----------
    ctx : fa4num.section.ReportContext
        Output folder for the figures and the quick flag.

    Returns
    -------
    list of fa4num.section.Section
    """
    return [_main_section(ctx), _underflow_section(ctx), _comparison_section(ctx)]
