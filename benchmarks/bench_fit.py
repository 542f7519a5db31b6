"""Benchmark: fit + certify 2^x coefficient sets of degrees 1-5 (fa4num.fit defaults: p(0) = 1, fp32,
relative error on [0, 1]) against Sollya doing fpminimax + supnorm for the same five degrees (FA4's call),
measured in the same run on the same machine; and the command a user types, ``fa4num fit --degree 3`` (writes
nothing by default), in a fresh process against a fresh process that runs ``import numpy, scipy``.

    python benchmarks/bench_fit.py [--rounds 5] [--fresh-repeat 7] [--install-repeat 2] [--out FILE]
    python benchmarks/bench_fit.py --fresh-only     # the fresh processes only: bench_fit_fresh.json

Two fa4num contenders, both with a certified bound, timed against Sollya round after round (interleaved, so a
busy machine slows all of them alike; the best round of each is compared):
  * ``proven``: the default (method "auto" = "exact"), which proves the set optimal among all fp32 sets, a
    guarantee Sollya's fpminimax does not give;
  * ``fpminimax``: ``method="fpminimax"``, the Remez optimum rounded by the Brisebarre-Chevillard lattice step,
    the same heuristic as Sollya's fpminimax (like for like), then fa4num's certified sup norm.
Targets: the fresh ``fa4num fit --degree 3`` within 3x of ``python -c "import numpy, scipy"`` (issue 21: the
plain import a user compares with, not scipy.optimize), the warm fits within 3x of Sollya.

The fresh processes (--fresh-repeat rounds, interleaved, the median of each compared) are the command in the
three states a user meets it in, each with its own user cache (FA4NUM_CACHE_DIR, see fa4num.fit._memo):
  * ``fa4num_fit_cli_deg3``: the cache holds the command's results (any run after the first: the fit and the
    new set's metrics are read back, the same text) -- the number the target is about;
  * ``fa4num_fit_cli_deg3_cold``: an empty cache, numba's compiled kernels on disk (the first ``fa4num fit`` of
    a given fa4num version and set of packages): the fit and the exhaustive emulation sweeps run;
  * ``fa4num_fit_cli_deg3_first_install``: an empty cache and an empty numba cache (NUMBA_CACHE_DIR), the first
    run after an install: numba compiles the emulation kernels too (--install-repeat rounds only, 15 s each).
To say where a cold run's time goes, fresh processes also time ``import fa4num.fit``, one ``fit_exp2(3)`` after
it, and the cold CLI with ``--quick`` (no emulation metrics for the new set).
"""
from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, fresh_process_seconds, interleaved_seconds, machine_state, user_env, write_result
from fa4num.fit import fit_exp2, sollya

DEGREES = range(1, 6)


def fits(method: str) -> dict:
    """The five fits with ``method``: per degree the fit's own time, max error and certified bound."""
    out = {}
    for n in DEGREES:
        r = fit_exp2(n, method=method)
        out[n] = {"seconds": r.timings["total"], "max_error": r.max_error, "certified_bound": r.certified_bound,
                  "proven_optimal": r.proven_optimal, "coeffs_hex": [c.hex() for c in r.coeffs]}
    return out


SOLLYA_SCRIPT = "".join(
    f"p{n} = fpminimax(exp(x*log(2.0)), {n}, [|1,24...|], [0;1], relative);\n"
    f"s{n} = supnorm(p{n}, 2^x, [0;1], relative, 2^-20);\n" for n in DEGREES)


def _cli(*extra) -> str:
    """``fa4num fit --degree 3`` (writes nothing by default) as ``python -c`` code."""
    args = ", ".join(repr(a) for a in ("fa4num", "fit", "--degree", "3", *extra))
    return f"import sys, runpy; sys.argv = [{args}]; runpy.run_module('fa4num.cli', run_name='__main__')"


