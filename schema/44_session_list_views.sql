-- ListSessions' pages as plain columns: the rows list_sessions gives, with what GetSession shows of
-- each (get_session_views' columns), so a page is read without JSON (db/store.py, issue 23).
--
-- Applied by migration 0002 (every file of schema/) on a clean database and again by 0006 on a
-- database made before this function existed: every statement here is idempotent.

CREATE OR REPLACE FUNCTION sessionq.list_session_views(
  p_caller text, p_all_creators boolean, p_namespace text, p_agent text, p_after uuid, p_limit integer,
  p_of text DEFAULT 'session'
) RETURNS TABLE (
  ord integer, id text, creator text, revision_id text, agent_namespace text, agent_name text, state text,
  operation text, name text, created_us bigint, updated_us bigint, failure_reason text, failure_message text,
  quiescence_failure jsonb
) LANGUAGE plpgsql STABLE AS $$
BEGIN
  -- the two statements of list_sessions (each a range of an index, also in a cached generic plan)
  IF p_all_creators THEN
    RETURN QUERY
      SELECT (row_number() OVER (ORDER BY s.id))::integer, s.id::text, s.creator, s.revision_id::text,
             s.agent_namespace, s.agent_name, s.state, s.operation, s.name,
             (extract(epoch FROM s.created_at) * 1000000)::bigint, (extract(epoch FROM s.updated_at) * 1000000)::bigint,
             s.failure_reason, s.failure_message, s.quiescence_failure
        FROM sessionq.sessions s
       WHERE s.id > coalesce(p_after, '00000000-0000-0000-0000-000000000000'::uuid)
         AND s.state <> 'DELETED' AND s.kind = p_of
         AND (p_namespace IS NULL OR s.agent_namespace = p_namespace)
         AND (p_agent IS NULL OR s.agent_name = p_agent)
       ORDER BY s.id
       LIMIT p_limit;
  ELSE
    RETURN QUERY
      SELECT (row_number() OVER (ORDER BY s.creator, s.id))::integer, s.id::text, s.creator, s.revision_id::text,
             s.agent_namespace, s.agent_name, s.state, s.operation, s.name,
             (extract(epoch FROM s.created_at) * 1000000)::bigint, (extract(epoch FROM s.updated_at) * 1000000)::bigint,
             s.failure_reason, s.failure_message, s.quiescence_failure
        FROM sessionq.sessions s
       WHERE s.creator = p_caller
         AND s.id > coalesce(p_after, '00000000-0000-0000-0000-000000000000'::uuid)
         AND s.state <> 'DELETED' AND s.kind = p_of
         AND (p_namespace IS NULL OR s.agent_namespace = p_namespace)
         AND (p_agent IS NULL OR s.agent_name = p_agent)
       ORDER BY s.creator, s.id
       LIMIT p_limit;
  END IF;
END $$;
COMMENT ON FUNCTION sessionq.list_session_views(text, boolean, text, text, uuid, integer, text) IS
  'list_sessions answering only what ListSessions shows of each row, as get_session_views'' columns: (position on the page from 1, id, creator, revision, agent, state, operation, name, created and updated in microseconds since the epoch, failure reason and message, quiescence failure), in id order after p_after. The same rows as list_sessions with the same arguments; one creator''s page reads a range of the (creator, id) index whatever the table''s size.';
