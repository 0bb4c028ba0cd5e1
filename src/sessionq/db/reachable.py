"""Is the database there? A check the server commands run before they start (`migrate`, `serve`,
`worker`, `up --database-url`), so that an unreachable PostgreSQL is one line that says which URL,
which error and what to check, instead of a traceback."""

from __future__ import annotations

from urllib.parse import urlsplit

import psycopg

from sessionq.db.connection import connect_kwargs, conninfo


class DatabaseUnreachable(Exception):
    """PostgreSQL cannot be reached at start; the message is one line for the operator."""


def location(url: str) -> str:
    """host:port/database of a URL, without credentials (a unix socket shows its directory)."""
    try:
        parts = urlsplit(conninfo(url))
        if parts.scheme.startswith("postgres"):
            host = parts.hostname or ""
            if not host and "host=" in parts.query:
                host = parts.query.split("host=", 1)[1].split("&", 1)[0]
            port = f":{parts.port}" if parts.port else ""
            return f"{host or 'localhost'}{port}{parts.path or ''}"
    except ValueError:
        pass
    return "the configured database"


def _reason(error: Exception) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    # psycopg puts the server's or the socket's complaint last (e.g. "Connection refused")
    text = lines[-1] if lines else type(error).__name__
    return text[:300]


def unreachable(url: str, error: Exception) -> DatabaseUnreachable:
    return DatabaseUnreachable(
        f"cannot reach PostgreSQL at {location(url)}: {_reason(error)}; check database.url (or"
        " SESSIONQ_DATABASE__URL, --database-url), that the server runs and that it accepts connections"
        " from this host")


def check(url: str) -> None:
    """Connect once (at most connect_timeout, 5 s by default); DatabaseUnreachable when that fails."""
    try:
        with psycopg.connect(conninfo(url), **connect_kwargs(url)):
            pass
    except (psycopg.OperationalError, psycopg.ProgrammingError) as e:
        raise unreachable(url, e) from None


async def check_async(url: str) -> None:
    try:
        conn = await psycopg.AsyncConnection.connect(conninfo(url), **connect_kwargs(url))
    except (psycopg.OperationalError, psycopg.ProgrammingError) as e:
        raise unreachable(url, e) from None
    await conn.close()
