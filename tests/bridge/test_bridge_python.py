"""What the Python bridge (jobs/bridge.py) assumes of procrastinate's internals: the release it was
checked against, the JobManager methods it overrides (and that procrastinate's Worker calls them),
the Worker attributes it reads (worker_id, the private _running_jobs, shutdown_graceful_timeout)
and how it starts and stops a worker, the task retry strategies the reaper reads, the channels a
worker listens on, and the migrations of procrastinate's schema our Alembic history applies.

An upgrade of procrastinate that changes any of these fails here; see docs/operating.md,
"Upgrading procrastinate"."""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import procrastinate
import psycopg
import pytest
from procrastinate import App, JobContext, PsycopgConnector, RetryStrategy
from procrastinate.exceptions import ConnectorException
from procrastinate.jobs import Job, JobInserted, Status
from procrastinate.manager import JobManager, get_channel_for_queues
from procrastinate.worker import Worker
from sessionq.jobs import bridge
from sessionq.jobs.bridge import RunningWorker, WorkerJobManager, retry_limits

ROOT = Path(__file__).resolve().parents[2]
PYTHON_BRIDGE = ROOT / "jobs" / "bridge.py"

# The newest of procrastinate's schema migrations (procrastinate/sql/migrations) when its schema was
# applied by the revision 0001_procrastinate. A release with newer ones needs an Alembic revision
# that applies them (docs/operating.md, "Upgrading procrastinate"); then update this name.
NEWEST_SCHEMA_MIGRATION = "03.04.00_50_post_add_retry_failed_job_procedure.sql"

# Worker attributes the bridge reads or sets (RunningWorker._worker.<name>)
WORKER_ATTRIBUTES = {"worker_id", "_running_jobs", "shutdown_graceful_timeout", "stop", "run"}
# App attributes the bridge reads or sets (beyond App(...), @app.task, app.periodic, open_async)
APP_ATTRIBUTES = {"worker_defaults", "perform_import_paths", "tasks", "job_manager"}
# worker options sessionq passes (sessionq.app.worker, through run_drainable_worker and RunningWorker)
WORKER_OPTIONS = {"name", "queues", "concurrency", "fetch_job_polling_interval", "shutdown_graceful_timeout",
                  "stalled_worker_timeout", "additional_context", "delete_jobs", "install_signal_handlers",
                  "worker_middleware"}


def test_the_installed_procrastinate_is_the_one_the_bridge_was_checked_against() -> None:
    installed = ".".join(procrastinate.__version__.split(".")[:2])
    assert installed == bridge.CHECKED_VERSION, (
        f"procrastinate {procrastinate.__version__} is installed, the bridges were checked against "
        f"{bridge.CHECKED_VERSION}: follow docs/operating.md, 'Upgrading procrastinate'")
    pinned = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"procrastinate=={bridge.CHECKED_VERSION}.*" in pinned


def test_our_migrations_cover_procrastinates_schema_migrations() -> None:
    names = sorted(f.name for f in resources.files("procrastinate.sql.migrations").iterdir()
                   if f.name.endswith(".sql"))
    assert names[-1] == NEWEST_SCHEMA_MIGRATION, (
        f"procrastinate ships schema migrations after {NEWEST_SCHEMA_MIGRATION}: "
        f"{[n for n in names if n > NEWEST_SCHEMA_MIGRATION]}; add Alembic revisions that apply them "
        "(docs/operating.md, 'Upgrading procrastinate')")


def names_used_on(tree: ast.AST, receiver: str) -> set[str]:
    """Attribute names read or set on `receiver` (a dotted expression such as self._worker)."""
    return {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and ast.unparse(node.value) == receiver}


def test_every_worker_and_app_attribute_the_bridge_uses_is_pinned() -> None:
    tree = ast.parse(PYTHON_BRIDGE.read_text())
    used_on_worker = names_used_on(tree, "self._worker")
    assert used_on_worker and used_on_worker <= WORKER_ATTRIBUTES, sorted(used_on_worker - WORKER_ATTRIBUTES)
    used_on_app = names_used_on(tree, "app") | names_used_on(tree, "context.app")
    assert used_on_app <= APP_ATTRIBUTES, sorted(used_on_app - APP_ATTRIBUTES)


