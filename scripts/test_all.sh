#!/usr/bin/env bash
# `make test`: the whole suite on the embedded PostgreSQL 18 and, when it answers, on the PostgreSQL
# at $PG15_URL, one after the other; each run is two pytest-xdist workers and then the serial and
# quiet_horizon tests one at a time (scripts/pytest_parallel.sh), and its output is printed whole when it ends. Then the
# API tests through a real PgBouncer, when it is installed, and the failover harness on a formation
# of its own. Each run is the Makefile's target (test-embedded, test-pg15, test-pooler,
# test-failover): their commands live there. Exit status: 1 if any run failed.
set -u
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
PY=${PY:-.venv/bin/python}
PG15_URL=${PG15_URL:-postgresql://postgres@127.0.0.1:5432/postgres}
logs=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$logs"' EXIT

# run TARGET: one of the Makefile's runs (which says its command) in the background, its output in its log
names=() pids=()
run() {
  echo "[$1] started $(date -u +%H:%M:%S)"
  "$MAKE" --no-print-directory "$1" > "$logs/$1.log" 2>&1 &
  names+=("$1") pids+=($!)
}

# wait_all: wait for every run started, print each one's output as it ends; 1 if one failed
wait_all() {
  local failed=0 i
  for i in "${!pids[@]}"; do
    if wait "${pids[$i]}"; then status=passed; else status=FAILED; failed=1; fi
    echo "===== [${names[$i]}] $status $(date -u +%H:%M:%S) ====="
    cat "$logs/${names[$i]}.log"
  done
  names=() pids=()
  return $failed
}

failed=0
# one after the other: each run already fills both cores with its two workers
run test-embedded
wait_all || failed=1
if "$PY" -c "import psycopg; psycopg.connect('$PG15_URL', connect_timeout=3).close()" 2>/dev/null; then
  run test-pg15
else
  echo "PostgreSQL at $PG15_URL does not answer: skipping the PostgreSQL 15 run"
fi
wait_all || failed=1

if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then
  run test-pooler
  wait_all || failed=1
else
  echo "pgbouncer is not installed: skipping the API tests through PgBouncer"
fi
# the failover harness: its own PostgreSQL formation, so once, not per PostgreSQL
run test-failover
wait_all || failed=1
exit $failed
