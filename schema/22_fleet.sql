-- The fleet: labels on Sessions, an idle TTL per Session, search and count by filter, and bulk
-- actions by filter (sessionq.v1.FleetService, docs/fleet.md).
--
-- Labels are a small map of Kubernetes-style keys and values on the Session row (sessions.labels),
-- visible to everyone who can read the Session: never secrets. They are set at creation
-- (admit_create_labeled, in the admission's transaction) and changed by the owner or a READ_WRITE
-- share (set_session_labels); a fork copies its source Session's (admit_fork). A Session's own idle
-- TTL (sessions.idle_ttl) replaces sessions.idleTtl for it; the idle sweep (50_expiry.sql) honours it.
-- Search and count read one filter (session_filter_sql) over the Sessions the caller may read (its
-- own and the one its share token grants: get_session's rule; everyone's for an administrator) in
-- id order with ListSessions' cursor rule (after an id). A bulk action acts on the caller's own
-- Sessions (or everyone's, for an administrator): a share grants no lifecycle operation. It admits
-- one ordinary operation per matching Session (admit_operation: its rules, a busy Session is
-- reported, never forced), a page per transaction, driven by the run_bulk_action job.

ALTER TABLE sessionq.sessions ADD COLUMN labels jsonb NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE sessionq.sessions ADD COLUMN idle_ttl double precision CHECK (idle_ttl >= 0);
COMMENT ON COLUMN sessionq.sessions.labels IS '[audit] Labels: a JSON object of Kubernetes-style keys and string values (sessionq.check_labels: at most 32, 4096 bytes), set at creation or by the owner or a READ_WRITE share (set_session_labels), copied by a fork. Visible to every reader of the Session: never secrets. Searched through label_terms'' sessions_label_terms_idx (equality, set membership, existence).';
COMMENT ON COLUMN sessionq.sessions.idle_ttl IS '[lifecycle] The Session''s own idle TTL in seconds (NULL: sessions.idleTtl; 0: never expires), within the operator''s bounds (sessions.maxIdleTtl, sessions.allowNoIdleTtl, checked by the API). The idle sweep (50_expiry.sql) expires the Session at its idle clock plus this.';

-- label_terms is PL/pgSQL so that its plan is kept: PostgreSQL before 18 plans an SQL function's
-- body on every row of a generated column (3x its time, on every labelled creation)
CREATE OR REPLACE FUNCTION sessionq.label_terms(p_labels jsonb) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN ARRAY(SELECT t.term FROM jsonb_each(p_labels) AS e,
                      LATERAL (VALUES (jsonb_build_object(e.key, e.value)::text), (e.key)) AS t (term));
END $$;
COMMENT ON FUNCTION sessionq.label_terms(jsonb) IS
  'The search terms of a label map: each pair as the text of a one-pair JSON object ({"team": "billing"}) and each key as itself (team). What sessions.label_terms holds, so that the array overlaps a selector''s pairs exactly when the map contains one of them (labels @> {"team": "billing"}) and contains a key exactly when the map has it. A pair starts with {, a key (label_key_valid) with an alphanumeric: the two never collide.';

-- the labels' terms, kept with the row (computed when the labels are written - PostgreSQL
-- recomputes a stored column only when an update sets a column it reads -, NULL without labels):
-- what equality, set membership and existence read. Its GIN index answers them exactly, so a page
-- of matches reads only the id, the kind and the creator of each match's row, where an index of
-- the jsonb (jsonb_path_ops, which hashes its entries) has every match's labels rechecked, the last
-- columns of a wide row; a filter that reads the table in id order instead compares this column,
-- no function call a row.
ALTER TABLE sessionq.sessions ADD COLUMN label_terms text[]
  GENERATED ALWAYS AS (CASE WHEN labels <> '{}'::jsonb THEN sessionq.label_terms(labels) END) STORED;
COMMENT ON COLUMN sessionq.sessions.label_terms IS '[audit] The labels'' search terms, their pairs and their keys (sessionq.label_terms; NULL without labels), kept by PostgreSQL from labels: what a selector''s equality and set membership (t.label_terms && pairs) and existence (t.label_terms @> {key}) compare (session_filter_sql), through sessions_label_terms_idx.';

-- label search, one GIN index of the live labelled Sessions (a Session without labels has no
-- entry, so its creation writes none): one entry a pair, so `team=rare` reads the posting list of
-- that pair alone and an array's containment and overlap need no recheck of the row, and one a
-- key (existence). One index, not one for the pairs and one for the keys: a labelled Session's
-- insert, and the update that changes its state (not HOT: state is in the indexes' predicates),
-- each write one GIN insert, not two. Never changed by claims or progress writes, so those stay
-- HOT updates.
CREATE INDEX sessions_label_terms_idx ON sessionq.sessions USING gin (label_terms)
  WHERE state <> 'DELETED' AND label_terms IS NOT NULL;
-- search by Agent: one Agent's live Sessions in id order
CREATE INDEX sessions_agent_idx ON sessionq.sessions (agent_namespace, agent_name, id) WHERE state <> 'DELETED';

-- label rules ------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION sessionq.label_key_valid(p_key text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT p_key IS NOT NULL AND CASE
    WHEN position('/' IN p_key) > 0 THEN
      split_part(p_key, '/', 1) ~ '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'
      AND length(split_part(p_key, '/', 1)) <= 253
      AND array_length(string_to_array(p_key, '/'), 1) = 2
      AND split_part(p_key, '/', 2) ~ '^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$'
      AND length(split_part(p_key, '/', 2)) <= 63
    ELSE p_key ~ '^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$' AND length(p_key) <= 63
  END
$$;
COMMENT ON FUNCTION sessionq.label_key_valid(text) IS
  'Whether p_key is a Kubernetes label key: an optional DNS-subdomain prefix (at most 253 characters) and /, then a name of at most 63 characters: alphanumerics, -, _ and ., starting and ending alphanumeric.';

CREATE OR REPLACE FUNCTION sessionq.label_value_valid(p_value text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT p_value IS NOT NULL AND (p_value = '' OR p_value ~ '^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$'
                                  AND length(p_value) <= 63)
$$;
COMMENT ON FUNCTION sessionq.label_value_valid(text) IS
  'Whether p_value is a Kubernetes label value: empty, or at most 63 alphanumerics, -, _ and ., starting and ending alphanumeric.';

CREATE OR REPLACE FUNCTION sessionq.check_labels(p_labels jsonb) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_key text;
  v_value jsonb;
  v_count integer := 0;
BEGIN
  IF p_labels IS NULL THEN
    RETURN '{}'::jsonb;
  END IF;
  IF jsonb_typeof(p_labels) <> 'object' THEN
    PERFORM sessionq.fail('SQ400', 'labels must be a map of strings');
  END IF;
  FOR v_key, v_value IN SELECT e.key, e.value FROM jsonb_each(p_labels) e LOOP
    v_count := v_count + 1;
    IF v_count > 32 THEN
      PERFORM sessionq.fail('SQ400', 'a session has at most 32 labels');
    END IF;
    IF NOT sessionq.label_key_valid(v_key) THEN
      PERFORM sessionq.fail('SQ400', format(
        'label key %s is not valid: [prefix/]name, name at most 63 characters of [A-Za-z0-9-_.], alphanumeric at both ends',
        sessionq.clip(v_key, 80)));
    END IF;
    IF jsonb_typeof(v_value) <> 'string' OR NOT sessionq.label_value_valid(v_value #>> '{}') THEN
      PERFORM sessionq.fail('SQ400', format(
        'label %s: the value must be empty or at most 63 characters of [A-Za-z0-9-_.], alphanumeric at both ends',
        sessionq.clip(v_key, 80)));
    END IF;
  END LOOP;
  IF octet_length(p_labels::text) > 4096 THEN
    PERFORM sessionq.fail('SQ400', 'the labels of a session take at most 4096 bytes');
  END IF;
  RETURN p_labels;
END $$;
COMMENT ON FUNCTION sessionq.check_labels(jsonb) IS
  'Check a label map (Kubernetes key and value rules, at most 32 labels, at most 4096 bytes as JSON) and return it ({} for NULL); INVALID_ARGUMENT with a short message naming the first bad key otherwise.';

-- creation with labels and an idle TTL ---------------------------------------------------------------

CREATE OR REPLACE FUNCTION sessionq.admit_create_labeled(
  p_caller text, p_request_id text, p_namespace text, p_agent text, p_name text, p_labels jsonb,
  p_idle_ttl double precision
) RETURNS TABLE (outcome text, generation uuid, session jsonb)
LANGUAGE plpgsql AS $$
DECLARE
  v_labels jsonb := sessionq.check_labels(p_labels);
  v_fingerprint text := p_namespace || '/' || p_agent || '|' || coalesce(p_name, '');
BEGIN
  IF p_idle_ttl IS NOT NULL AND (p_idle_ttl < 0 OR p_idle_ttl = 'infinity') THEN
    PERFORM sessionq.fail('SQ400', 'idle_ttl must be a finite duration, 0 or more');
  END IF;
  -- without labels or a TTL the request is CreateSession's: the same fingerprint, so either call
  -- retries the other
  IF v_labels <> '{}'::jsonb OR p_idle_ttl IS NOT NULL THEN
    v_fingerprint := v_fingerprint || '|' || v_labels::text || '|' || coalesce(p_idle_ttl::text, '');
  END IF;
  -- written by the insert itself: nobody ever sees the Session without them
  RETURN QUERY SELECT * FROM sessionq.admit_creation(p_caller, 'create', p_request_id, p_namespace, p_agent, p_name,
                                                     v_fingerprint, NULL, v_labels, p_idle_ttl);
END $$;
COMMENT ON FUNCTION sessionq.admit_create_labeled(text, text, text, text, text, jsonb, double precision) IS
  'admit_create with labels (check_labels) and an own idle TTL in seconds (NULL: sessions.idleTtl; 0: never; the API checks the operator''s bounds), written by the admission''s insert (admit_creation). The request''s fingerprint includes them when given, so a retry with other labels or TTL is ALREADY_EXISTS; without them it is admit_create''s. outcome: admitted, joined or existing.';

-- changes ------------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION sessionq.set_session_labels(
  p_session uuid, p_caller text, p_share_hash text, p_set jsonb, p_remove text[], p_replace boolean DEFAULT false
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
  v_labels jsonb;
BEGIN
  PERFORM sessionq.check_labels(p_set);
  v := sessionq.visible_session(p_session, p_caller, p_share_hash, 'write');
  v_labels := CASE WHEN p_replace THEN '{}'::jsonb ELSE v.labels END || coalesce(p_set, '{}'::jsonb);
  v_labels := v_labels - coalesce(p_remove, ARRAY[]::text[]);
  v_labels := sessionq.check_labels(v_labels);
  IF v_labels IS DISTINCT FROM v.labels THEN
    UPDATE sessionq.sessions s SET labels = v_labels, updated_at = clock_timestamp()
     WHERE s.id = v.id RETURNING * INTO v;
  END IF;
  RETURN to_jsonb(v);
END $$;
COMMENT ON FUNCTION sessionq.set_session_labels(uuid, text, text, jsonb, text[], boolean) IS
  'Change a Session''s labels: set p_set''s keys (p_replace: the labels become exactly p_set), then remove the keys p_remove, checked by check_labels. The owner or a READ_WRITE share; NOT_FOUND as get_session, PERMISSION_DENIED for a READ_ONLY share. Does not touch the idle clock. Returns the Session.';

CREATE OR REPLACE FUNCTION sessionq.set_session_idle_ttl(
  p_session uuid, p_caller text, p_share_hash text, p_idle_ttl double precision
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
BEGIN
  IF p_idle_ttl IS NOT NULL AND (p_idle_ttl < 0 OR p_idle_ttl = 'infinity') THEN
    PERFORM sessionq.fail('SQ400', 'idle_ttl must be a finite duration, 0 or more');
  END IF;
  v := sessionq.visible_session(p_session, p_caller, p_share_hash, 'write');
  IF v.state = 'DELETING' THEN
    PERFORM sessionq.fail('SQ412', format('session %s is being deleted', v.id));
  END IF;
  IF v.idle_ttl IS DISTINCT FROM p_idle_ttl THEN
    UPDATE sessionq.sessions s SET idle_ttl = p_idle_ttl, updated_at = clock_timestamp()
     WHERE s.id = v.id RETURNING * INTO v;
  END IF;
  RETURN to_jsonb(v);
END $$;
COMMENT ON FUNCTION sessionq.set_session_idle_ttl(uuid, text, text, double precision) IS
  'Set a Session''s own idle TTL in seconds (NULL: back to sessions.idleTtl; 0: never; the API checks the operator''s bounds) under its row lock, so the idle sweep''s recheck (expire_session) sees the old or the new one, never half. The owner or a READ_WRITE share; a Session being deleted: FAILED_PRECONDITION. Does not touch the idle clock. Returns the Session.';

-- search -------------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION sessionq.actor_state(p_session sessionq.sessions) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT CASE
    WHEN p_session.state = 'SUSPENDED' THEN 'suspended'
    WHEN p_session.state <> 'READY' THEN NULL
    WHEN p_session.dispatch_id IS NOT NULL OR p_session.active_task_id IS NOT NULL
         OR p_session.unsettled_task_id IS NOT NULL OR p_session.idle_boundary_id IS NOT NULL THEN 'running'
    ELSE 'suspended'
  END
$$;
COMMENT ON FUNCTION sessionq.actor_state(sessionq.sessions) IS
  'The state of a Session''s Actor as the row knows it: running (READY with a turn admitted, running or settling, or an idle boundary not yet quiesced), suspended (SUSPENDED, or READY and quiesced between turns), NULL while the Session is created or deleted. paused is never answered: sessionq quiesces by suspending.';

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
  FOR v_req IN SELECT r FROM jsonb_array_elements(coalesce(f -> 'selector', '[]')) r LOOP
    v_key := v_req ->> 'key';
    v_pairs := ARRAY(SELECT jsonb_build_object(v_key, x)::text
                       FROM jsonb_array_elements_text(coalesce(v_req -> 'values', '[]')) x);
    v_parts := v_parts || CASE
      WHEN v_req ->> 'op' IN ('in', 'notin') AND cardinality(v_pairs) = 0 THEN
        CASE v_req ->> 'op' WHEN 'in' THEN 'false' ELSE 'true' END
      ELSE CASE v_req ->> 'op'
        -- in and exists: the Session has one of the pairs, or the key (label_terms, their index:
        -- either operator implies label_terms IS NOT NULL, the index's predicate); notin compares
        -- the map itself, since a Session without labels (label_terms NULL) has none of them
        WHEN 'in' THEN format('t.label_terms && %L::text[]', v_pairs)
        WHEN 'notin' THEN 'NOT (' || (SELECT string_agg(format('t.labels @> %L::jsonb', x), ' OR ')
                                        FROM unnest(v_pairs) x) || ')'
        -- (a key that breaks the label rules is no label's: it must not match a pair's term)
        WHEN 'exists' THEN CASE WHEN sessionq.label_key_valid(v_key)
                                THEN format('t.label_terms @> %L::text[]', ARRAY[v_key]) ELSE 'false' END
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

-- bulk actions -------------------------------------------------------------------------------------

CREATE TABLE sessionq.bulk_actions (
  id           uuid PRIMARY KEY DEFAULT sessionq.uuid_v7(),
  caller       text NOT NULL,
  request_id   text NOT NULL CHECK (length(request_id) BETWEEN 1 AND 128),
  kind         text NOT NULL CHECK (kind IN ('SUSPEND', 'RESUME', 'DELETE', 'SET_IDLE_TTL')),
  filter       jsonb NOT NULL,
  all_creators boolean NOT NULL,
  idle_ttl     double precision CHECK (idle_ttl >= 0),
  upto         uuid NOT NULL,
  position     uuid,
  state        text NOT NULL DEFAULT 'RUNNING' CHECK (state IN ('RUNNING', 'DONE')),
  matched      bigint NOT NULL,
  processed    bigint NOT NULL DEFAULT 0,
  admitted     bigint NOT NULL DEFAULT 0,
  unchanged    bigint NOT NULL DEFAULT 0,
  refused      bigint NOT NULL DEFAULT 0,
  created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
  finished_at  timestamptz,
  CONSTRAINT bulk_actions_request_unique UNIQUE (caller, request_id)
);
COMMENT ON TABLE sessionq.bulk_actions IS
  'A bulk action by filter (FleetService.StartBulkAction): one ordinary operation per matching Session, admitted page by page by the run_bulk_action job (bulk_step) through the Sessions'' own admission rules. Counters show its progress; refused Sessions are listed in bulk_action_items.';
COMMENT ON COLUMN sessionq.bulk_actions.caller IS 'Who started it (an administrator acts on Sessions of every creator with all_creators).';
COMMENT ON COLUMN sessionq.bulk_actions.request_id IS 'The caller''s idempotency key: a retry returns the same action.';
COMMENT ON COLUMN sessionq.bulk_actions.kind IS 'SUSPEND, RESUME, DELETE (admit_operation) or SET_IDLE_TTL (set_session_idle_ttl).';
COMMENT ON COLUMN sessionq.bulk_actions.filter IS 'The fleet filter (session_filter_sql) the Sessions are matched by, at each page.';
COMMENT ON COLUMN sessionq.bulk_actions.all_creators IS 'Whether it acts on every creator''s Sessions (administrators only) or the caller''s.';
COMMENT ON COLUMN sessionq.bulk_actions.idle_ttl IS 'SET_IDLE_TTL: the TTL to set in seconds (NULL: back to sessions.idleTtl; 0: never).';
COMMENT ON COLUMN sessionq.bulk_actions.upto IS 'Only Sessions created before the action started (ids up to this UUIDv7) are acted on.';
COMMENT ON COLUMN sessionq.bulk_actions.position IS 'The last Session id acted on: the next page starts after it (NULL: from the start).';
COMMENT ON COLUMN sessionq.bulk_actions.state IS 'RUNNING while pages remain, DONE after the last.';
COMMENT ON COLUMN sessionq.bulk_actions.matched IS 'How many Sessions the filter matched when the action started.';
COMMENT ON COLUMN sessionq.bulk_actions.processed IS 'Sessions acted on so far (admitted + unchanged + refused).';
COMMENT ON COLUMN sessionq.bulk_actions.admitted IS 'Sessions whose operation was admitted (or joined: the same operation was pending), or whose TTL was set.';
COMMENT ON COLUMN sessionq.bulk_actions.unchanged IS 'Sessions already at the target (noop), or gone before their turn came.';
COMMENT ON COLUMN sessionq.bulk_actions.refused IS 'Sessions the admission refused (busy, another operation pending, a wrong state): listed in bulk_action_items.';
COMMENT ON COLUMN sessionq.bulk_actions.created_at IS 'When it started.';
COMMENT ON COLUMN sessionq.bulk_actions.updated_at IS 'When its last page was done.';
COMMENT ON COLUMN sessionq.bulk_actions.finished_at IS 'When it became DONE.';

CREATE TABLE sessionq.bulk_action_items (
  bulk_id     uuid NOT NULL REFERENCES sessionq.bulk_actions (id) ON DELETE CASCADE,
  session_id  uuid NOT NULL,
  code        text NOT NULL,
  message     text NOT NULL,
  PRIMARY KEY (bulk_id, session_id)
);
COMMENT ON TABLE sessionq.bulk_action_items IS
  'The Sessions a bulk action reported rather than forced: what the admission answered (a busy Session, another operation pending, a wrong state).';
COMMENT ON COLUMN sessionq.bulk_action_items.code IS 'The SQLSTATE the admission raised (SQ409 aborted: busy or another operation pending; SQ412 failed precondition: the wrong state).';
COMMENT ON COLUMN sessionq.bulk_action_items.message IS 'The admission''s message.';

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

CREATE OR REPLACE FUNCTION sessionq.get_bulk_action(p_bulk uuid, p_caller text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
  b sessionq.bulk_actions;
BEGIN
  SELECT * INTO b FROM sessionq.bulk_actions a WHERE a.id = p_bulk AND a.caller = p_caller;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ404', format('bulk action %s not found', p_bulk));
  END IF;
  RETURN to_jsonb(b);
END $$;
COMMENT ON FUNCTION sessionq.get_bulk_action(uuid, text) IS 'A bulk action of the caller (another''s: NOT_FOUND).';

CREATE OR REPLACE FUNCTION sessionq.list_bulk_action_items(p_bulk uuid, p_caller text, p_after uuid, p_limit integer)
RETURNS SETOF jsonb LANGUAGE plpgsql STABLE AS $$
BEGIN
  PERFORM sessionq.get_bulk_action(p_bulk, p_caller);
  RETURN QUERY SELECT to_jsonb(i) FROM sessionq.bulk_action_items i
   WHERE i.bulk_id = p_bulk AND i.session_id > coalesce(p_after, '00000000-0000-0000-0000-000000000000'::uuid)
   ORDER BY i.session_id LIMIT p_limit;
END $$;
COMMENT ON FUNCTION sessionq.list_bulk_action_items(uuid, text, uuid, integer) IS
  'The Sessions a bulk action of the caller reported (refused by their admission), in Session id order after p_after.';
