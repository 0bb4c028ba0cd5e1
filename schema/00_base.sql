-- sessionq base: the schema, identifiers and the error vocabulary.
--
-- Procedures raise sessionq's own SQLSTATEs (class SQ); src/sessionq/errors.py maps each to one
-- gRPC status code:
--   SQ400 invalid argument      SQ403 permission denied     SQ404 not found
--   SQ409 conflict (ABORTED)    SQ412 failed precondition   SQ422 already exists (idempotency)
--   SQ503 unavailable (retry)
-- An ErrorInfo reason, when there is one, travels in the HINT field.

CREATE SCHEMA IF NOT EXISTS sessionq;
COMMENT ON SCHEMA sessionq IS
  'sessionq control plane: agents, revisions, sessions, operations and executor claims. Tables are changed only through the procedures in this schema.';

-- schema_installed: the migration revision at which this database's schema was installed from the
-- canonical files (migration 0002 records it); later upgrades up to it are already in the schema.
CREATE TABLE sessionq.schema_installed (
  only_row     boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  revision     text NOT NULL,
  installed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE sessionq.schema_installed IS
  'One row: the migration revision whose canonical schema/ files made this database. An upgrade revision at or before it is already in the schema and skips its upgrade file; a database without this row was made before it was recorded, and every upgrade applies.';

-- uuid_v7: time-ordered UUIDs (RFC 9562 version 7), so ids sort by creation like the kagent ids.
CREATE OR REPLACE FUNCTION sessionq.uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
  SELECT encode(
    set_bit(set_bit(
      overlay(uuid_send(gen_random_uuid())
              PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
              FROM 1 FOR 6),
      52, 1), 53, 1), 'hex')::uuid
$$;
COMMENT ON FUNCTION sessionq.uuid_v7() IS
  'A new time-ordered UUID (version 7): 48 bits of Unix milliseconds, then random bits.';

-- fail: raise one of the sessionq SQLSTATEs with a message for a person and an optional reason.
CREATE OR REPLACE FUNCTION sessionq.fail(p_code text, p_message text, p_reason text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF p_reason IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = p_code, MESSAGE = p_message;
  ELSE
    RAISE EXCEPTION USING ERRCODE = p_code, MESSAGE = p_message, HINT = p_reason;
  END IF;
END $$;
COMMENT ON FUNCTION sessionq.fail(text, text, text) IS
  'Raise a sessionq error: p_code is an SQ SQLSTATE (see the header of 00_base.sql), p_reason an optional ErrorInfo reason carried in HINT.';

-- clip: a client's value quoted in an error message, cut to a short prefix (errors.clip in Python).
CREATE OR REPLACE FUNCTION sessionq.clip(p_value text, p_limit integer DEFAULT 80)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN length(p_value) <= p_limit THEN p_value ELSE left(p_value, p_limit) || chr(8230) END
$$;
COMMENT ON FUNCTION sessionq.clip(text, integer) IS
  'A value to quote in an error message: at most p_limit characters, a cut marked with an ellipsis. Every message that echoes a caller''s value uses it, so that a huge value never comes back in a status.';

-- secrets: server-side secrets shared by every sessionq process on this database.
CREATE TABLE IF NOT EXISTS sessionq.secrets (
  name       text PRIMARY KEY,
  value      text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE sessionq.secrets IS
  'Server secrets (e.g. "workload": the HMAC key of the workload credentials given to Actors for the task store). Never shown to clients.';
INSERT INTO sessionq.secrets (name, value)
VALUES ('workload', replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''))
ON CONFLICT (name) DO NOTHING;

-- notify: the one encoder of sessionq's NOTIFY payloads (decoded by src/sessionq/db/notify.py,
-- which lists every channel and its payload).
CREATE OR REPLACE FUNCTION sessionq.notify(p_channel text, p_payload jsonb) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_text text;
  v_traceparent text := current_setting('sessionq.traceparent', true);
BEGIN
  IF v_traceparent <> '' THEN  -- a traced statement: what it wakes joins its trace
    p_payload := p_payload || jsonb_build_object('traceparent', v_traceparent);
  END IF;
  v_text := p_payload::text;
  IF octet_length(v_text) > 7900 THEN  -- NOTIFY's limit is 8000 bytes: the optional row goes
    v_text := (p_payload - 'row')::text;
  END IF;
  PERFORM pg_notify(p_channel, v_text);
END $$;
COMMENT ON FUNCTION sessionq.notify(text, jsonb) IS
  'Send a sessionq notification (delivered at commit): p_payload, a JSON object holding the key of its channel (session, checkpoint or worker); an optional "row" is dropped when the payload would not fit NOTIFY''s 8000 bytes; the W3C "traceparent" of a traced statement (the transaction-local setting sessionq.traceparent) is added. Channels and payloads: src/sessionq/db/notify.py.';
