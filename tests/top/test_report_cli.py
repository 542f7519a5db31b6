"""The README's main command as a newcomer runs it: ``fa4num report`` in a fresh folder through the console script
(a subprocess, progress on: the default path no other test takes, where a NameError once hid), checked against
the report's own registry of section providers (fa4num.report.providers) rather than a hard-coded list."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import fa4num
from fa4num.report import providers

ROOT = Path(fa4num.__file__).resolve().parents[1]   # the tree this test imports (a checkout or site-packages)


def _fa4num_command() -> list:
    """The ``fa4num`` console script installed beside this interpreter (what the README's command runs), else the
    module the script calls."""
    script = Path(sys.executable).with_name("fa4num")
    return [str(script)] if script.exists() else [sys.executable, "-m", "fa4num.cli"]


def test_report_quick_through_the_cli_with_progress(tmp_path):
    env = dict(os.environ)
    # the script imports the copy of fa4num under test, not another install the venv may point at
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    run = subprocess.run([*_fa4num_command(), "report", "--quick"], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stderr[-4000:]
    out = tmp_path / "fa4num-report"                     # the README's default output folder
    assert run.stdout.startswith("wrote ") and "report.md" in run.stdout

    names = [name for name, _ in providers()]
    # progress on: one line per provider, in registry order, on stderr ("report [i/n]: name ...")
    steps = [line for line in run.stderr.splitlines() if line.startswith("report [")]
    assert len(steps) == len(names) and all(f"[{i}/{len(names)}]" in s and n in s
                                            for i, (s, n) in enumerate(zip(steps, names), start=1)), steps

    data = json.loads((out / "report.json").read_text())
    md = (out / "report.md").read_text()
    assert data["failed"] == [] and "section failed" not in md
    assert data["provenance"]["quick"] is True
    # every provider of the registry wrote at least one section, and nothing else did
    assert {s["provider"] for s in data["sections"]} == set(names)
    for s in data["sections"]:
        assert f"## {s['title']}\n" in md
        for fig in s["figures"]:
            assert (out / fig).is_file() and (out / fig).stat().st_size > 0, fig
            assert fig in md
    assert data["summary"] and all(f"- {h}\n" in md for h in data["summary"])