def test_the_job_manager_methods_the_bridge_overrides_keep_their_signatures() -> None:
    assert list(inspect.signature(JobManager.__init__).parameters) == ["self", "connector"]
    finish = inspect.signature(JobManager.finish_job)
    retry = inspect.signature(JobManager.retry_job)
    fetch = inspect.signature(JobManager.fetch_job)
    assert list(finish.parameters) == ["self", "job", "status", "delete_job"]
    assert list(retry.parameters) == ["self", "job", "retry_at", "priority", "queue", "lock"]
    assert list(fetch.parameters) == ["self", "queues", "worker_id"]
    assert inspect.iscoroutinefunction(JobManager.finish_job) and inspect.iscoroutinefunction(JobManager.retry_job)
    assert inspect.iscoroutinefunction(JobManager.fetch_job)
    # fetch_job's row: WorkerJobManager.fetch_job selects every column Job.from_row reads
    read = set(re.findall(r'row\["(\w+)"', inspect.getsource(Job.from_row)))  # .get() ones have defaults
    selected = inspect.getsource(WorkerJobManager.fetch_job)
    assert read and all(column in selected for column in read), read
    # the overrides accept the same arguments, the same way
    for name, base in (("finish_job", finish), ("retry_job", retry), ("fetch_job", fetch)):
        ours = inspect.signature(getattr(WorkerJobManager, name))
        assert [(p.name, p.kind) for p in ours.parameters.values()] == [
            (p.name, p.kind) for p in base.parameters.values()], name
    assert hasattr(PsycopgConnector, "execute_query_one_async")
    # what _attempt_open reads of a job, and the statuses it passes through
    assert {"id", "worker_id", "attempts"} <= {a.name for a in Job.__attrs_attrs__}
    assert {s.value for s in Status} >= {"succeeded", "failed", "aborted"}


def test_the_job_context_gives_the_app_and_the_job() -> None:
    assert {"app", "job", "additional_context"} <= {a.name for a in JobContext.__attrs_attrs__}


def test_a_worker_wakes_its_fetch_loop_on_the_event_the_bridge_sets() -> None:
    """AttemptObserver wakes a worker whose limited queue was full through the worker's private
    _new_job_event: procrastinate's fetch loop waits on it (with the poll and the stop)."""
    assert "worker._new_job_event.set()" in PYTHON_BRIDGE.read_text()
    assert "self._new_job_event.wait()" in inspect.getsource(Worker._run_loop)
    assert "self._new_job_event.set()" in inspect.getsource(Worker._handle_notification)
    app = App(connector=PsycopgConnector(conninfo="postgresql://unused/"))
    assert isinstance(Worker(app=app, install_signal_handlers=False)._new_job_event, asyncio.Event)
    # the middleware receives the worker (its third argument)
    assert "middleware.compose(\n                self.worker_middleware, run_job, context, self\n" in (
        inspect.getsource(Worker._process_job))


def test_a_worker_has_the_attributes_and_options_the_bridge_uses() -> None:
    app = App(connector=PsycopgConnector(conninfo="postgresql://unused/"))
    assert isinstance(app.worker_defaults, dict) and callable(app.perform_import_paths)
    assert isinstance(app.tasks, dict) and isinstance(app.job_manager, JobManager)
    assert WORKER_OPTIONS <= set(inspect.signature(Worker.__init__).parameters)
    worker = Worker(app=app, shutdown_graceful_timeout=3, install_signal_handlers=False)
    assert worker.worker_id is None
    assert worker._running_jobs == {}  # procrastinate's only count of the jobs a worker runs
    assert worker.shutdown_graceful_timeout == 3
    assert callable(worker.stop) and inspect.iscoroutinefunction(worker.run)


def test_the_wake_up_channels_and_payload_are_the_ones_the_sql_bridge_sends() -> None:
    """schema/05_procrastinate.sql (wake_workers) notifies these channels with this payload."""
    assert list(get_channel_for_queues(["operations"])) == ["procrastinate_queue_v1#operations"]
    assert list(get_channel_for_queues(None)) == ["procrastinate_any_queue_v1"]
    annotations = {k: getattr(v, "__forward_arg__", v) for k, v in JobInserted.__annotations__.items()}
    assert annotations == {"type": "Literal['job_inserted']", "job_id": "int"}
    sql = (ROOT / "schema" / "05_procrastinate.sql").read_text()
    assert re.search(r"'procrastinate_queue_v1#' \|\| p_queue, json_build_object\('type', 'job_inserted', "
                     r"'job_id', p_job\)", sql)
    assert "pg_notify('procrastinate_any_queue_v1', json_build_object('type', 'job_inserted', 'job_id', p_job)" in sql