def _fresh(args) -> dict:
    """The fresh-process timings (see the module docstring), interleaved round by round."""
    caches = Path(tempfile.mkdtemp(prefix="bench_fit_cache_"))
    warm = {"FA4NUM_CACHE_DIR": str(caches / "warm")}
    subprocess.run([sys.executable, "-c", _cli()], cwd=ROOT, capture_output=True, check=True,
                   env=user_env(PYTHONPATH=str(ROOT), **warm))   # fills numba's and the warm cache
    runs = iter(range(1 << 30))

    def cold() -> dict:   # a new empty user cache for each run
        return {"FA4NUM_CACHE_DIR": str(caches / f"cold{next(runs)}")}

    def first_install() -> dict:
        return {**cold(), "NUMBA_CACHE_DIR": str(caches / f"numba{next(runs)}")}

    commands = {"numpy_scipy_import": ("import numpy, scipy", dict),
                "fa4num_fit_cli_deg3": (_cli(), lambda: warm),
                "fa4num_fit_cli_deg3_cold": (_cli(), cold),
                "fa4num_fit_cli_deg3_quick_cold": (_cli("--quick"), cold),
                "import_fa4num_fit": ("import fa4num.fit", dict),
                "import_and_fit_exp2_deg3": ("from fa4num.fit import fit_exp2; fit_exp2(3)", dict),
                "fa4num_fit_cli_deg3_first_install": (_cli(), first_install)}
    seconds = {k: [] for k in commands}
    cpu = {k: [] for k in commands}
    for i in range(args.fresh_repeat):
        for k, (code, env) in commands.items():
            if k.endswith("first_install") and i >= args.install_repeat:
                continue
            used = resource.getrusage(resource.RUSAGE_CHILDREN)
            seconds[k] += fresh_process_seconds(code, env=env())
            now = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[k].append(now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime)
    shutil.rmtree(caches, ignore_errors=True)
    median = {k: statistics.median(v) for k, v in seconds.items()}
    cpu_median = {k: statistics.median(v) for k, v in cpu.items()}
    base, cpu_base = median["numpy_scipy_import"], cpu_median["numpy_scipy_import"]
    # CPU seconds (user + system, the child's threads summed) move less with other jobs than wall seconds do
    # on a shared machine; the target is about wall seconds, what a user waits
    return {"fresh_process_seconds": seconds, "fresh_process_median_s": median,
            "fresh_process_ratio_vs_numpy_scipy": {k: t / base for k, t in median.items()},
            "fresh_process_cpu_seconds": cpu, "fresh_process_cpu_median_s": cpu_median,
            "fresh_process_cpu_ratio_vs_numpy_scipy": {k: t / cpu_base for k, t in cpu_median.items()},
            "fresh_baseline": "python -c 'import numpy, scipy'", "fresh_statistic": "median"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the warm contenders (best of N)")
    ap.add_argument("--fresh-repeat", type=int, default=7,
                    help="rounds of the fresh-process commands, median of each (default 7)")
    ap.add_argument("--install-repeat", type=int, default=2,
                    help="of those rounds, how many also time the first run after an install (default 2)")
    ap.add_argument("--fresh-only", action="store_true", help="time the fresh processes only (no Sollya race)")
    ap.add_argument("--out", help="default experiments/results/bench_fit.json (bench_fit_fresh.json with "
                                  "--fresh-only)")
    args = ap.parse_args(argv)
    args.out = args.out or f"experiments/results/bench_fit{'_fresh' if args.fresh_only else ''}.json"
    before = machine_state()
    out = _fresh(args)
    r, med = out["fresh_process_ratio_vs_numpy_scipy"], out["fresh_process_median_s"]
    out["targets"] = {"fresh fa4num fit <= 3x numpy+scipy": r["fa4num_fit_cli_deg3"] <= 3}
    print(f"fresh processes, median of {args.fresh_repeat} interleaved rounds, load average before "
          f"{before['loadavg_1_5_15']}; ratios to python -c 'import numpy, scipy':")
    cpu, rc = out["fresh_process_cpu_median_s"], out["fresh_process_cpu_ratio_vs_numpy_scipy"]
    for k in med:
        print(f"  {k:36s} {med[k]:7.3f} s = {r[k]:6.2f}x   (CPU {cpu[k]:7.3f} s = {rc[k]:6.2f}x)")
    if args.fresh_only:
        path = write_result(out, args.out, before)
        print(f"load {before['loadavg_1_5_15'][0]:.2f} -> {out['machine_after']['loadavg_1_5_15'][0]:.2f}; "
              f"wrote {path}")
        return 0

    contenders = {"proven": lambda: fits("auto"), "fpminimax": lambda: fits("fpminimax")}
    if sollya.available():
        contenders["sollya"] = lambda: sollya.run(SOLLYA_SCRIPT)
    times = interleaved_seconds(contenders, args.rounds)
    best = {k: min(v) for k, v in times.items()}
    out["warm_seconds_deg1to5"] = times
    out["warm_best_deg1to5_s"] = best
    out["per_degree"] = {"proven": fits("auto"), "fpminimax": fits("fpminimax")}
    sol = best.get("sollya")
    if sol is not None:
        out["ratio_over_sollya"] = {"proven": best["proven"] / sol, "fpminimax": best["fpminimax"] / sol}
    if sol is not None:
        out["targets"]["warm proven-optimal fits <= 3x Sollya"] = best["proven"] / sol <= 3
        out["targets"]["warm fpminimax fits <= 3x Sollya"] = best["fpminimax"] / sol <= 3
    path = write_result(out, args.out, before)
    for label in ("proven", "fpminimax"):
        print(f"fa4num {label} fit+certify, degrees 1-5: {best[label]:.3f} s"
              + (f" = {best[label] / sol:.2f}x Sollya fpminimax+supnorm ({sol:.3f} s)" if sol is not None else ""))
        for n, d in out["per_degree"][label].items():
            print(f"  n={n}: {d['seconds']:.3f} s  max rel {d['max_error']:.6e}  certified {d['certified_bound']:.6e}"
                  f"  proven {d['proven_optimal']}")
    print(f"load {before['loadavg_1_5_15'][0]:.2f} -> {out['machine_after']['loadavg_1_5_15'][0]:.2f}; "
          f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
