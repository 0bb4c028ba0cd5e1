-- ListSessions' pages as plain columns: the rows of sessionq.session_page (what list_sessions gives),
-- with what the API shows of each (get_session_views' columns, models.py SessionView), so a page is
-- read without JSON (db/store.py).
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
