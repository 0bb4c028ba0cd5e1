-- Coalesced Session reads: the store's point reads of Sessions that are in flight together share
-- one statement of these functions (db/kept_reads.py; the kinds of read are in db/store.py).
--
-- Applied by migration 0002 (every file of schema/) on a clean database and again by 0005 on a
-- database made before these functions existed: every statement here is idempotent.

-- get_sessions: get_session for a batch of callers at once (the store coalesces concurrent reads).
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
