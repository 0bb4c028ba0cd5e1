"""Only the two bridges name procrastinate's internals (scripts/check_bridge.py, run by `make lint`;
independent of the import-linter contracts): schema/05_procrastinate.sql among the SQL files and
jobs/bridge.py among sessionq's Python modules. A rule broken on purpose is found."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import check_bridge  # noqa: E402

sys.path.pop(0)


def test_only_the_bridges_name_procrastinates_internals() -> None:
    found = check_bridge.violations(ROOT)
    assert found == [], "\n".join(map(str, found))


def test_make_lint_runs_the_check() -> None:
    lint = ROOT.joinpath("Makefile").read_text().split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "scripts/check_bridge.py" in lint
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_bridge.py")], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "kept" in result.stdout, result.stdout


@pytest.mark.parametrize(
    "line",
    [
        "SELECT count(*) FROM procrastinate_jobs;",
        "PERFORM procrastinate_retry_job_v2(1, now(), NULL, NULL, NULL);",
        "SELECT pg_notify('procrastinate_any_queue_v1', '{}');",
        "-- the trigger on procrastinate_jobs",
        "v PROCRASTINATE_JOBS;",
    ],
)
def test_a_sql_file_naming_procrastinates_objects_is_found(line: str) -> None:
    found = check_bridge.check_sql("schema/80_operator_views.sql", f"SELECT 1;\n{line}\n")
    assert [(v.path, v.line) for v in found] == [("schema/80_operator_views.sql", 2)]
    assert check_bridge.check_sql("schema/05_procrastinate.sql", line) == []  # the bridge may


@pytest.mark.parametrize(
    "source",
    [
        "from procrastinate.worker import Worker",
        "from procrastinate.manager import JobManager",
        "from procrastinate import App, Blueprint",
        "import procrastinate",
        "import procrastinate.jobs",
        'SQL = "SELECT * FROM procrastinate_events WHERE job_id = %s"',
        'await conn.execute("LISTEN procrastinate_any_queue_v1")',
        'path = resources.files("procrastinate.sql")',
    ],
)
def test_a_python_module_using_procrastinates_internals_is_found(source: str) -> None:
    for path in ("jobs/drain.py", "src/sessionq/db/operator_store.py", "cli/operator.py", "scripts/tool.py"):
        found = check_bridge.check_python(path, f"from __future__ import annotations\n{source}\n")
        assert found and {v.line for v in found} == {2}, (path, found)
    assert check_bridge.check_python("jobs/bridge.py", source) == []  # the bridge may


def test_the_public_api_and_the_migrations_are_allowed() -> None:
    public = "from procrastinate import App, JobContext, PsycopgConnector, RetryStrategy\nlog = 'procrastinate'\n"
    assert check_bridge.check_python("jobs/app.py", public) == []
    migration = 'run_sql(resources.files("procrastinate.sql").joinpath("schema.sql").read_text())\n'
    assert check_bridge.check_python("src/sessionq/db/migrations/versions/0003_procrastinate_3_11.py", migration) == []
    assert check_bridge.check_python("src/sessionq/db/store.py", migration) != []
