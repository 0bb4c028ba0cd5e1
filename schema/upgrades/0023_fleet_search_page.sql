-- 0023_fleet_search_page: a fleet search's page. A label's equality and set membership compare the
-- labels' pairs kept with the row (sessions.label_pairs, sessionq.label_pairs), whose GIN index
-- answers them exactly (the jsonb_path_ops index it replaces had every match's labels rechecked);
-- the page's ids are read by the one statement planned with the filter's values
-- (search_session_ids), the rows of those ids by a fixed statement. Adding the stored column
-- rewrites sessions.
CREATE OR REPLACE FUNCTION sessionq.label_pairs(p_labels jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT ARRAY(SELECT jsonb_build_object(e.key, e.value)::text FROM jsonb_each(p_labels) AS e)
$$;
COMMENT ON FUNCTION sessionq.label_pairs(jsonb) IS
  'The pairs of a label map, each as the text of a one-pair JSON object ({"team": "billing"}): what sessions.label_pairs holds, so that the array overlaps a selector''s pairs exactly when the map contains one of them (labels @> {"team": "billing"}).';

ALTER TABLE sessionq.sessions ADD COLUMN IF NOT EXISTS label_pairs text[]
  GENERATED ALWAYS AS (CASE WHEN labels <> '{}'::jsonb THEN sessionq.label_pairs(labels) END) STORED;
COMMENT ON COLUMN sessionq.sessions.label_pairs IS '[audit] The labels'' pairs (sessionq.label_pairs; NULL without labels), kept by PostgreSQL from labels: what a selector''s equality and set membership compare (t.label_pairs && pairs, session_filter_sql), through sessions_label_pairs_idx.';

COMMENT ON COLUMN sessionq.sessions.labels IS '[audit] Labels: a JSON object of Kubernetes-style keys and string values (sessionq.check_labels: at most 32, 4096 bytes), set at creation or by the owner or a READ_WRITE share (set_session_labels), copied by a fork. Visible to every reader of the Session: never secrets. Searched through label_pairs'' sessions_label_pairs_idx (equality, set membership) and sessions_label_keys_idx (existence).';

DROP INDEX IF EXISTS sessionq.sessions_label_pairs_idx;
CREATE INDEX sessions_label_pairs_idx ON sessionq.sessions USING gin (label_pairs)
  WHERE state <> 'DELETED' AND label_pairs IS NOT NULL;

-- the new column's statistics, which the planner's estimate of a pair's overlap reads
ANALYZE sessionq.sessions;

CREATE OR REPLACE FUNCTION sessionq.session_filter_sql(
  p_caller text, p_share_hash text, p_all_creators boolean, p_filter jsonb
) RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_parts text[] := ARRAY['t.kind = ''session''', 't.state <> ''DELETED'''];
  v_shared uuid[];
  v_req jsonb;
  v_key text;
  v_pairs text[];
  f jsonb := coalesce(p_filter, '{}'::jsonb);
BEGIN
  IF NOT p_all_creators THEN
    -- get_session's rule (sessionq.access): the caller's own, and the Session an unexpired share
    -- token the caller presents grants (read or write); its ids are read first and quoted, so the
    -- condition is a range of the creator index or'ed with primary-key lookups
    v_shared := ARRAY(SELECT sh.session_id FROM sessionq.session_shares sh
                       WHERE p_share_hash IS NOT NULL AND sh.token_hash = p_share_hash
                         AND (sh.expires_at IS NULL OR sh.expires_at > clock_timestamp()));
    v_parts := v_parts || CASE WHEN cardinality(v_shared) = 0 THEN format('t.creator = %L', p_caller)
                               ELSE format('(t.creator = %L OR t.id = ANY (%L::uuid[]))', p_caller, v_shared) END;
  END IF;
  IF f ? 'creator' THEN
    v_parts := v_parts || format('t.creator = %L', f ->> 'creator');
  END IF;
  IF f ? 'namespace' THEN
    v_parts := v_parts || format('t.agent_namespace = %L', f ->> 'namespace');
  END IF;
  IF f ? 'agent' THEN
    v_parts := v_parts || format('t.agent_name = %L', f ->> 'agent');
  END IF;
  IF jsonb_array_length(coalesce(f -> 'states', '[]')) > 0 THEN
    v_parts := v_parts || format('t.state = ANY (%L::text[])',
                                 ARRAY(SELECT jsonb_array_elements_text(f -> 'states')));
  END IF;
  IF jsonb_array_length(coalesce(f -> 'actor_states', '[]')) > 0 THEN
    v_parts := v_parts || format('sessionq.actor_state(t) = ANY (%L::text[])',
                                 ARRAY(SELECT jsonb_array_elements_text(f -> 'actor_states')));
  END IF;
  IF f ? 'created_after' THEN
    v_parts := v_parts || format('t.created_at >= %L::timestamptz', f ->> 'created_after');
  END IF;
  IF f ? 'created_before' THEN
    v_parts := v_parts || format('t.created_at < %L::timestamptz', f ->> 'created_before');
  END IF;
  IF f ? 'active_after' THEN
    v_parts := v_parts || format('greatest(t.created_at, t.last_event_at) >= %L::timestamptz', f ->> 'active_after');
  END IF;
  IF f ? 'active_before' THEN
    v_parts := v_parts || format('greatest(t.created_at, t.last_event_at) < %L::timestamptz', f ->> 'active_before');
  END IF;
  IF EXISTS (SELECT FROM jsonb_array_elements(coalesce(f -> 'selector', '[]')) r WHERE r ->> 'op' = 'exists') THEN
    -- implied by the requirement, said for the planner: the keys' index holds labelled Sessions only
    v_parts := v_parts || 't.labels <> ''{}''::jsonb'::text;
  END IF;
  FOR v_req IN SELECT r FROM jsonb_array_elements(coalesce(f -> 'selector', '[]')) r LOOP
    v_key := v_req ->> 'key';
    v_pairs := ARRAY(SELECT jsonb_build_object(v_key, x)::text
                       FROM jsonb_array_elements_text(coalesce(v_req -> 'values', '[]')) x);
    v_parts := v_parts || CASE
      WHEN v_req ->> 'op' IN ('in', 'notin') AND cardinality(v_pairs) = 0 THEN
        CASE v_req ->> 'op' WHEN 'in' THEN 'false' ELSE 'true' END
      ELSE CASE v_req ->> 'op'
        -- in: the Session has one of the pairs (label_pairs, their index); notin compares the map
        -- itself, since a Session without labels (label_pairs NULL) has none of them
        WHEN 'in' THEN format('t.label_pairs && %L::text[]', v_pairs)
        WHEN 'notin' THEN 'NOT (' || (SELECT string_agg(format('t.labels @> %L::jsonb', x), ' OR ')
                                        FROM unnest(v_pairs) x) || ')'
        WHEN 'exists' THEN format('sessionq.label_keys(t.labels) @> %L::text[]', ARRAY[v_key])
        WHEN 'notexists' THEN format('NOT t.labels ? %L', v_key)
        ELSE 'false'
      END
    END;
  END LOOP;
  RETURN array_to_string(v_parts, ' AND ');
END $$;
COMMENT ON FUNCTION sessionq.session_filter_sql(text, text, boolean, jsonb) IS
  'The WHERE condition over sessions t of a fleet filter (every value quoted as a literal, so each search is planned with its values and a selective filter reads an index): live Sessions p_caller may read by get_session''s rule (its own, and the one an unexpired share with token hash p_share_hash grants; NULL: its own only) or, p_all_creators, everyone''s; and the filter''s {creator, namespace, agent, states[], actor_states[] (actor_state), created_after/before, active_after/before (the idle clock), selector[] of {key, op: in|notin|exists|notexists, values[]}} (equality is in with one value; notin also matches a Session without the key, as in Kubernetes).';

CREATE OR REPLACE FUNCTION sessionq.search_session_ids(
  p_caller text, p_share_hash text, p_all_creators boolean, p_filter jsonb, p_after uuid, p_limit integer
) RETURNS uuid[] LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_ids uuid[];
BEGIN
  -- the one statement planned with the filter's values, so that a selective filter reads an index;
  -- it answers ids only (a top-N sort of the matches' ids): the rows of the page are read by the
  -- caller's fixed statement, planned once per connection (a PL/pgSQL plan), not per search
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
) RETURNS SETOF jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_ids uuid[] := sessionq.search_session_ids(p_caller, p_share_hash, p_all_creators, p_filter, p_after, p_limit);
BEGIN
  -- the page's ids first, then the rows of those ids, in the same snapshot, by a statement planned
  -- once per connection: only the page's rows are turned into JSON
  RETURN QUERY
    SELECT to_jsonb(s)
      FROM unnest(v_ids) WITH ORDINALITY AS p (id, ord)
      JOIN sessionq.sessions s ON s.id = p.id
     ORDER BY p.ord;
END $$;
COMMENT ON FUNCTION sessionq.search_sessions(text, text, boolean, jsonb, uuid, integer) IS
  'A page of the Sessions a fleet filter matches among those the caller may read (session_filter_sql: its own and the one its share token grants, or everyone''s), in id order after p_after: ListSessions'' cursor rule (callers ask limit+1 rows to know whether a next page exists); the rows of search_session_ids. Reads change nothing.';

CREATE OR REPLACE FUNCTION sessionq.search_session_views(
  p_caller text, p_share_hash text, p_all_creators boolean, p_filter jsonb, p_after uuid, p_limit integer
) RETURNS TABLE (
  ord integer, id text, creator text, revision_id text, agent_namespace text, agent_name text, state text,
  operation text, name text, created_us bigint, updated_us bigint, failure_reason text, failure_message text,
  quiescence_failure jsonb, labels jsonb, idle_ttl double precision, actor_state text, active_us bigint
) LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
  v_ids uuid[] := sessionq.search_session_ids(p_caller, p_share_hash, p_all_creators, p_filter, p_after, p_limit);
BEGIN
  -- the page's ids first, then what SearchSessions shows of those rows only, as plain columns, in
  -- the same snapshot, by a statement planned once per connection: no row is turned into JSON
  RETURN QUERY
    SELECT p.ord::integer, s.id::text, s.creator, s.revision_id::text, s.agent_namespace, s.agent_name, s.state,
           s.operation, s.name, (extract(epoch FROM s.created_at) * 1000000)::bigint,
           (extract(epoch FROM s.updated_at) * 1000000)::bigint, s.failure_reason, s.failure_message,
           s.quiescence_failure, s.labels, s.idle_ttl, sessionq.actor_state(s),
           (extract(epoch FROM greatest(s.created_at, s.last_event_at)) * 1000000)::bigint
      FROM unnest(v_ids) WITH ORDINALITY AS p (id, ord)
      JOIN sessionq.sessions s ON s.id = p.id
     ORDER BY p.ord;
END $$;
COMMENT ON FUNCTION sessionq.search_session_views(text, text, boolean, jsonb, uuid, integer) IS
  'search_sessions answering only what SearchSessions shows of each row, as columns (get_session_views'' and the fleet''s: labels, own idle TTL, actor_state, the idle clock in microseconds since the epoch), with its position on the page from 1: the same rows as search_sessions with the same arguments. Reads change nothing.';
