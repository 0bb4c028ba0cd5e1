#!/usr/bin/env bash
# One run of the suite (or of the pytest arguments given) in two parts:
#   1. every test but the serial and quiet_horizon ones, over $TEST_WORKERS pytest-xdist workers (default 2),
#      a file at a time per worker, the files with slow tests first (tests/conftest.py orders them),
#      so that the run ends on short files. Each worker has its own template and clones (and, on
#      the embedded server, its own server); the suite mostly waits on service processes, sandboxes
#      and sockets, so two workers on 2 cores take about half the time of one.
#   2. those, one at a time: the serial ones are harnesses that load the machine by themselves (the
#      short soaks: beside other tests their timings drift past their fault plans),
#      the quiet_horizon ones assert on what the server's oldest running transaction holds back, which
#      another worker's CREATE DATABASE on the same server would hold.
# The failover harness builds a PostgreSQL formation of its own: `make test-failover` runs it, once.
# A worker that dies (a crash in an extension module) ends the parallel part at once with the test it
# was running named in the summary (--max-worker-restart=0): pytest-xdist 3.8 replacing a crashed worker
# under --dist loadfile puts the file's finished tests back in its queue and can wait forever
# (pytest-xdist #784, #1323, #1327), which once used up CI's whole time limit.
# A part that selects no test (exit 5) is not a failure. Exit status: 1 if either part failed.
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
WORKERS=${TEST_WORKERS:-2}

# part ARGS...: run pytest, 0 when it passed or had nothing to run
part() {
  "$PY" -m pytest "$@"
  local rc=$?
  [ "$rc" -eq 5 ] && rc=0
  return $rc
}

failed=0
echo "[parallel part: $WORKERS workers] $(date -u +%H:%M:%S)"
part -n "$WORKERS" --dist loadfile --no-loadscope-reorder --max-worker-restart=0 -m "not (serial or quiet_horizon or failover)" "$@" || failed=1
echo "[serial part: one at a time] $(date -u +%H:%M:%S)"
part -m "(serial or quiet_horizon) and not failover" "$@" || failed=1
echo "[done] $(date -u +%H:%M:%S)"
exit $failed
