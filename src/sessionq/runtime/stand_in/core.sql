-- The functions both stand-in runtimes define the same way, installed into each runtime's schema
-- after its tables (database.core_functions_sql): {schema} is the schema (substrate_sim,
-- sessionq_process), {fail_sqlstate} the SQLSTATE its fail raises (SX001, PX001). Idempotent.

CREATE OR REPLACE FUNCTION {schema}.fail(p_code text, p_message text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = {fail_sqlstate}, MESSAGE = p_message, DETAIL = p_code;
END $$;
COMMENT ON FUNCTION {schema}.fail(text, text) IS
    'Raise a runtime error: the schema''s SQLSTATE (substrate_sim SX001, sessionq_process PX001), the message, and '
    'the runtime Code name (e.g. NOT_FOUND) in DETAIL; the runtime turns it into SubstrateError(Code(detail), message).';

CREATE OR REPLACE FUNCTION {schema}.lock_actor(p_atespace text, p_name text, p_uid text)
RETURNS {schema}.actors LANGUAGE plpgsql AS $$
DECLARE
  v_row {schema}.actors;
BEGIN
  SELECT * INTO v_row FROM {schema}.actors WHERE atespace = p_atespace AND name = p_name FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM {schema}.fail('NOT_FOUND', format('actor %s/%s not found', p_atespace, p_name));
  END IF;
  IF p_uid IS NOT NULL AND v_row.uid <> p_uid THEN
    PERFORM {schema}.fail('FAILED_PRECONDITION',
      format('actor uid mismatch for %s/%s: expected %s, found %s', p_atespace, p_name, p_uid, v_row.uid));
  END IF;
  RETURN v_row;
END $$;
COMMENT ON FUNCTION {schema}.lock_actor(text, text, text) IS
    'Lock (FOR UPDATE) and return the Actor row; NOT_FOUND if missing, FAILED_PRECONDITION if p_uid is given and differs.';
