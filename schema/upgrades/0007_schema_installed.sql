-- Upgrade 0007_schema_installed: the record of the revision a schema was installed at.
--
-- Applied by its revision only, to a database whose schema was installed before it; a database
-- installed from schema/ at or after it has all of this already. Frozen: a later change to these
-- statements is a later upgrade, and the canonical text lives in schema/. Every statement is
-- idempotent.
--
-- A database upgraded in place gets the table with no row: every later upgrade applies to it.

CREATE TABLE IF NOT EXISTS sessionq.schema_installed (
  only_row     boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  revision     text NOT NULL,
  installed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE sessionq.schema_installed IS
  'One row: the migration revision whose canonical schema/ files made this database. An upgrade revision at or before it is already in the schema and skips its upgrade file; a database without this row was made before it was recorded, and every upgrade applies.';
