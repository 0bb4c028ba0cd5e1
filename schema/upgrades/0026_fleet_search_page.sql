-- 0026_fleet_search_page: a fleet search reads its page's ids with the one statement planned with the
-- filter's values (search_session_ids), and the rows of those ids with a static statement.
CREATE OR REPLACE FUNCTION sessionq.search_session_ids(
  p_caller text, p_share_hash text, p_all_creators boolean, p_filter jsonb, p_after uuid, p_limit integer
) RETURNS uuid[] LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_ids uuid[];
BEGIN
  -- the one statement planned with the filter's values, so that a selective filter reads an index;
  -- it answers ids only (a top-N sort of the matches' ids): the rows of the page are read by the
  -- caller's static statement, which is planned once per connection, not per search
  EXECUTE format(
    'SELECT ARRAY(SELECT t.id FROM sessionq.sessions t WHERE %s AND t.id > %L::uuid ORDER BY t.id LIMIT %s)',
    sessionq.session_filter_sql(p_caller, p_share_hash, p_all_creators, p_filter),
    coalesce(p_after, '00000000-0000-0000-0000-000000000000'::uuid), greatest(p_limit, 0)) INTO v_ids;
  RETURN v_ids;
END $$;
COMMENT ON FUNCTION sessionq.search_session_ids(text, text, boolean, jsonb, uuid, integer) IS
  'The ids of a page of the Sessions a fleet filter matches among those the caller may read (session_filter_sql: its own and the one its share token grants, or everyone''s), in id order after p_after, at most p_limit: ListSessions'' cursor rule (callers ask limit+1 rows to know whether a next page exists). What search_sessions and search_session_views read the rows of. Reads change nothing.';

CREATE OR REPLACE FUNCTION sessionq.search_sessions(
  p_caller text, p_share_hash text, p_all_creators boolean, p_filter jsonb, p_after uuid, p_limit integer
) RETURNS SETOF jsonb LANGUAGE sql STABLE AS $$
  -- the page's ids first, then the rows of those ids, in the same snapshot: only the page's rows are
  -- turned into JSON
  SELECT to_jsonb(s)
    FROM unnest(sessionq.search_session_ids(p_caller, p_share_hash, p_all_creators, p_filter, p_after, p_limit))
         WITH ORDINALITY AS p (id, ord)
    JOIN sessionq.sessions s ON s.id = p.id
   ORDER BY p.ord
$$;
COMMENT ON FUNCTION sessionq.search_sessions(text, text, boolean, jsonb, uuid, integer) IS
  'A page of the Sessions a fleet filter matches among those the caller may read (session_filter_sql: its own and the one its share token grants, or everyone''s), in id order after p_after: ListSessions'' cursor rule (callers ask limit+1 rows to know whether a next page exists); the rows of search_session_ids. Reads change nothing.';

CREATE OR REPLACE FUNCTION sessionq.search_session_views(
  p_caller text, p_share_hash text, p_all_creators boolean, p_filter jsonb, p_after uuid, p_limit integer
) RETURNS TABLE (
  ord integer, id text, creator text, revision_id text, agent_namespace text, agent_name text, state text,
  operation text, name text, created_us bigint, updated_us bigint, failure_reason text, failure_message text,
  quiescence_failure jsonb, labels jsonb, idle_ttl double precision, actor_state text, active_us bigint
) LANGUAGE sql STABLE AS $$
  -- the page's ids first, then what SearchSessions shows of those rows only, as plain columns, in
  -- the same snapshot: no row is turned into JSON
  SELECT p.ord::integer, s.id::text, s.creator, s.revision_id::text, s.agent_namespace, s.agent_name, s.state,
         s.operation, s.name, (extract(epoch FROM s.created_at) * 1000000)::bigint,
         (extract(epoch FROM s.updated_at) * 1000000)::bigint, s.failure_reason, s.failure_message,
         s.quiescence_failure, s.labels, s.idle_ttl, sessionq.actor_state(s),
         (extract(epoch FROM greatest(s.created_at, s.last_event_at)) * 1000000)::bigint
    FROM unnest(sessionq.search_session_ids(p_caller, p_share_hash, p_all_creators, p_filter, p_after, p_limit))
         WITH ORDINALITY AS p (id, ord)
    JOIN sessionq.sessions s ON s.id = p.id
   ORDER BY p.ord
$$;
COMMENT ON FUNCTION sessionq.search_session_views(text, text, boolean, jsonb, uuid, integer) IS
  'search_sessions answering only what SearchSessions shows of each row, as columns (get_session_views'' and the fleet''s: labels, own idle TTL, actor_state, the idle clock in microseconds since the epoch), with its position on the page from 1: the same rows as search_sessions with the same arguments. Reads change nothing.';
