"""``fa4num study``: run a grid (``run``), list grids and studies (``list``), summarise a result store with
confidence intervals and figures (``summary``), check a store's checksums (``verify``). Imports only argparse at registration; dask when running."""
from __future__ import annotations

import sys

from fa4num.argtypes import path_arg, positive_float


def _run(args) -> int:
    from fa4num.outputs import check_output_dir
    check_output_dir(args.out)   # before the grid is loaded and the cluster started
    from .runner import parse_scheduler, run_grid
    try:
        parse_scheduler(args.scheduler)
    except ValueError as exc:
        raise ValueError(f"--scheduler: {exc}") from None
    from .grid import MAX_TASKS, load_grid
    grid = load_grid(args.grid, max_tasks=None if args.yes else MAX_TASKS)   # validated before any work
    summary = run_grid(grid, args.out, scheduler=args.scheduler, progress=not args.no_progress,
                       compact=not args.no_compact, worker_timeout=args.worker_timeout)
    for cfg, err in summary.failed:
        print(f"failed: {cfg}: {err}", file=sys.stderr)
    if summary.failed:
        print(f"{len(summary.failed)} tasks failed (rerun to retry them)")
    print(summary.line)
    return 1 if summary.failed else 0


def _list(args) -> int:
    from .grid import list_grids
    from .studies import STUDIES
    print("studies: " + ", ".join(sorted(STUDIES)))
    print("grids:")
    for g in list_grids():
        print(f"  {g.name:<16} {len(g):>5} tasks  study {g.study:<13} {g.description}")
    return 0


def _summary(args) -> int:
    from pathlib import Path

    from fa4num.outputs import atomic_files, check_output_dir
    out = Path(args.out)
    if not out.is_dir():
        raise ValueError(f"out: {out} " + ("is not a folder" if out.exists() else "does not exist") +
                         "; give the --out folder of a `fa4num study run`")
    from .store import part_files
    if not part_files(out):
        raise ValueError(f"out: {out} holds no study results (no part-*.parquet); give the --out folder of a "
                         "`fa4num study run`")
    if args.figures is not None:
        check_output_dir(args.figures, option="--figures")
    from .summary import summarize
    if args.figures is None:
        res = summarize(out)
    else:
        with atomic_files(args.figures) as tmp:   # all figures or none: an interrupt leaves no half-written PNG
            res = summarize(out, fig_dir=tmp)
    print(res.markdown)
    if args.figures is not None:
        print(f"wrote {len(res.figures)} figures to {args.figures}")
    return 0


def _verify(args) -> int:
    from .store import verify_store
    rep = verify_store(args.out, repair=args.repair)
    print(f"store {rep.out}: {rep.parts} part file{'s' * (rep.parts != 1)}, {rep.rows} tasks in sound parts"
          + (f" ({rep.duplicates} stored twice, counted once)" if rep.duplicates else ""))
    for name, why, keys in rep.corrupt:
        held = f"{len(keys)} tasks" if keys is not None else "its tasks cannot be read"
        print(f"corrupt: {name} ({why}; {held})" + (": dropped" if rep.repaired else ""))
    for what, names in (("left by an interrupted compaction (reads skip it)", rep.replaced),
                        ("temporary file of a writer that died", rep.temps)):
        for name in names:
            print(f"leftover: {name}, {what}" + (": deleted" if rep.repaired else ""))
    if rep.corrupt:
        verb = "will re-run" if rep.repaired else "re-run after --repair"
        unknown = [n for n, _, k in rep.corrupt if k is None]
        print(f"{len(rep.lost_keys)} tasks {verb} (their rows were only in corrupt parts)"
              + (f", plus those of {len(unknown)} unreadable part(s)" if unknown else ""))
        for k in rep.lost_keys:
            print(f"  {k}")
    if args.grid is not None and (rep.repaired or not rep.corrupt):
        from .grid import config_key, load_grid
        from .store import stored_keys
        from .studies import study_version
        g = load_grid(args.grid, max_tasks=None)
        have, version = stored_keys(args.out), study_version(g.study)
        missing = [cfg for cfg in g.tasks if config_key(g.study, cfg, version) not in have]
        print(f"grid {g.name}: {len(missing)} of {len(g)} tasks missing (the next `study run` computes them)")
        for cfg in missing:
            print("  " + " ".join(f"{k}={v}" for k, v in cfg.items()))
    if not rep.corrupt:
        n = len(rep.unchecked)
        print("ok: " + (f"no corrupt part; {n} part file{'s' * (n != 1)} written before checksums, checked only as "
                        "readable Parquet" if n else "every part matches its checksum"))
    return 1 if rep.corrupt and not rep.repaired else 0


def register(subparsers) -> None:
    p = subparsers.add_parser("study", help="studies at scale on Dask: run grids, list them, summarise results")
    sub = p.add_subparsers(dest="study_command", metavar="ACTION")
    r = sub.add_parser("run", help="compute a grid's missing tasks into a Parquet dataset")
    r.add_argument("grid", type=path_arg,
                   help="a shipped grid's name (`fa4num study list`; e.g. smoke) or a .toml file")
    r.add_argument("--out", type=path_arg, required=True,
                   help="result directory (Parquet dataset; reruns compute only what is missing)")
    r.add_argument("--scheduler", default="local",
                   help="local (a LocalCluster, one worker per core), local:N, local-gpu (one worker per GPU, "
                        "each declaring a GPU resource), local-gpu:N (N workers sharing the GPUs), none (in this "
                        "process, no Dask) or a Dask scheduler address tcp://HOST:PORT (default: local)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--no-compact", action="store_true", help="keep one part file per flush")
    r.add_argument("--yes", action="store_true",
                   help="run a grid of more than 20000 tasks (refused without it: a typo must not build or hang on a "
                        "huge grid)")
    r.add_argument("--worker-timeout", type=positive_float, default=60.0, metavar="S",
                   help="seconds to wait for a Dask scheduler and its first worker (default: 60)")
    r.set_defaults(func=_run)
    v = sub.add_parser("verify", help="check every part of a result store against its checksum")
    v.add_argument("out", type=path_arg, help="result directory of a `fa4num study run`")
    v.add_argument("--repair", action="store_true",
                   help="delete corrupt parts and leftovers of crashes; their tasks re-run on the next run")
    v.add_argument("--grid", type=path_arg, default=None,
                   help="also list this grid's tasks that the store lacks (what the next run computes)")
    v.set_defaults(func=_verify)
    ls = sub.add_parser("list", help="the grids shipped with fa4num and the study functions")
    ls.set_defaults(func=_list)
    s = sub.add_parser("summary", help="means with 95%% confidence intervals over seeds, and figures")
    s.add_argument("out", type=path_arg, help="result directory of a skip_rate or error_budget grid")
    s.add_argument("--figures", type=path_arg, default=None, help="write figures into this directory")
    s.set_defaults(func=_summary)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
