"""`sessionq worker` has a readiness signal (issue 17): its metrics server answers /ready with 200
only while the database and the runtime answer (503 with the reason otherwise), which the worker
Deployment's readiness probe asks. A real worker process whose runtime is unreachable is not ready,
then ready once the runtime is served; it kept running meanwhile."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from conftest import stop_process
from test_ateapi_process import free_port, start_served


def _get(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=2.0)
    except httpx.HTTPError:
        return None


def _wait(url: str, status: int, timeout: float, proc: subprocess.Popen[str]) -> httpx.Response:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the worker exited: {proc.stdout.read() if proc.stdout else ''}"
        last = _get(url)
        if last is not None and last.status_code == status:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{url} never answered {status}; last: {last and (last.status_code, last.text)}")


@pytest.fixture
def stopper() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        stop_process(proc, 20)


@pytest.mark.timeout(180)
@pytest.mark.slow
def test_a_worker_is_ready_only_while_its_runtime_answers(
    database_url: str, stopper: list[subprocess.Popen[str]]
) -> None:
    runtime_port, actor_port, metrics_port = free_port(), free_port(), free_port()
    env = {**os.environ, "SESSIONQ_DATABASE__URL": database_url, "SESSIONQ_LOGGING__FORMAT": "text",
           "SESSIONQ_RUNTIME__KIND": "substrate",
           "SESSIONQ_RUNTIME__SUBSTRATE__ADDRESS": f"127.0.0.1:{runtime_port}",
           "SESSIONQ_RUNTIME__SUBSTRATE__CALL_TIMEOUT": "2s",
           "SESSIONQ_METRICS__ENABLED": "true", "SESSIONQ_METRICS__ADDRESS": f"127.0.0.1:{metrics_port}"}
    worker = subprocess.Popen([sys.executable, "-m", "sessionq.cli.main", "worker"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stopper.append(worker)
    ready = f"http://127.0.0.1:{metrics_port}/ready"
    not_ready = _wait(ready, 503, 60, worker)
    deadline = time.monotonic() + 30
    while "runtime does not answer" not in not_ready.text:  # "starting" until the first check
        assert time.monotonic() < deadline, not_ready.text
        time.sleep(0.2)
        not_ready = _wait(ready, 503, 10, worker)
    assert not_ready.text.startswith("not ready: the runtime does not answer"), not_ready.text

    served = start_served(database_url, runtime_port, actor_port)
    stopper.append(served)
    answer = _wait(ready, 200, 60, worker)
    assert answer.text == "ready\n"
    metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5.0)
    assert metrics.status_code == 200 and "sessionq_" in metrics.text, "the metrics are still served beside /ready"

    served.terminate()  # the runtime goes away again: not ready, the worker keeps running
    served.wait(20)
    assert "runtime does not answer" in _wait(ready, 503, 30, worker).text
    assert worker.poll() is None