def test_retry_limits_follow_the_tasks_retry_strategies() -> None:
    app = App(connector=PsycopgConnector(conninfo="postgresql://unused/"))
    app.task(name="never", retry=False)(lambda: None)
    app.task(name="forever", retry=True)(lambda: None)
    app.task(name="five", retry=5)(lambda: None)
    app.task(name="three", retry=RetryStrategy(max_attempts=3, wait=1))(lambda: None)
    limits = retry_limits(app)
    assert {k: limits[k] for k in ("never", "forever", "five", "three")} == {
        "never": 0, "forever": None, "five": 5, "three": 3}


async def test_a_query_error_is_a_connector_exception_caused_by_psycopg(database_url: str) -> None:
    """WorkerJobManager tells a lost connection (retried) from other errors by the psycopg error
    procrastinate's ConnectorException carries as its cause."""
    connector = PsycopgConnector(conninfo=database_url, min_size=1, max_size=1)
    async with App(connector=connector).open_async():
        with pytest.raises(ConnectorException) as failed:
            await connector.execute_query_one_async("SELECT 1 / 0 AS n")
    assert isinstance(failed.value.__cause__, psycopg.errors.DivisionByZero)


class RecordingManager(WorkerJobManager):
    """A WorkerJobManager that records how procrastinate's Worker ends each attempt."""

    def __init__(self, connector: PsycopgConnector) -> None:
        super().__init__(connector)
        self.calls: list[tuple[str, int | None, str]] = []

    async def finish_job(self, job: Job, status: Status, delete_job: bool) -> None:
        self.calls.append(("finish_job", job.id, status.value))
        await super().finish_job(job, status, delete_job)

    async def retry_job(self, job: Job, retry_at: Any = None, priority: int | None = None, queue: str | None = None,
                        lock: str | None = None) -> None:
        self.calls.append(("retry_job", job.id, "todo"))
        await super().retry_job(job, retry_at=retry_at, priority=priority, queue=queue, lock=lock)


async def test_a_running_worker_registers_counts_its_jobs_ends_them_through_the_manager_and_stops_gracefully(
    database_url: str,
) -> None:
    connector = PsycopgConnector(conninfo=database_url, min_size=1, max_size=4)
    app = App(connector=connector)
    manager = RecordingManager(connector)
    bridge.install_job_manager(app, connector)
    assert isinstance(app.job_manager, WorkerJobManager)
    app.job_manager = manager  # the same hook, recording
    started, release = asyncio.Event(), asyncio.Event()

    @app.task(name="bridge_block", queue="bridge")
    async def block() -> None:
        started.set()
        await release.wait()

    @app.task(name="bridge_fail", queue="bridge", retry=RetryStrategy(max_attempts=1))
    async def fail() -> None:
        raise RuntimeError("fails on purpose")

    async with app.open_async():
        worker = RunningWorker(app, default_name="bridge-test", queues=["bridge"], concurrency=2,
                               fetch_job_polling_interval=0.1, shutdown_graceful_timeout=10)
        assert (worker.name, worker.queues, worker.concurrency) == ("bridge-test", ["bridge"], 2)
        task = worker.start()
        worker_id = await asyncio.wait_for(worker.registered(), timeout=10)
        assert worker_id is not None and worker.worker_id == worker_id
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            async def registered() -> int:
                cur = await conn.execute("SELECT count(*) FROM sessionq.worker_heartbeats WHERE worker_id = %s",
                                         (worker_id,))
                row = await cur.fetchone()
                return int(row[0]) if row else 0

            assert await registered() == 1
            failing = await fail.defer_async()
            blocking = await block.defer_async()
            await asyncio.wait_for(started.wait(), timeout=10)
            for _ in range(200):  # the failing job: two attempts, ended through the manager
                if ("finish_job", failing, "failed") in manager.calls:
                    break
                await asyncio.sleep(0.05)
            assert ("retry_job", failing, "todo") in manager.calls
            assert ("finish_job", failing, "failed") in manager.calls
            for _ in range(100):  # the failing job's asyncio task ends just after its finish call
                if worker.running_jobs == 1:
                    break
                await asyncio.sleep(0.02)
            assert worker.running_jobs == 1
            assert worker.graceful_timeout == 10
            worker.graceful_timeout = 5
            assert worker.graceful_timeout == 5

            worker.stop()  # graceful: the running job finishes first
            await asyncio.sleep(0.3)
            assert not task.done() and worker.running_jobs == 1
            release.set()
            await asyncio.wait_for(task, timeout=10)
            assert ("finish_job", blocking, "succeeded") in manager.calls
            assert worker.running_jobs == 0 and worker.worker_id is None
            assert await registered() == 0


