-- Upgrade 0017_fleet_search: the fleet's search and count over what the caller may read, and a
-- selective label search read from indexes of the pairs and the keys.
--
-- Applied by its revision only, to a database whose schema was installed before it; a database
-- installed from schema/ at or after it has all of this already. Frozen: a later change to these
-- statements is a later upgrade, and the canonical text lives in schema/. Every statement is
-- idempotent.
--
-- session_filter_sql, search_sessions and count_sessions take the caller's share token hash (a
-- non-administrator's search covers its own Sessions and the one its share grants: get_session's
-- rule); their old signatures are dropped, and start_bulk_action and bulk_step call the new ones.
-- The label index sessions_labels_idx (jsonb_ops) is replaced by sessions_label_pairs_idx
-- (jsonb_path_ops) and sessions_label_keys_idx (label_keys), both of labelled live Sessions only;
-- search_session_views answers SearchSessions' page as columns. The two indexes are built in the
-- migration's transaction, which blocks writes to sessions meanwhile (about 6 s for a million
-- labelled Sessions on the development machine).

CREATE OR REPLACE FUNCTION sessionq.label_keys(p_labels jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT ARRAY(SELECT jsonb_object_keys(p_labels))
$$;
COMMENT ON FUNCTION sessionq.label_keys(jsonb) IS
  'The keys of a label map, as an array: what sessions_label_keys_idx indexes, so that an existence requirement (a selector''s key alone) reads an index.';

DROP INDEX IF EXISTS sessionq.sessions_labels_idx;
CREATE INDEX IF NOT EXISTS sessions_label_pairs_idx ON sessionq.sessions USING gin (labels jsonb_path_ops)
  WHERE state <> 'DELETED' AND labels <> '{}'::jsonb;
CREATE INDEX IF NOT EXISTS sessions_label_keys_idx ON sessionq.sessions USING gin (sessionq.label_keys(labels))
  WHERE state <> 'DELETED' AND labels <> '{}'::jsonb;
COMMENT ON COLUMN sessionq.sessions.labels IS '[audit] Labels: a JSON object of Kubernetes-style keys and string values (sessionq.check_labels: at most 32, 4096 bytes), set at creation or by the owner or a READ_WRITE share (set_session_labels), copied by a fork. Visible to every reader of the Session: never secrets. Searched through sessions_label_pairs_idx (equality, set membership) and sessions_label_keys_idx (existence).';

DROP FUNCTION IF EXISTS sessionq.search_sessions(text, boolean, jsonb, uuid, integer);
DROP FUNCTION IF EXISTS sessionq.count_sessions(text, boolean, jsonb);
DROP FUNCTION IF EXISTS sessionq.session_filter_sql(text, boolean, jsonb);

CREATE OR REPLACE FUNCTION sessionq.session_filter_sql(
  p_caller text, p_share_hash text, p_all_creators boolean, p_filter jsonb
) RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_parts text[] := ARRAY['t.kind = ''session''', 't.state <> ''DELETED'''];
  v_shared uuid[];
  v_req jsonb;
  v_key text;
  v_terms text[];
  v_value text;
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
  IF EXISTS (SELECT FROM jsonb_array_elements(coalesce(f -> 'selector', '[]')) r WHERE r ->> 'op' IN ('in', 'exists')) THEN
    -- implied by the requirement, said for the planner: the label indexes hold labelled Sessions only
    v_parts := v_parts || 't.labels <> ''{}''::jsonb'::text;
  END IF;
  FOR v_req IN SELECT r FROM jsonb_array_elements(coalesce(f -> 'selector', '[]')) r LOOP
    v_key := v_req ->> 'key';
    v_terms := ARRAY(SELECT format('t.labels @> %L::jsonb', jsonb_build_object(v_key, x)::text)
                       FROM jsonb_array_elements_text(coalesce(v_req -> 'values', '[]')) x);
    v_value := CASE WHEN cardinality(v_terms) = 0 THEN 'false' ELSE '(' || array_to_string(v_terms, ' OR ') || ')' END;
    v_parts := v_parts || CASE v_req ->> 'op'
      WHEN 'in' THEN v_value
      WHEN 'notin' THEN 'NOT ' || v_value
      WHEN 'exists' THEN format('sessionq.label_keys(t.labels) @> %L::text[]', ARRAY[v_key])
      WHEN 'notexists' THEN format('NOT t.labels ? %L', v_key)
      ELSE 'false'
    END;
  END LOOP;
  RETURN array_to_string(v_parts, ' AND ');
END $$;
COMMENT ON FUNCTION sessionq.session_filter_sql(text, text, boolean, jsonb) IS
  'The WHERE condition over sessions t of a fleet filter (every value quoted as a literal, so each search is planned with its values and a selective filter reads an index): live Sessions p_caller may read by get_session''s rule (its own, and the one an unexpired share with token hash p_share_hash grants; NULL: its own only) or, p_all_creators, everyone''s; and the filter''s {creator, namespace, agent, states[], actor_states[] (actor_state), created_after/before, active_after/before (the idle clock), selector[] of {key, op: in|notin|exists|notexists, values[]}} (equality is in with one value; notin also matches a Session without the key, as in Kubernetes).';

CREATE OR REPLACE FUNCTION sessionq.search_sessions(
  p_caller text, p_share_hash text, p_all_creators boolean, p_filter jsonb, p_after uuid, p_limit integer
) RETURNS SETOF jsonb LANGUAGE plpgsql STABLE AS $$
BEGIN
  -- the page's ids first, then the rows of those ids: the rows are turned into JSON for the page
  -- only (in one query, every match would be, before the sort picks the page)
  RETURN QUERY EXECUTE format(
    'SELECT to_jsonb(s) FROM (SELECT t.id FROM sessionq.sessions t WHERE %s AND t.id > %L::uuid ORDER BY t.id LIMIT %s) p'
    ' JOIN sessionq.sessions s ON s.id = p.id ORDER BY s.id',
    sessionq.session_filter_sql(p_caller, p_share_hash, p_all_creators, p_filter),
    coalesce(p_after, '00000000-0000-0000-0000-000000000000'::uuid), greatest(p_limit, 0));
END $$;
COMMENT ON FUNCTION sessionq.search_sessions(text, text, boolean, jsonb, uuid, integer) IS
  'A page of the Sessions a fleet filter matches among those the caller may read (session_filter_sql: its own and the one its share token grants, or everyone''s), in id order after p_after: ListSessions'' cursor rule (callers ask limit+1 rows to know whether a next page exists). Reads change nothing.';

CREATE OR REPLACE FUNCTION sessionq.search_session_views(
  p_caller text, p_share_hash text, p_all_creators boolean, p_filter jsonb, p_after uuid, p_limit integer
) RETURNS TABLE (
  ord integer, id text, creator text, revision_id text, agent_namespace text, agent_name text, state text,
  operation text, name text, created_us bigint, updated_us bigint, failure_reason text, failure_message text,
  quiescence_failure jsonb, labels jsonb, idle_ttl double precision, actor_state text, active_us bigint
) LANGUAGE plpgsql STABLE AS $$
BEGIN
  -- the page's ids first (a top-N sort of the matches' ids), then what SearchSessions shows of
  -- those rows only, as plain columns: no row is turned into JSON
  RETURN QUERY EXECUTE format(
    'SELECT (row_number() OVER (ORDER BY s.id))::integer, s.id::text, s.creator, s.revision_id::text,'
    ' s.agent_namespace, s.agent_name, s.state, s.operation, s.name,'
    ' (extract(epoch FROM s.created_at) * 1000000)::bigint, (extract(epoch FROM s.updated_at) * 1000000)::bigint,'
    ' s.failure_reason, s.failure_message, s.quiescence_failure, s.labels, s.idle_ttl, sessionq.actor_state(s),'
    ' (extract(epoch FROM greatest(s.created_at, s.last_event_at)) * 1000000)::bigint'
    ' FROM (SELECT t.id FROM sessionq.sessions t WHERE %s AND t.id > %L::uuid ORDER BY t.id LIMIT %s) p'
    ' JOIN sessionq.sessions s ON s.id = p.id ORDER BY s.id',
    sessionq.session_filter_sql(p_caller, p_share_hash, p_all_creators, p_filter),
    coalesce(p_after, '00000000-0000-0000-0000-000000000000'::uuid), greatest(p_limit, 0));
