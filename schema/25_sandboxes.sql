-- Sandboxes: kagent's standalone scratch environments (SandboxService), on the Sessions' machinery.
--
-- A Sandbox is a row of sessionq.sessions with request kind sandbox (generated column kind
-- sandbox): the same lifecycle columns, generations, executor claims, execute_operation job and
-- procedures (admit_operation, claim_operation, begin_operation, complete_operation, ...), and
-- the same bounded deletion workflow of the expiry sweep (expire_session). What differs:
--   - its template is an Agent: it runs the actor template of the Agent's latest successful
--     revision (prepared_revision), with Actor name sandbox-<id>; sessionq has no SandboxTemplate;
--   - it never takes turns, has no shares and no checkpoints (every Session-facing procedure reads
--     through sessionq.access, which sees kind session only), and is never quiesced;
--   - it expires at expires_at (creation + ttl), which activity never extends.
-- Only what is the Sandbox's own lives here; everything else is the Sessions' procedures with
-- p_of 'sandbox'.

-- the expiry sweep's page of expired Sandboxes (expires_at never changes: the updates stay HOT)
CREATE INDEX sessions_sandbox_expiry_idx ON sessionq.sessions (expires_at, id)
  WHERE kind = 'sandbox' AND state IN ('CREATING', 'READY', 'SUSPENDED');

-- admit_sandbox: admit the creation of a Sandbox, or answer a retry of one.
CREATE OR REPLACE FUNCTION sessionq.admit_sandbox(
  p_caller text, p_request_id text, p_namespace text, p_template text, p_name text, p_ttl double precision
) RETURNS TABLE (outcome text, generation uuid, session jsonb)
LANGUAGE plpgsql AS $$
BEGIN
  IF p_ttl IS NULL OR p_ttl < 1 OR p_ttl > 86400 THEN
    PERFORM sessionq.fail('SQ400', 'a sandbox ttl must be between 1s and 24h');
  END IF;
  RETURN QUERY SELECT * FROM sessionq.admit_creation(
    p_caller, 'sandbox', p_request_id, p_namespace, p_template, p_name,
    p_namespace || '/' || p_template || '|' || coalesce(p_name, '') || '|' || p_ttl::text, p_ttl);
END $$;
COMMENT ON FUNCTION sessionq.admit_sandbox(text, text, text, text, text, double precision) IS
  'CreateSandbox admission: a Sandbox running the latest successful revision of Agent p_namespace/p_template, expiring p_ttl seconds (1s to 24h: the caller''s ttl or sandboxes.defaultTtl) from now, and its execute_operation job. Idempotent by (caller, request id): a retry with the same template, name and ttl joins the pending creation or returns the Sandbox; other input: ALREADY_EXISTS; a deleted Sandbox''s request id: FAILED_PRECONDITION (admit_creation).';

-- sandbox_intent_replaceable: kagent's SandboxService lets a new intent replace a pending one once
-- its attempt has ended ("while attempts conflict, the conflicting one receives ABORTED").
CREATE OR REPLACE FUNCTION sessionq.sandbox_intent_replaceable(v sessionq.sessions, p_kind text)
RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT v.kind = 'sandbox' AND v.operation <> 'NONE' AND v.operation <> p_kind
     AND v.executor_id IS NOT NULL AND v.executor_expires_at <= clock_timestamp()
     AND (p_kind = 'DELETE' OR v.operation IN ('SUSPEND', 'RESUME'))
$$;
COMMENT ON FUNCTION sessionq.sandbox_intent_replaceable(sessionq.sessions, text) IS
  'Part of admit_operation for a Sandbox (locked row v): whether a new p_kind intent replaces the pending operation, because its last attempt has ended (the claim was released or lapsed; no attempt runs, OP-12 bounds each one). A DELETE replaces any such operation; a SUSPEND or RESUME replaces a pending RESUME or SUSPEND (the executor acts on the Actor as it finds it), never a pending creation. While an attempt holds the claim the new intent is ABORTED.';

-- sandbox_expiry_overrides: a Sandbox expires by itself, also while an intent it cannot finish is pending.
CREATE OR REPLACE FUNCTION sessionq.sandbox_expiry_overrides(v sessionq.sessions)
RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT v.kind = 'sandbox' AND v.state IN ('CREATING', 'READY', 'SUSPENDED') AND v.operation <> 'DELETE'
     AND (v.operation = 'NONE'
          OR v.operation_id IS NULL AND v.executor_id IS NULL  -- its preparation failed: nothing was issued
          OR sessionq.sandbox_intent_replaceable(v, 'DELETE'))  -- its last attempt has ended
$$;
COMMENT ON FUNCTION sessionq.sandbox_expiry_overrides(sessionq.sessions) IS
  'Part of expire_session for an expired Sandbox (locked row v): whether its expiry deletion may be admitted although the Sandbox is CREATING or has an operation pending - when no attempt runs (a creation whose preparation failed, or an operation whose last attempt ended): the deletion replaces that intent. A running attempt still blocks it (busy) until it ends.';

-- sandbox_expiry_candidates: one page of the expiry sweep's Sandboxes.
CREATE OR REPLACE FUNCTION sessionq.sandbox_expiry_candidates(p_after_at timestamptz, p_after_id uuid, p_limit integer)
RETURNS TABLE (id uuid, expires_at timestamptz) LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_now timestamptz := clock_timestamp();  -- a constant bound, so that the index answers
BEGIN
  RETURN QUERY
  SELECT s.id, s.expires_at
    FROM sessionq.sessions s
   WHERE s.kind = 'sandbox' AND s.state IN ('CREATING', 'READY', 'SUSPENDED')
     AND s.expires_at <= v_now
     AND (p_after_at IS NULL OR (s.expires_at, s.id) > (p_after_at, p_after_id))
   ORDER BY s.expires_at, s.id
   LIMIT p_limit;
END $$;
COMMENT ON FUNCTION sessionq.sandbox_expiry_candidates(timestamptz, uuid, integer) IS
  'One page of the expiry sweep: CREATING, READY or SUSPENDED Sandboxes whose expires_at has passed, in expiry order after the given key. Candidates only: expire_session rechecks under the row lock and admits the same bounded deletion as for idle Sessions.';
