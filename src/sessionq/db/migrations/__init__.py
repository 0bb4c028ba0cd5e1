"""Alembic migrations: procrastinate's schema at the pinned version, then sessionq's SQL files."""