def test_the_listener_connection_is_the_one_the_session_connector_overrides() -> None:
    """SessionConnector (database.directUrl) sends procrastinate's LISTEN to the direct URL by
    overriding `_get_standalone_connection`: procrastinate's `listen_notify` must open its
    connection there, and nowhere else."""
    source = inspect.getsource(PsycopgConnector.listen_notify)
    assert "self._get_standalone_connection()" in source
    assert "self.pool.connection" not in source and "_async_pool" not in source
    assert hasattr(PsycopgConnector, "_get_standalone_connection")
    assert issubclass(bridge.SessionConnector, PsycopgConnector)
    assert "_get_standalone_connection" in vars(bridge.SessionConnector)


async def test_the_session_connector_listens_on_the_direct_url(database_url: str) -> None:
    """The listener of an app whose pool URL is unusable still connects: it takes the direct URL."""
    from sessionq.jobs.app import build_app

    app = build_app("postgresql://nobody@127.0.0.1:1/none", direct_url=database_url)
    connector = app.connector
    assert isinstance(connector, bridge.SessionConnector)
    async with connector._get_standalone_connection() as conn:
        cur = await conn.execute("SELECT current_database()")
        row = await cur.fetchone()
    assert row is not None and row[0] == psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]


async def test_a_limited_queue_takes_at_most_its_slots_and_leaves_the_rest_to_the_other_queues(
    database_url: str,
) -> None:
    """A worker of concurrency 4 whose queue `slow` is limited to 2: however many slow jobs wait
    (and block), at most 2 run; the jobs of other queues still run at once beside them; when a slow
    job ends the next one starts without waiting for the poll (30 s here)."""
    connector = PsycopgConnector(conninfo=database_url, min_size=1, max_size=4)
    app = App(connector=connector)
    manager = bridge.install_job_manager(app, connector)
    manager.limit_queues({"slow": 2}, ["slow", "fast"])
    running: set[int] = set()
    most = 0
    releases: dict[int, asyncio.Event] = {}
    fast_done = asyncio.Event()

    @app.task(name="bridge_slow", queue="slow")
    async def slow(n: int) -> None:
        nonlocal most
        running.add(n)
        most = max(most, len(running))
        try:
            await releases.setdefault(n, asyncio.Event()).wait()
        finally:
            running.discard(n)

    @app.task(name="bridge_fast", queue="fast")
    async def fast() -> None:
        fast_done.set()

    async def until(condition: Any, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while not condition():
                await asyncio.sleep(0.02)

    async with app.open_async():
        for n in range(6):
            await slow.defer_async(n=n)
        worker = RunningWorker(app, default_name="limits-test", queues=None, concurrency=4,
                               fetch_job_polling_interval=30, shutdown_graceful_timeout=10)
        task = worker.start()
        worker_id = await asyncio.wait_for(worker.registered(), timeout=10)
        assert worker_id is not None
        await until(lambda: len(running) == 2)
        await asyncio.sleep(0.5)  # two slots of four are free, and four slow jobs wait: none more starts
        assert len(running) == 2 and manager.running_in(worker_id, "slow") == 2
        await fast.defer_async()  # another queue: a free slot takes it at once
        await asyncio.wait_for(fast_done.wait(), timeout=10)
        await asyncio.sleep(0.5)  # the worker waits again (for a notification, or the poll in 30 s)
        first = set(running)
        for n in first:  # each end lets the next slow job in, without waiting for the 30 s poll
            releases.setdefault(n, asyncio.Event()).set()
        await until(lambda: len(running) == 2 and not running & first)
        for n in range(6):
            releases.setdefault(n, asyncio.Event()).set()
        await until(lambda: not running and manager.running_in(worker_id, "slow") == 0)
        worker.stop()
        await asyncio.wait_for(task, timeout=10)
    assert most == 2
