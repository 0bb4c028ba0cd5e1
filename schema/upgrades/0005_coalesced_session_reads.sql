-- Upgrade 0005_coalesced_session_reads: the coalesced Session reads and the inlinable access rule.
--
-- Applied by its revision only, to a database whose schema was installed before it; a database
-- installed from schema/ at or after it has all of this already. Frozen: a later change to these
-- statements is a later upgrade, and the canonical text lives in schema/. Every statement is
-- idempotent.

CREATE OR REPLACE FUNCTION sessionq.share_permission(p_session uuid, p_share_hash text)
RETURNS text LANGUAGE sql STABLE AS $$
  SELECT max(sh.permission) FROM sessionq.session_shares sh
   WHERE sh.session_id = p_session AND sh.token_hash = p_share_hash
     AND (sh.expires_at IS NULL OR sh.expires_at > clock_timestamp())
$$;
COMMENT ON FUNCTION sessionq.share_permission(uuid, text) IS
  'The strongest permission (READ_WRITE or READ_ONLY) an unexpired share with this token hash grants on a Session, or NULL. A part of access.';

CREATE OR REPLACE FUNCTION sessionq.access(
  p_session sessionq.sessions, p_caller text, p_share_hash text, p_of text DEFAULT 'session'
) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT CASE
    WHEN p_session.id IS NULL OR p_session.state = 'DELETED' OR p_session.kind IS DISTINCT FROM p_of THEN NULL
    WHEN p_session.creator = p_caller THEN 'owner'
    ELSE sessionq.share_permission(p_session.id, p_share_hash)
  END
$$;
COMMENT ON FUNCTION sessionq.access(sessionq.sessions, text, text, text) IS
  'The caller''s access to a live row of kind p_of (session, or sandbox: 25_sandboxes.sql): owner, READ_WRITE or READ_ONLY (by an unexpired share token hash; sandboxes have no shares), or NULL. Deleted rows, and rows of the other kind, are invisible to everyone.';

CREATE OR REPLACE FUNCTION sessionq.get_sessions(
  p_ids uuid[], p_callers text[], p_share_hashes text[], p_of text[]
) RETURNS TABLE (ord integer, session jsonb) LANGUAGE sql STABLE AS $$
  SELECT r.ord::integer, to_jsonb(s)
    FROM unnest(p_ids, p_callers, p_share_hashes, p_of) WITH ORDINALITY AS r(id, caller, share_hash, of_kind, ord)
    JOIN sessionq.sessions s ON s.id = r.id
   WHERE sessionq.access(s, r.caller, r.share_hash, r.of_kind) IS NOT NULL
$$;
COMMENT ON FUNCTION sessionq.get_sessions(uuid[], text[], text[], text[]) IS
  'get_session for a batch: element i of the four arrays is one caller''s read (Session id, caller, share token hash, kind). Returns (i, row) for each read whose caller may see the row under exactly get_session''s rule (sessionq.access); a read with no row answered is NOT_FOUND for its caller. Reads change nothing.';

-- get_session_views: what GetSession shows of each read of a batch, as plain columns (no JSON).
CREATE OR REPLACE FUNCTION sessionq.get_session_views(
  p_ids uuid[], p_callers text[], p_share_hashes text[], p_of text[]
) RETURNS TABLE (
  ord integer, id text, creator text, revision_id text, agent_namespace text, agent_name text, state text,
  operation text, name text, created_us bigint, updated_us bigint, failure_reason text, failure_message text,
  quiescence_failure jsonb
) LANGUAGE sql STABLE AS $$
  SELECT r.ord::integer, s.id::text, s.creator, s.revision_id::text, s.agent_namespace, s.agent_name, s.state,
         s.operation, s.name, (extract(epoch FROM s.created_at) * 1000000)::bigint,
         (extract(epoch FROM s.updated_at) * 1000000)::bigint, s.failure_reason, s.failure_message,
         s.quiescence_failure
    FROM unnest(p_ids, p_callers, p_share_hashes, p_of) WITH ORDINALITY AS r(id, caller, share_hash, of_kind, ord)
    JOIN sessionq.sessions s ON s.id = r.id
   WHERE sessionq.access(s, r.caller, r.share_hash, r.of_kind) IS NOT NULL
$$;
COMMENT ON FUNCTION sessionq.get_session_views(uuid[], text[], text[], text[]) IS
  'get_sessions answering only what GetSession shows, as columns: for each read i of the four arrays (Session id, caller, share token hash, kind) whose caller may see the row under get_session''s rule (sessionq.access), (i, id, creator, revision, agent, state, operation, name, created and updated in microseconds since the epoch, failure reason and message, quiescence failure). A read with no row answered is NOT_FOUND for its caller. Reads change nothing.';
