# TEMPORARY (substrate simulator development): overrides the root database_url fixture.
from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import psycopg
import pytest

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def _url(name: str) -> str:
    return f"postgresql://postgres@127.0.0.1:5432/{name}"


@pytest.fixture(scope="session")
def sim_template() -> Iterator[str]:
    name = "sim_dev_tpl"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    from sessionq.substrate.simulator import install_schema

    asyncio.run(install_schema(_url(name)))
    yield name


@pytest.fixture
def database_url(sim_template: str) -> Iterator[str]:
    name = f"sim_dev_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{sim_template}"')
    yield _url(name)
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