END $$;
COMMENT ON FUNCTION sessionq.search_session_views(text, text, boolean, jsonb, uuid, integer) IS
  'search_sessions answering only what SearchSessions shows of each row, as columns (get_session_views'' and the fleet''s: labels, own idle TTL, actor_state, the idle clock in microseconds since the epoch), with its position on the page from 1: the same rows as search_sessions with the same arguments. Reads change nothing.';

CREATE OR REPLACE FUNCTION sessionq.count_sessions(
  p_caller text, p_share_hash text, p_all_creators boolean, p_filter jsonb
) RETURNS bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_count bigint;
BEGIN
  EXECUTE format('SELECT count(*) FROM sessionq.sessions t WHERE %s',
                 sessionq.session_filter_sql(p_caller, p_share_hash, p_all_creators, p_filter)) INTO v_count;
  RETURN v_count;
END $$;
COMMENT ON FUNCTION sessionq.count_sessions(text, text, boolean, jsonb) IS
  'How many Sessions the fleet filter matches: the same condition as search_sessions (session_filter_sql).';

CREATE OR REPLACE FUNCTION sessionq.start_bulk_action(
  p_caller text, p_request_id text, p_all_creators boolean, p_kind text, p_filter jsonb, p_idle_ttl double precision
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  b sessionq.bulk_actions;
BEGIN
  IF p_kind NOT IN ('SUSPEND', 'RESUME', 'DELETE', 'SET_IDLE_TTL') THEN
    PERFORM sessionq.fail('SQ400', format('unknown bulk action %s', sessionq.clip(p_kind, 40)));
  END IF;
  IF p_request_id IS NULL OR length(p_request_id) NOT BETWEEN 1 AND 128 THEN
    PERFORM sessionq.fail('SQ400', 'request_id must be 1 to 128 characters');
  END IF;
  SELECT * INTO b FROM sessionq.bulk_actions a WHERE a.caller = p_caller AND a.request_id = p_request_id;
  IF FOUND THEN
    IF b.kind <> p_kind OR b.filter <> coalesce(p_filter, '{}') OR b.all_creators <> p_all_creators
       OR b.idle_ttl IS DISTINCT FROM p_idle_ttl THEN
      PERFORM sessionq.fail('SQ422', format('request_id %s was already used for bulk action %s with different parameters',
                                            sessionq.clip(p_request_id), b.id));
    END IF;
    RETURN to_jsonb(b);
  END IF;
  INSERT INTO sessionq.bulk_actions (caller, request_id, kind, filter, all_creators, idle_ttl, upto, matched)
  VALUES (p_caller, p_request_id, p_kind, coalesce(p_filter, '{}'), p_all_creators, p_idle_ttl, sessionq.uuid_v7(),
          sessionq.count_sessions(p_caller, NULL, p_all_creators, p_filter))
  ON CONFLICT ON CONSTRAINT bulk_actions_request_unique DO NOTHING
  RETURNING * INTO b;
  IF NOT FOUND THEN  -- a concurrent twin won
    SELECT * INTO b FROM sessionq.bulk_actions a WHERE a.caller = p_caller AND a.request_id = p_request_id;
    RETURN to_jsonb(b);
  END IF;
  PERFORM sessionq.defer('run_bulk_action', b.id::text, jsonb_build_object('bulk_id', b.id));
  RETURN to_jsonb(b);
END $$;
COMMENT ON FUNCTION sessionq.start_bulk_action(text, text, boolean, text, jsonb, double precision) IS
  'Start a bulk action (SUSPEND, RESUME, DELETE or SET_IDLE_TTL) over the Sessions a fleet filter matches now (those created later are left alone: upto), and queue its run_bulk_action job. The API has checked that all_creators is an administrator''s and the TTL within bounds. A retry with the same request id returns the action; other parameters: ALREADY_EXISTS.';

CREATE OR REPLACE FUNCTION sessionq.bulk_step(p_bulk uuid, p_limit integer) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  b sessionq.bulk_actions;
  r record;
  v_rows integer := 0;
  v_outcome text;
  v_state text;
  v_message text;
  v_admitted bigint := 0;
  v_unchanged bigint := 0;
  v_refused bigint := 0;
BEGIN
  SELECT * INTO b FROM sessionq.bulk_actions a WHERE a.id = p_bulk FOR UPDATE;
  IF NOT FOUND OR b.state = 'DONE' THEN
    RETURN to_jsonb(b);
  END IF;
  FOR r IN EXECUTE format(
    'SELECT t.id, t.creator FROM sessionq.sessions t WHERE %s AND t.id > %L::uuid AND t.id <= %L::uuid ORDER BY t.id LIMIT %s',
    sessionq.session_filter_sql(b.caller, NULL, b.all_creators, b.filter),
    coalesce(b.position, '00000000-0000-0000-0000-000000000000'::uuid), b.upto, p_limit)
  LOOP
    v_rows := v_rows + 1;
    BEGIN
      -- the Session's own admission, as its owner would call it (the caller is the owner, or an
      -- administrator acting for every creator)
      IF b.kind = 'SET_IDLE_TTL' THEN
        PERFORM sessionq.set_session_idle_ttl(r.id, r.creator, NULL, b.idle_ttl);
        v_outcome := 'admitted';
      ELSE
        SELECT a.outcome INTO v_outcome FROM sessionq.admit_operation(r.id, r.creator, NULL, b.kind) a;
      END IF;
      IF v_outcome IN ('admitted', 'joined') THEN
        v_admitted := v_admitted + 1;
      ELSE
        v_unchanged := v_unchanged + 1;
      END IF;
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
      IF v_state = 'SQ404' THEN  -- deleted (or gone) since the page was read
        v_unchanged := v_unchanged + 1;
      ELSIF v_state LIKE 'SQ%' THEN
        v_refused := v_refused + 1;
        INSERT INTO sessionq.bulk_action_items (bulk_id, session_id, code, message)
        VALUES (b.id, r.id, v_state, sessionq.clip(v_message, 500))
        ON CONFLICT (bulk_id, session_id) DO UPDATE SET code = excluded.code, message = excluded.message;
      ELSE
        RAISE;  -- a database failure (deadlock, serialization): the job retries the page
      END IF;
    END;
    b.position := r.id;
  END LOOP;
  UPDATE sessionq.bulk_actions a
     SET position = b.position,
         processed = a.processed + v_rows, admitted = a.admitted + v_admitted,
         unchanged = a.unchanged + v_unchanged, refused = a.refused + v_refused,
         state = CASE WHEN v_rows < p_limit THEN 'DONE' ELSE 'RUNNING' END,
         finished_at = CASE WHEN v_rows < p_limit THEN clock_timestamp() END,
         updated_at = clock_timestamp()
   WHERE a.id = b.id
  RETURNING * INTO b;
  RETURN to_jsonb(b);
END $$;
COMMENT ON FUNCTION sessionq.bulk_step(uuid, integer) IS
  'Act on the next page (p_limit) of a RUNNING bulk action''s Sessions, in one transaction: each through its own admission (admit_operation or set_session_idle_ttl, as its owner), so a busy Session or one with another operation pending is refused and listed in bulk_action_items, never forced; a Session gone since is unchanged. A short page ends the action (DONE). Returns the action.';
