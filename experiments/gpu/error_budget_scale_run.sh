#!/usr/bin/env bash
# Continue the bit-exact error-budget grid on the H200 (experiments/grids/error_budget_gpu.toml) for at most
# $1 seconds, in a store kept on the warm machine (/root/store_eb, seeded from the committed store on the first
# call), then bring the store back as $OUT/study_error_budget_gpu.tar. The store skips the tasks it holds and
# flushes finished rows on SIGTERM, so consecutive calls continue where the last one stopped.
# Usage (repository root, after `. fa4num/gpu/fa4-env.sh` or with Dask installed): bash THIS SECONDS
set -u
S=/root/store_eb
[ -d "$S" ] || { mkdir -p "$S" && cp -r experiments/results/study_error_budget_gpu/. "$S/"; }
python -c "import distributed" 2>/dev/null || python -m pip install -q --no-index --find-links /root/stash/dask dask distributed
uptime
timeout "${1:-500}" python -m fa4num.cli study run experiments/grids/error_budget_gpu.toml --scheduler local-gpu \
  --out "$S" --no-progress
echo "study run exit $?"
uptime
tar -C /root -cf "$OUT/study_error_budget_gpu.tar" "$(basename $S)"
