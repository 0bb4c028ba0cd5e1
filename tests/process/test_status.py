"""`sessionq status` says plainly that the process runtime isolates nothing (issue 18)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import psycopg
from click.testing import CliRunner, Result
from sessionq.cli.main import main

from sessionq.db.operator_store import PROCESS_RUNTIME_APPLICATION
from sessionq.runtime.process import ProcessSubstrate
from sessionq.runtime.process.sandbox import Isolation
from tests.process.conftest import ATESPACE, argv, config


class Cli:
    """`sessionq ...` in a thread, on the test's database, with a private config home."""

    def __init__(self, database_url: str, home: Path) -> None:
        empty = home / "empty-client.yaml"
        empty.write_text("{}\n")
        self.env: dict[str, Any] = {
            "XDG_CONFIG_HOME": str(home / "xdg"), "SESSIONQ_CLIENT_CONFIG": str(empty),
            "SESSIONQ_DATABASE_URL": database_url, "SESSIONQ_DATABASE__URL": None, "SESSIONQ_SERVER": None,
        }

    async def __call__(self, *args: str) -> Result:
        return await asyncio.to_thread(CliRunner().invoke, main, list(args), env=self.env)


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result


async def test_status_names_the_process_runtime_and_its_isolation_level(
    database_url: str, tmp_path: Path, runtime: ProcessSubstrate
) -> None:
    cli = Cli(database_url, tmp_path)
    cmd = argv()
    await runtime.create_actor_template(ATESPACE, "t", "local/x:1", command=cmd[:1], args=cmd[1:])
    actor = await runtime.create_actor(ATESPACE, "a", f"{ATESPACE}/t")
    await runtime.resume_actor(ATESPACE, "a", actor.uid)
    await runtime.create_actor(ATESPACE, "b", f"{ATESPACE}/t")
    text = ok(await cli("status")).stdout
    line = next(line for line in text.splitlines() if line.startswith("PROCESS RUNTIME"))
    level = runtime.isolation.value
    assert "2 actors, 1 with a process" in line and f"isolation {level}" in line
    if level == "none":
        assert "NOT isolated" in line and "not enforced" in line
    else:
        assert "sandbox" in line and "egress policies enforced" in line
    data = json.loads(ok(await cli("status", "-o", "json")).stdout)
    assert data["process_runtime"] == {"actors": 2, "with_process": 1, "isolation": level}


async def test_status_reads_the_process_runtime_of_its_own_database_only(
    database_url: str, pg_admin_url: str, tmp_path: Path, process_root: Path
) -> None:
    """Another sessionq's process runtime on the same PostgreSQL server (another database) is not
    this one's: with none running here, `status` says so."""
    rt = ProcessSubstrate(database_url, config(process_root, Isolation.NONE, slots=1))
    await rt.open()  # installs its schema
    await rt.close()  # and leaves no runtime server connected to this database
    async with await psycopg.AsyncConnection.connect(
        pg_admin_url, application_name=f"{PROCESS_RUNTIME_APPLICATION} gvisor", autocommit=True
    ):
        data = json.loads(ok(await Cli(database_url, tmp_path)("status", "-o", "json")).stdout)
    assert data["process_runtime"] == {"actors": 0, "with_process": 0, "isolation": None}
