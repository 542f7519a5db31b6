"""Shared bits of the benchmark scripts: the machine's state (load average, threads) and the JSON writer."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def machine_state() -> dict:
    """Load average and thread settings, recorded before and after a run: a ratio measured on a busy machine
    says less, and the record must show it."""
    state = {"loadavg_1_5_15": list(os.getloadavg()), "cpu_count": os.cpu_count(), "time": time.time()}
    for var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONDONTWRITEBYTECODE"):
        if var in os.environ:
            state[var] = os.environ[var]
    return state


def user_env(**extra) -> dict:
    """The environment of a fresh process as a user has it: this one's, less ``PYTHONDONTWRITEBYTECODE`` (a
    user's Python caches bytecode; with it set every module is compiled from source in every process, which
    made fresh-process timings on the developers' machines 0.1-0.2 s slower than a user's), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, **extra}


def fresh_process_seconds(code: str, *, repeat: int = 1, env: dict | None = None) -> list[float]:
    """Wall seconds of ``python -c code`` in a fresh interpreter (imports, numba cache loads, all included), run
    from the repository root so that it imports this checkout."""
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True,
                       env=user_env(PYTHONPATH=str(ROOT), **(env or {})))
        out.append(time.perf_counter() - t)
    return out


def fresh_process_json(code: str, *, env: dict | None = None) -> dict:
    """Run ``python -c code`` in a fresh interpreter from the repository root; ``code`` prints one JSON object
    as its last line, which is returned with ``process_seconds`` (the whole process's wall time) added."""
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True,
                       env=user_env(PYTHONPATH=str(ROOT), **(env or {})))
    res = json.loads(r.stdout.strip().splitlines()[-1])
    res["process_seconds"] = time.perf_counter() - t
    return res


def interleaved_seconds(contenders: dict, rounds: int) -> dict[str, list[float]]:
    """Wall seconds of each zero-argument callable, ``rounds`` times, interleaved round by round (one untimed
    warm-up call each first), so that a load spike on a shared machine stretches every contender alike."""
    times = {name: [] for name in contenders}
    for fn in contenders.values():
        fn()
    for _ in range(rounds):
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def write_result(result: dict, path: str | Path, before: dict) -> Path:
    """Attach provenance and the machine state before/after, write JSON, return the path."""
    from fa4num.provenance import provenance
    result["machine_before"] = before
    result["machine_after"] = machine_state()
    result["provenance"] = provenance()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path
