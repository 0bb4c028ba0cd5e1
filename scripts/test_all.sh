#!/usr/bin/env bash
# `make test`: the whole suite on the embedded PostgreSQL 18 and, when it answers, on the PostgreSQL
# at $PG15_URL, one after the other (each run fills both cores: two pytest-xdist workers, then the
# serial and quiet_horizon tests one at a time, scripts/pytest_parallel.sh). Then the API tests
# through a real PgBouncer, when it is installed, and the failover harness on a formation of its
# own. Each run is the Makefile's target (test-embedded, test-pg15, test-pooler, test-failover):
# their commands live there. Every run goes whatever the one before it did; exit status 1 if any
# failed, and the last lines say which.
set -u
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
PY=${PY:-.venv/bin/python}
PG15_URL=${PG15_URL:-postgresql://postgres@127.0.0.1:5432/postgres}

results=()
failed=0
# run TARGET: one of the Makefile's runs, in the foreground
run() {
  local status=passed start=$SECONDS
  echo "===== [$1] started $(date -u +%H:%M:%S) ====="
  "$MAKE" --no-print-directory "$1" || { status=FAILED; failed=1; }
  results+=("[$1] $status in $(( (SECONDS - start) / 60 )) min")
  echo "===== [$1] $status $(date -u +%H:%M:%S) ====="
}

run test-embedded
if "$PY" -c "import psycopg; psycopg.connect('$PG15_URL', connect_timeout=3).close()" 2>/dev/null; then
  run test-pg15
else
  echo "PostgreSQL at $PG15_URL does not answer: skipping the PostgreSQL 15 run"
fi
if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then
  run test-pooler
else
  echo "pgbouncer is not installed: skipping the API tests through PgBouncer"
fi
# the failover harness: its own PostgreSQL formation, so once, not per PostgreSQL
run test-failover

printf '%s\n' "${results[@]}"
exit $failed
