-- Upgrade 0006_session_list_views: ListSessions' pages as plain columns (one page function for both listings).
--
-- Applied by its revision only, to a database whose schema was installed before it; a database
-- installed from schema/ at or after it has all of this already. Frozen: a later change to these
-- statements is a later upgrade, and the canonical text lives in schema/. Every statement is
-- idempotent.

CREATE OR REPLACE FUNCTION sessionq.session_page(
  p_caller text, p_all_creators boolean, p_namespace text, p_agent text, p_after uuid, p_limit integer,
  p_of text DEFAULT 'session'
) RETURNS TABLE (ord integer, session sessionq.sessions) LANGUAGE plpgsql STABLE AS $$
BEGIN
  -- Two statements, each with conditions an index can use in a generic plan too (plans are cached,
  -- and a cached plan knows no parameter value): one creator's page is a range of the (creator, id)
  -- index, everyone's a range of the primary key; "no page token" is the range from the nil UUID.
  IF p_all_creators THEN
    RETURN QUERY
      SELECT (row_number() OVER (ORDER BY t.id))::integer, t FROM sessionq.sessions t
       WHERE t.id > coalesce(p_after, '00000000-0000-0000-0000-000000000000'::uuid)
         AND t.state <> 'DELETED' AND t.kind = p_of
         AND (p_namespace IS NULL OR t.agent_namespace = p_namespace)
         AND (p_agent IS NULL OR t.agent_name = p_agent)
       ORDER BY t.id
       LIMIT p_limit;
  ELSE
    RETURN QUERY
      SELECT (row_number() OVER (ORDER BY t.creator, t.id))::integer, t FROM sessionq.sessions t
       WHERE t.creator = p_caller
         AND t.id > coalesce(p_after, '00000000-0000-0000-0000-000000000000'::uuid)
         AND t.state <> 'DELETED' AND t.kind = p_of
         AND (p_namespace IS NULL OR t.agent_namespace = p_namespace)
         AND (p_agent IS NULL OR t.agent_name = p_agent)
       ORDER BY t.creator, t.id
       LIMIT p_limit;
  END IF;
END $$;
COMMENT ON FUNCTION sessionq.session_page(text, boolean, text, text, uuid, integer, text) IS
  'The page of live Sessions (p_of sandbox: Sandboxes) of the caller (or of everyone), optionally of one Agent, in id order after p_after, each row with its position on the page from 1: what list_sessions and list_session_views answer. One creator''s page reads a range of an index (also from a cached generic plan), whatever the table''s size.';

CREATE OR REPLACE FUNCTION sessionq.list_sessions(
  p_caller text, p_all_creators boolean, p_namespace text, p_agent text, p_after uuid, p_limit integer,
  p_of text DEFAULT 'session'
) RETURNS SETOF jsonb LANGUAGE sql STABLE AS $$
  SELECT to_jsonb(p.session) FROM sessionq.session_page(p_caller, p_all_creators, p_namespace, p_agent, p_after,
                                                       p_limit, p_of) p
   ORDER BY p.ord
$$;
COMMENT ON FUNCTION sessionq.list_sessions(text, boolean, text, text, uuid, integer, text) IS
  'Live Sessions (p_of sandbox: Sandboxes) of the caller (or of everyone), optionally of one Agent, in id order after p_after (sessionq.session_page); callers ask limit+1 rows to know whether a next page exists. One creator''s page reads a range of an index (also from a cached generic plan), whatever the table''s size.';

CREATE OR REPLACE FUNCTION sessionq.list_session_views(
  p_caller text, p_all_creators boolean, p_namespace text, p_agent text, p_after uuid, p_limit integer,
  p_of text DEFAULT 'session'
) RETURNS TABLE (
  ord integer, id text, creator text, revision_id text, agent_namespace text, agent_name text, state text,
  operation text, name text, created_us bigint, updated_us bigint, failure_reason text, failure_message text,
  quiescence_failure jsonb
) LANGUAGE sql STABLE AS $$
  SELECT p.ord, (p.session).id::text, (p.session).creator, (p.session).revision_id::text,
         (p.session).agent_namespace, (p.session).agent_name, (p.session).state, (p.session).operation,
         (p.session).name, (extract(epoch FROM (p.session).created_at) * 1000000)::bigint,
         (extract(epoch FROM (p.session).updated_at) * 1000000)::bigint, (p.session).failure_reason,
         (p.session).failure_message, (p.session).quiescence_failure
    FROM sessionq.session_page(p_caller, p_all_creators, p_namespace, p_agent, p_after, p_limit, p_of) p
   ORDER BY p.ord
$$;
COMMENT ON FUNCTION sessionq.list_session_views(text, boolean, text, text, uuid, integer, text) IS
  'list_sessions answering only what ListSessions shows of each row, as get_session_views'' columns: (position on the page from 1, id, creator, revision, agent, state, operation, name, created and updated in microseconds since the epoch, failure reason and message, quiescence failure), in id order after p_after. The same rows as list_sessions with the same arguments (both read sessionq.session_page).';
