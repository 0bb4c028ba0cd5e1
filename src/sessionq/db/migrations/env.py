"""Alembic environment: runs online against the URL given in the config, under an advisory
lock so that concurrent `sessionq migrate` runs (several replicas starting at once) serialize."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, text

MIGRATION_LOCK = 7_340_011  # pg_advisory_lock key shared by every sessionq migrator

url = context.config.get_main_option("sqlalchemy.url")
assert url, "sqlalchemy.url must be set"
engine = create_engine(url)
with engine.connect() as connection:
    connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATION_LOCK})
    connection.commit()
    try:
        context.configure(connection=connection, target_metadata=None, transactional_ddl=True)
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()
    finally:
        connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK})
        connection.commit()
engine.dispose()
