#!/usr/bin/env bash
# The performance gate's CI job (docs/PERF_GATE.md shows it as a GitHub Actions job and a GitLab
# job, both of which run this script): with parbench built, run a case set, gate it against a
# stored baseline with ci/perf-gate, and keep the run in a history folder.
#   ci/gate-job.sh BASELINE.json [PARBENCH_FLAGS...]                  gate a run against BASELINE.json
#   ci/gate-job.sh --make-baseline BASELINE.json [PARBENCH_FLAGS...]  run the case set, store it as BASELINE.json
# PARBENCH_FLAGS replace the default case set, a small CPU one (tinycnn, single device, the CPU
# preset); a GPU job passes its own, the same as the baseline was run with.
# Environment:
#   PARBENCH_BINARY   the binary (default ./build/parbench)
#   GATE_OUT          where the run's JSON and the gate's result go (default gate-out/): the job's
#                     artifacts, kept whatever the verdict
#   GATE_HISTORY      the history folder (default perf-history/): a run that passes the gate is
#                     copied there as <UTC time>-<commit>.json, a folder `ci/perf-gate --window` reads
#   GATE_THRESHOLD    --threshold of the gate in percent (default 5)
#   GATE_SUMMARY      a file the gate appends its Markdown table to (e.g. "$GITHUB_STEP_SUMMARY")
#   GATE_PYTHON       the python that runs ci/perf-gate (default python3: it needs no packages)
# Exit status: parbench's 2 (bad flags, nothing written), else the gate's (0 pass, 1 regression
# or a case that failed, 2 unusable), or 1 when parbench failed a case and the gate passed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

make_baseline=0
if [[ ${1:-} == --make-baseline ]]; then
  make_baseline=1
  shift
fi
baseline=${1:?usage: ci/gate-job.sh [--make-baseline] BASELINE.json [PARBENCH_FLAGS...]}
shift
case_set=("$@")
if ((${#case_set[@]} == 0)); then
  case_set=(--preset=cpu --models=tinycnn --strategies=single --batch=2 --image=32 --warmup=2
            --iterations=10 --repetitions=5)
fi
binary=${PARBENCH_BINARY:-./build/parbench}
out=${GATE_OUT:-gate-out}
history=${GATE_HISTORY:-perf-history}
python=${GATE_PYTHON:-python3}
mkdir -p "$out"

# 1. Run. parbench exits 1 when a case failed and still writes its JSON, so the gate runs then
#    too and names the failed case; 2 is bad input, with nothing written.
parbench_status=0
"$binary" "${case_set[@]}" --benchmark_out="$out/candidate.json" --benchmark_out_format=json \
  >"$out/parbench.txt" || parbench_status=$?
if [[ $parbench_status == 2 ]]; then
  echo "gate-job: parbench refused its flags (exit 2); $out/parbench.txt has its output" >&2
  exit 2
fi

if ((make_baseline)); then
  if [[ $parbench_status != 0 ]]; then
    echo "gate-job: parbench exited $parbench_status: a baseline with a failed case is not stored" >&2
    exit "$parbench_status"
  fi
  mkdir -p "$(dirname "$baseline")"
  cp "$out/candidate.json" "$baseline"
  echo "gate-job: baseline stored: $baseline" >&2
  exit 0
fi

# 2. Gate.
gate_args=("$baseline" "$out/candidate.json" --threshold "${GATE_THRESHOLD:-5}" --json-out "$out/perf-gate.json")
if [[ -n ${GATE_SUMMARY:-} ]]; then
  gate_args+=(--markdown-out "$GATE_SUMMARY")
fi
gate_status=0
"$python" "$repo/ci/perf-gate" "${gate_args[@]}" || gate_status=$?

# 3. Keep the history: a run that passed, named by time and commit (the gate's --window keys runs
#    by their context's git_sha and date, not by name).
if [[ $gate_status == 0 && $parbench_status == 0 ]]; then
  mkdir -p "$history"
  commit=$(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  cp "$out/candidate.json" "$history/$(date -u +%Y%m%dT%H%M%SZ)-$commit.json"
fi

if [[ $gate_status != 0 ]]; then
  exit "$gate_status"
fi
exit "$parbench_status"
