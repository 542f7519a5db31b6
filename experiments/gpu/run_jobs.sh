#!/usr/bin/env bash
# One H200 call that runs every GPU job of a job list in turn, each under its own time limit, and packs the
# results into one tarball (the device tool brings back at most 8 files). Run on the device machine after
# `. fa4num/gpu/fa4-env.sh` (and the dask wheels installed into /tmp/site):
#     bash experiments/gpu/run_jobs.sh experiments/gpu/JOBS.jobs "$OUT" REV
# A job list has one job a line: name, seconds, command (DIR = the job's output folder); each list is named
# after the jobs it holds. Each job writes under $R/<job>/; its log is $R/<job>.log. A job that fails or runs out
# of time does not stop the others.
set -u
JOBS=${1:?usage: run_jobs.sh JOBS OUT REV}; OUT=${2:?usage: run_jobs.sh JOBS OUT REV}; REV=${3:-unknown}
R=/tmp/gpu_jobs; rm -rf "$R"; mkdir -p "$R"
export FA4NUM_REVISION=$REV PYTHONUNBUFFERED=1
job() {  # job NAME SECONDS COMMAND...
  local name=$1 secs=$2; shift 2
  mkdir -p "$R/$name"
  local t0=$(date +%s)
  timeout "$secs" "$@" > "$R/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t0 ))s" | tee -a "$R/summary.txt"
  tail -n 3 "$R/$name.log"
}
while read -r name secs cmd; do
  [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
  job "$name" "$secs" bash -c "${cmd//DIR/$R/$name}"
done < "$JOBS"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv >> "$R/summary.txt" 2>&1
tar czf "$OUT/gpu_jobs.tgz" -C /tmp gpu_jobs
cp "$R/summary.txt" "$OUT/"
