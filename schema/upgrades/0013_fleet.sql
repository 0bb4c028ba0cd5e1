-- Upgrade 0013_fleet: labels, an idle TTL per Session, search and count, bulk actions, usage.
--
-- Applied by its revision only, to a database whose schema was installed before it; a database
-- installed from schema/ at or after it has all of this already. Frozen: a later change to these
-- statements is a later upgrade, and the canonical text lives in schema/. Every statement is
-- idempotent.
--
-- schema/22_fleet.sql and schema/45_usage.sql whole (columns, indexes, tables, triggers, procedures); from
-- 20_sessions.sql admit_creation (labels and own idle TTL written by its insert); from
-- 50_expiry.sql the idle clock index limited to Sessions without their own TTL, idle_deadline and
-- its index, idle_candidates, own_ttl_candidates and expire_session; from 40_checkpoints.sql
-- admit_fork (a fork copies its source's labels); from 06_jobs.sql the run_bulk_action job kind.

-- 22_fleet.sql
ALTER TABLE sessionq.sessions ADD COLUMN IF NOT EXISTS labels jsonb NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE sessionq.sessions ADD COLUMN IF NOT EXISTS idle_ttl double precision CHECK (idle_ttl >= 0);
COMMENT ON COLUMN sessionq.sessions.labels IS '[audit] Labels: a JSON object of Kubernetes-style keys and string values (sessionq.check_labels: at most 32, 4096 bytes), set at creation or by the owner or a READ_WRITE share (set_session_labels), copied by a fork. Visible to every reader of the Session: never secrets. Searched through sessions_labels_idx.';
COMMENT ON COLUMN sessionq.sessions.idle_ttl IS '[lifecycle] The Session''s own idle TTL in seconds (NULL: sessions.idleTtl; 0: never expires), within the operator''s bounds (sessions.maxIdleTtl, sessions.allowNoIdleTtl, checked by the API). The idle sweep (50_expiry.sql) expires the Session at its idle clock plus this.';
-- label search: containment (equality, set membership) and existence; never changed by claims or
-- progress writes, so those stay HOT updates
CREATE INDEX IF NOT EXISTS sessions_labels_idx ON sessionq.sessions USING gin (labels) WHERE state <> 'DELETED';
-- search by Agent: one Agent's live Sessions in id order
CREATE INDEX IF NOT EXISTS sessions_agent_idx ON sessionq.sessions (agent_namespace, agent_name, id) WHERE state <> 'DELETED';

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

CREATE OR REPLACE FUNCTION sessionq.session_filter_sql(p_caller text, p_all_creators boolean, p_filter jsonb)
RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v_parts text[] := ARRAY['t.kind = ''session''', 't.state <> ''DELETED'''];
  v_req jsonb;
  v_key text;
  v_terms text[];
  v_value text;
  f jsonb := coalesce(p_filter, '{}'::jsonb);
BEGIN
  IF NOT p_all_creators THEN
    v_parts := v_parts || format('t.creator = %L', p_caller);
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
    v_terms := ARRAY(SELECT format('t.labels @> %L::jsonb', jsonb_build_object(v_key, x)::text)
                       FROM jsonb_array_elements_text(coalesce(v_req -> 'values', '[]')) x);
    v_value := CASE WHEN cardinality(v_terms) = 0 THEN 'false' ELSE '(' || array_to_string(v_terms, ' OR ') || ')' END;
    v_parts := v_parts || CASE v_req ->> 'op'
      WHEN 'in' THEN v_value
      WHEN 'notin' THEN 'NOT ' || v_value
      WHEN 'exists' THEN format('t.labels ? %L', v_key)
      WHEN 'notexists' THEN format('NOT t.labels ? %L', v_key)
      ELSE 'false'
    END;
  END LOOP;
  RETURN array_to_string(v_parts, ' AND ');
END $$;
COMMENT ON FUNCTION sessionq.session_filter_sql(text, boolean, jsonb) IS
  'The WHERE condition over sessions t of a fleet filter (every value quoted as a literal, so each search is planned with its values and a selective filter reads an index): live Sessions of p_caller (p_all_creators: of everyone), and the filter''s {creator, namespace, agent, states[], actor_states[] (actor_state), created_after/before, active_after/before (the idle clock), selector[] of {key, op: in|notin|exists|notexists, values[]}} (equality is in with one value; notin also matches a Session without the key, as in Kubernetes).';

CREATE OR REPLACE FUNCTION sessionq.search_sessions(
  p_caller text, p_all_creators boolean, p_filter jsonb, p_after uuid, p_limit integer
) RETURNS SETOF jsonb LANGUAGE plpgsql STABLE AS $$
BEGIN
  -- the page's ids first, then the rows of those ids: the rows are turned into JSON for the page
  -- only (in one query, every match would be, before the sort picks the page)
  RETURN QUERY EXECUTE format(
    'SELECT to_jsonb(s) FROM (SELECT t.id FROM sessionq.sessions t WHERE %s AND t.id > %L::uuid ORDER BY t.id LIMIT %s) p'
    ' JOIN sessionq.sessions s ON s.id = p.id ORDER BY s.id',
    sessionq.session_filter_sql(p_caller, p_all_creators, p_filter),
    coalesce(p_after, '00000000-0000-0000-0000-000000000000'::uuid), greatest(p_limit, 0));
END $$;
COMMENT ON FUNCTION sessionq.search_sessions(text, boolean, jsonb, uuid, integer) IS
  'A page of the Sessions a fleet filter matches (session_filter_sql), in id order after p_after: ListSessions'' cursor rule (callers ask limit+1 rows to know whether a next page exists). Reads change nothing.';

CREATE OR REPLACE FUNCTION sessionq.count_sessions(p_caller text, p_all_creators boolean, p_filter jsonb)
RETURNS bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_count bigint;
BEGIN
  EXECUTE format('SELECT count(*) FROM sessionq.sessions t WHERE %s',
                 sessionq.session_filter_sql(p_caller, p_all_creators, p_filter)) INTO v_count;
  RETURN v_count;
END $$;
COMMENT ON FUNCTION sessionq.count_sessions(text, boolean, jsonb) IS
  'How many Sessions the fleet filter matches: the same condition as search_sessions (session_filter_sql).';

-- bulk actions -------------------------------------------------------------------------------------

CREATE TABLE IF NOT EXISTS sessionq.bulk_actions (
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

CREATE TABLE IF NOT EXISTS sessionq.bulk_action_items (
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
          sessionq.count_sessions(p_caller, p_all_creators, p_filter))
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
    sessionq.session_filter_sql(b.caller, b.all_creators, b.filter),
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

-- 20_sessions.sql: admit_creation takes the labels and the own idle TTL (its insert writes them)
DROP FUNCTION IF EXISTS sessionq.admit_creation(text, text, text, text, text, text, text, double precision);
CREATE OR REPLACE FUNCTION sessionq.admit_creation(
  p_caller text, p_request_kind text, p_request_id text, p_namespace text, p_agent text, p_name text,
  p_fingerprint text, p_ttl double precision DEFAULT NULL, p_labels jsonb DEFAULT '{}', p_idle_ttl double precision DEFAULT NULL
) RETURNS TABLE (outcome text, generation uuid, session jsonb)
LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
  v_agent sessionq.agents;
  v_rev sessionq.revisions;
  v_id uuid;
  v_noun text := CASE p_request_kind WHEN 'sandbox' THEN 'sandbox' ELSE 'session' END;
BEGIN
  IF p_request_id IS NULL OR length(p_request_id) NOT BETWEEN 1 AND 128 THEN
    PERFORM sessionq.fail('SQ400', 'request_id must be 1 to 128 characters');
  END IF;
  SELECT * INTO v_agent FROM sessionq.agents a WHERE a.namespace = p_namespace AND a.name = p_agent;
  IF v_agent.latest_successful_revision_id IS NOT NULL THEN
    SELECT * INTO v_rev FROM sessionq.revisions r WHERE r.id = v_agent.latest_successful_revision_id;
  END IF;
  LOOP
    -- A new request id inserts at once: the unique constraint is the arbiter, so the common path
    -- never searches the caller's other Sessions (a lookup first would, under a plan made while
    -- the table was small, scan every Session of the caller).
    IF v_rev.id IS NOT NULL THEN
      v_id := sessionq.uuid_v7();
      INSERT INTO sessionq.sessions AS s (id, creator, request_kind, request_id, request_fingerprint,
                                          agent_namespace, agent_name, revision_id, name, state, operation,
                                          operation_id, actor_atespace, actor_name, actor_template, expires_at,
                                          labels, idle_ttl)
      VALUES (v_id, p_caller, p_request_kind, p_request_id, p_fingerprint, p_namespace, p_agent, v_rev.id,
              coalesce(p_name, ''), 'CREATING', 'CREATE', sessionq.uuid_v7(), v_rev.template_atespace,
              v_noun || '-' || v_id, v_rev.template_atespace || '/' || v_rev.template_name,
              CASE WHEN p_ttl IS NOT NULL THEN clock_timestamp() + make_interval(secs => p_ttl) END,
              coalesce(p_labels, '{}'), p_idle_ttl)
      ON CONFLICT ON CONSTRAINT sessions_request_unique DO NOTHING
      RETURNING * INTO v;
      IF FOUND THEN
        PERFORM sessionq.queue_operation(v.id);
        RETURN QUERY SELECT 'admitted'::text, v.operation_id, to_jsonb(v);
        RETURN;
      END IF;
    END IF;
    -- A retry (or a concurrent twin that won the insert) is answered from the existing row,
    -- even when its Agent has since gone.
    SELECT * INTO v FROM sessionq.sessions s
     WHERE s.creator = p_caller AND s.request_kind = p_request_kind AND s.request_id = p_request_id FOR UPDATE;
    IF FOUND THEN
      RETURN QUERY SELECT * FROM sessionq.creation_retry(v, p_fingerprint);
      RETURN;
    END IF;
    IF v_agent.name IS NULL THEN
      PERFORM sessionq.fail('SQ404', format('agent %s/%s not found', sessionq.clip(p_namespace), sessionq.clip(p_agent)));
    END IF;
    IF v_rev.id IS NULL THEN
      PERFORM sessionq.fail('SQ412', format(
        'agent %s/%s has no successfully prepared revision; %ss cannot be created until one is ready',
        sessionq.clip(p_namespace), sessionq.clip(p_agent), v_noun));
    END IF;
    -- the conflicting row went away (an expiry removed it) before it could be locked: insert again
  END LOOP;
END $$;
COMMENT ON FUNCTION sessionq.admit_creation(text, text, text, text, text, text, text, double precision, jsonb, double precision) IS
  'Internal to admit_create, admit_create_labeled and admit_sandbox: insert a row of request kind p_request_kind (create: a Session, sandbox: a Sandbox expiring p_ttl seconds from now; with labels p_labels and an own idle TTL p_idle_ttl, 22_fleet.sql, checked by the caller) pinning the Agent''s latest successful revision, with a deterministic Actor name <kind>-<id>, and queue its job. A retry (same caller, kind and request id) joins the pending creation or returns the existing row (creation_retry, by p_fingerprint). outcome: admitted, joined or existing.';


-- 50_expiry.sql
DROP INDEX IF EXISTS sessionq.sessions_idle_clock_idx;
CREATE INDEX sessions_idle_clock_idx ON sessionq.sessions ((greatest(created_at, last_event_at)), id)
  WHERE state IN ('READY', 'SUSPENDED') AND idle_ttl IS NULL;
CREATE OR REPLACE FUNCTION sessionq.idle_deadline(p_created timestamptz, p_last_event timestamptz, p_ttl double precision)
RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  -- a whole number of microseconds added: the same instant in every time zone (so immutable)
  SELECT greatest(p_created, p_last_event) + make_interval(secs => p_ttl)
$$;
COMMENT ON FUNCTION sessionq.idle_deadline(timestamptz, timestamptz, double precision) IS
  'When a Session with its own idle TTL p_ttl seconds expires: its idle clock (the later of creation and newest event) plus p_ttl. Indexed (sessions_own_ttl_idx).';

CREATE INDEX IF NOT EXISTS sessions_own_ttl_idx ON sessionq.sessions (sessionq.idle_deadline(created_at, last_event_at, idle_ttl), id)
  WHERE state IN ('READY', 'SUSPENDED') AND idle_ttl > 0;

CREATE OR REPLACE FUNCTION sessionq.idle_candidates(p_ttl double precision, p_after_clock timestamptz, p_after_id uuid, p_limit integer)
RETURNS TABLE (id uuid, idle_since timestamptz) LANGUAGE plpgsql STABLE AS $$
DECLARE
  -- computed once: a constant bound lets the index answer (clock_timestamp() in the WHERE clause
  -- would be evaluated per row, turning an empty page into a scan of every idle Session)
  v_cutoff timestamptz := clock_timestamp() - make_interval(secs => p_ttl);
BEGIN
  RETURN QUERY
  SELECT s.id, greatest(s.created_at, s.last_event_at)
    FROM sessionq.sessions s
   WHERE s.state IN ('READY', 'SUSPENDED') AND s.kind = 'session' AND s.idle_ttl IS NULL
     AND greatest(s.created_at, s.last_event_at) < v_cutoff
     AND (p_after_clock IS NULL OR (greatest(s.created_at, s.last_event_at), s.id) > (p_after_clock, p_after_id))
   ORDER BY greatest(s.created_at, s.last_event_at), s.id
   LIMIT p_limit;
END $$;
COMMENT ON FUNCTION sessionq.idle_candidates(double precision, timestamptz, uuid, integer) IS
  'One page of the idle sweep: READY or SUSPENDED Sessions on sessions.idleTtl (no TTL of their own) whose idle clock (later of creation and newest event) is older than p_ttl seconds, in clock order after the given key. Candidates only: expire_session rechecks under the row lock.';


CREATE OR REPLACE FUNCTION sessionq.own_ttl_candidates(p_after_deadline timestamptz, p_after_id uuid, p_limit integer)
RETURNS TABLE (id uuid, deadline timestamptz) LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_now timestamptz := clock_timestamp();  -- a constant bound, as in idle_candidates
BEGIN
  RETURN QUERY
  SELECT s.id, sessionq.idle_deadline(s.created_at, s.last_event_at, s.idle_ttl)
    FROM sessionq.sessions s
   WHERE s.state IN ('READY', 'SUSPENDED') AND s.idle_ttl > 0 AND s.kind = 'session'
     AND sessionq.idle_deadline(s.created_at, s.last_event_at, s.idle_ttl) < v_now
     AND (p_after_deadline IS NULL
          OR (sessionq.idle_deadline(s.created_at, s.last_event_at, s.idle_ttl), s.id) > (p_after_deadline, p_after_id))
   ORDER BY sessionq.idle_deadline(s.created_at, s.last_event_at, s.idle_ttl), s.id
   LIMIT p_limit;
END $$;
COMMENT ON FUNCTION sessionq.own_ttl_candidates(timestamptz, uuid, integer) IS
  'One page of the idle sweep''s Sessions with their own idle TTL (sessions.idle_ttl > 0, whatever sessions.idleTtl is): READY or SUSPENDED ones past their deadline (idle_deadline), in deadline order after the given key (sessions_own_ttl_idx). Candidates only: expire_session rechecks under the row lock.';


CREATE OR REPLACE FUNCTION sessionq.expire_session(p_session uuid, p_ttl double precision)
RETURNS TABLE (outcome text, generation uuid, idle_seconds double precision) LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
  v_since timestamptz;
BEGIN
  SELECT * INTO v FROM sessionq.sessions WHERE id = p_session FOR UPDATE;
  IF NOT FOUND THEN
    RETURN QUERY SELECT 'gone'::text, NULL::uuid, NULL::double precision;
    RETURN;
  END IF;
  IF v.state = 'DELETING' AND v.deletion_reason = 'idle_timeout' THEN
    -- an admitted expiration: resume it (a new generation after a failed preparation), whatever the TTL now
    IF v.operation_id IS NULL THEN
      v := sessionq.new_generation(v.id, 'DELETE', 'idle_timeout', false);
    END IF;
    RETURN QUERY SELECT 'resumed'::text, v.operation_id, NULL::double precision;
    RETURN;
  END IF;
  v_since := CASE WHEN v.kind = 'sandbox' THEN v.expires_at ELSE greatest(v.created_at, v.last_event_at) END;
  IF (v.state NOT IN ('READY', 'SUSPENDED') OR v.operation <> 'NONE')
     -- a Sandbox expires even when its pending operation has no attempt running (25_sandboxes.sql)
     AND NOT (v.kind = 'sandbox' AND sessionq.sandbox_expiry_overrides(v))
     OR v.dispatch_id IS NOT NULL OR v.active_task_id IS NOT NULL OR v.unsettled_task_id IS NOT NULL
     OR v.idle_executor IS NOT NULL OR sessionq.checkpoint_in_progress(v.id)
     OR EXISTS (SELECT 1 FROM sessionq.tasks t WHERE t.session_id = v.id AND t.phase = 'active'
                 AND t.state IN ('TASK_STATE_SUBMITTED', 'TASK_STATE_WORKING')) THEN
    RETURN QUERY SELECT 'busy'::text, NULL::uuid, NULL::double precision;  -- active work blocks expiry
    RETURN;
  END IF;
  IF v.kind = 'sandbox' AND (v.expires_at IS NULL OR v.expires_at > clock_timestamp())
     OR v.kind = 'session' AND coalesce(v.idle_ttl, p_ttl) = 0
     OR v.kind = 'session' AND v_since >= clock_timestamp() - make_interval(secs => coalesce(v.idle_ttl, p_ttl)) THEN
    -- a turn came in after the scan (a sandbox: it has not expired yet; activity never extends it)
    RETURN QUERY SELECT 'active'::text, NULL::uuid, NULL::double precision;
    RETURN;
  END IF;
  v := sessionq.new_generation(v.id, 'DELETE', 'idle_timeout', false);
  RETURN QUERY SELECT 'admitted'::text, v.operation_id, extract(epoch FROM clock_timestamp() - v_since)::double precision;
END $$;
COMMENT ON FUNCTION sessionq.expire_session(uuid, double precision) IS
  'Idle expiration under the Session row lock shared with task admission: recheck the idle clock against the Session''s own idle TTL (sessions.idle_ttl; 0: never), else p_ttl seconds (a Sandbox: its expires_at, whatever p_ttl; idle_seconds is then the time since it expired; a pending operation of a Sandbox blocks only while an attempt runs, sandbox_expiry_overrides) and the active work (pending operation, dispatch reservation, running or unsettled turn, claimed quiescence, checkpoint being created); then admit an ordinary DELETE with durable reason idle_timeout (DELETING). An already admitted idle deletion is resumed. outcome: admitted, resumed, busy, active, gone.';


-- 40_checkpoints.sql
CREATE OR REPLACE FUNCTION sessionq.admit_fork(p_checkpoint uuid, p_caller text, p_request_id text)
RETURNS TABLE (outcome text, generation uuid, session jsonb) LANGUAGE plpgsql AS $$
DECLARE
  c sessionq.checkpoints;
  v sessionq.sessions;
  v_id uuid;
  t record;
  v_new_task text;
BEGIN
  IF p_request_id IS NULL OR length(p_request_id) NOT BETWEEN 1 AND 128 THEN
    PERFORM sessionq.fail('SQ400', 'request_id must be 1 to 128 characters');
  END IF;
  SELECT * INTO c FROM sessionq.checkpoints WHERE id = p_checkpoint AND creator = p_caller FOR SHARE;
  LOOP
    -- a new request id inserts first, so the common path never searches the caller's other Sessions
    IF c.state = 'READY' THEN
      v_id := sessionq.uuid_v7();
      INSERT INTO sessionq.sessions AS s (id, creator, request_kind, request_id, request_fingerprint, agent_namespace, agent_name,
                                          revision_id, name, state, operation, operation_id, actor_atespace, actor_name,
                                          actor_template, source_checkpoint_id)
      SELECT v_id, p_caller, 'fork', p_request_id, c.id::text, c.agent_namespace, c.agent_name, c.revision_id, c.name,
             'CREATING', 'CREATE', sessionq.uuid_v7(), r.template_atespace, 'session-' || v_id,
             r.template_atespace || '/' || r.template_name, c.id
        FROM sessionq.revisions r WHERE r.id = c.revision_id
      ON CONFLICT ON CONSTRAINT sessions_request_unique DO NOTHING
      RETURNING * INTO v;
      IF FOUND THEN
        -- replay the pinned history: own task ids and context id, original timestamps
        FOR t IN SELECT * FROM sessionq.tasks WHERE session_id = c.session_id
                   AND seq <= (SELECT coalesce(max(e.seq), 0) FROM sessionq.tasks e WHERE e.session_id = c.session_id
                                AND e.id = c.head_task_id)
                 ORDER BY seq LOOP
          v_new_task := sessionq.uuid_v7()::text;
          INSERT INTO sessionq.tasks (id, session_id, seq, state, task, version, published_version, phase, created_at, updated_at)
          VALUES (v_new_task, v.id, t.seq, t.state,
                  replace(replace(t.task::text, t.id, v_new_task), c.session_id::text, v.id::text)::jsonb,
                  1, 1, 'settled', t.created_at, t.updated_at);
          INSERT INTO sessionq.events (session_id, seq, task_id, kind, payload, created_at)
          SELECT v.id, e.seq, v_new_task, e.kind,
                 replace(replace(e.payload::text, t.id, v_new_task), c.session_id::text, v.id::text)::jsonb, e.created_at
            FROM sessionq.events e
           WHERE e.session_id = c.session_id AND e.task_id = t.id AND e.seq <= c.history_sequence;
        END LOOP;
        -- and its source Session's labels, if any (22_fleet.sql; none once an idle expiry removed
        -- it): without labels the column keeps its stored value, so the update stays HOT
        UPDATE sessionq.sessions f
           SET last_event_seq = c.history_sequence,
               labels = CASE WHEN src.labels <> '{}'::jsonb THEN src.labels ELSE f.labels END
          FROM (SELECT 1) one LEFT JOIN sessionq.sessions src ON src.id = c.session_id
         WHERE f.id = v.id RETURNING f.* INTO v;
        PERFORM sessionq.queue_operation(v.id);
        RETURN QUERY SELECT 'admitted'::text, v.operation_id, to_jsonb(v);
        RETURN;
      END IF;
    END IF;
    -- a retry (or a concurrent twin that won the insert) is answered from the existing fork, even
    -- when its checkpoint has since gone
    SELECT * INTO v FROM sessionq.sessions s
     WHERE s.creator = p_caller AND s.request_kind = 'fork' AND s.request_id = p_request_id FOR UPDATE;
    IF FOUND THEN
      RETURN QUERY SELECT * FROM sessionq.creation_retry(v, p_checkpoint::text);
      RETURN;
    END IF;
    IF c.id IS NULL THEN
      PERFORM sessionq.fail('SQ404', format('checkpoint %s not found', p_checkpoint));
    END IF;
    IF c.state <> 'READY' THEN
      PERFORM sessionq.fail('SQ412', format('checkpoint %s is %s; only a READY checkpoint can be forked', c.id, c.state));
    END IF;
    -- the conflicting Session went away (an idle expiry removed it) before it could be locked: insert again
  END LOOP;
END $$;
COMMENT ON FUNCTION sessionq.admit_fork(uuid, text, text) IS
  'ForkSession admission: a new Session (request kind fork, idempotent by caller and request id) from a READY checkpoint of the caller, running the checkpoint''s revision and named after it; the history through the checkpoint is copied with new task ids, the fork''s own context id and the original timestamps (its idle clock starts at its creation), and the source Session''s labels. The creation job creates the Actor from tag checkpoint-<id>.';


-- 06_jobs.sql
INSERT INTO sessionq.job_kinds (task_name, queue_name, lock_prefix, description) VALUES
  ('run_bulk_action',   'operations', 'bulk',       'admit the operations of a bulk action page by page (subject: the bulk action id)')
ON CONFLICT (task_name) DO NOTHING;

-- 45_usage.sql
CREATE TABLE IF NOT EXISTS sessionq.session_usage (
  session_id         uuid PRIMARY KEY REFERENCES sessionq.sessions (id) ON DELETE CASCADE,
  turns              bigint NOT NULL DEFAULT 0,
  running_seconds    double precision NOT NULL DEFAULT 0,
  running_since      timestamptz,
  snapshots          bigint NOT NULL DEFAULT 0,
  checkpoints_held   integer NOT NULL DEFAULT 0,
  resumes            bigint NOT NULL DEFAULT 0,
  resume_seconds     double precision NOT NULL DEFAULT 0,
  resume_seconds_max double precision NOT NULL DEFAULT 0
);
COMMENT ON TABLE sessionq.session_usage IS
  'What a Session used, kept as the work happens (never computed by a scan): turns (a task row created by a turn), Actor resumes and their latency (record_resume, by the resuming worker), the Actor''s running time from a resume to the next recorded suspension, snapshots taken (a new snapshot generation recorded on the Session) and checkpoints held. One row per Session that used anything, removed with it; snapshot sizes are not known (the runtime reports none).';
COMMENT ON COLUMN sessionq.session_usage.turns IS 'Turns: tasks the Actor created for a turn (a fork''s copied history not included).';
COMMENT ON COLUMN sessionq.session_usage.running_seconds IS 'Seconds the Actor ran: from each resume to the suspension recorded after it (a running interval is added when it ends).';
COMMENT ON COLUMN sessionq.session_usage.running_since IS 'When the running interval now open began (the resume); NULL while suspended.';
COMMENT ON COLUMN sessionq.session_usage.snapshots IS 'Snapshots taken: new snapshot generations recorded on the Session (quiescence or Suspend).';
COMMENT ON COLUMN sessionq.session_usage.checkpoints_held IS 'Checkpoints of the Session that exist and have not failed.';
COMMENT ON COLUMN sessionq.session_usage.resumes IS 'Actor resumes sessionq issued (a turn''s dispatch, or ResumeSession).';
COMMENT ON COLUMN sessionq.session_usage.resume_seconds IS 'Total latency of those resumes, as the resuming worker measured the runtime call.';
COMMENT ON COLUMN sessionq.session_usage.resume_seconds_max IS 'The slowest of those resumes.';

CREATE OR REPLACE FUNCTION sessionq.record_resume(p_session uuid, p_seconds double precision) RETURNS void
LANGUAGE sql AS $$
  INSERT INTO sessionq.session_usage AS u (session_id, resumes, resume_seconds, resume_seconds_max, running_since)
  SELECT s.id, 1, greatest(p_seconds, 0), greatest(p_seconds, 0), clock_timestamp()
    FROM sessionq.sessions s WHERE s.id = p_session
  ON CONFLICT (session_id) DO UPDATE
    SET resumes = u.resumes + 1, resume_seconds = u.resume_seconds + excluded.resume_seconds,
        resume_seconds_max = greatest(u.resume_seconds_max, excluded.resume_seconds_max),
        running_since = coalesce(u.running_since, excluded.running_since)
$$;
COMMENT ON FUNCTION sessionq.record_resume(uuid, double precision) IS
  'Usage: the Actor of a Session was resumed by a call that took p_seconds; its running interval begins now (unless one is open). A Session gone meanwhile records nothing.';

CREATE OR REPLACE FUNCTION sessionq.usage_on_session_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- a new snapshot generation recorded: a snapshot taken, and the Actor suspended (its running
  -- interval ends); a deletion ends it too
  UPDATE sessionq.session_usage u
     SET snapshots = u.snapshots + CASE WHEN NEW.snapshot_generation IS DISTINCT FROM OLD.snapshot_generation
                                         AND NEW.snapshot_generation IS NOT NULL THEN 1 ELSE 0 END,
         running_seconds = u.running_seconds
                           + coalesce(extract(epoch FROM clock_timestamp() - u.running_since)::double precision, 0),
         running_since = NULL
   WHERE u.session_id = NEW.id;
  IF NOT FOUND AND NEW.snapshot_generation IS DISTINCT FROM OLD.snapshot_generation AND NEW.snapshot_generation IS NOT NULL THEN
    INSERT INTO sessionq.session_usage (session_id, snapshots) VALUES (NEW.id, 1)
    ON CONFLICT (session_id) DO UPDATE SET snapshots = sessionq.session_usage.snapshots + 1;
  END IF;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION sessionq.usage_on_session_change() IS
  'Trigger (usage): a Session''s new snapshot generation counts a snapshot and ends the Actor''s running interval; its deletion (DELETING, DELETED) ends the interval too.';
DROP TRIGGER IF EXISTS sessions_usage ON sessionq.sessions;
CREATE TRIGGER sessions_usage AFTER UPDATE OF snapshot_generation, state ON sessionq.sessions
  FOR EACH ROW
  WHEN (NEW.snapshot_generation IS DISTINCT FROM OLD.snapshot_generation
        OR NEW.state IS DISTINCT FROM OLD.state AND NEW.state IN ('DELETING', 'DELETED'))
  EXECUTE FUNCTION sessionq.usage_on_session_change();

CREATE OR REPLACE FUNCTION sessionq.usage_on_turn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO sessionq.session_usage AS u (session_id, turns) VALUES (NEW.session_id, 1)
  ON CONFLICT (session_id) DO UPDATE SET turns = u.turns + 1;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION sessionq.usage_on_turn() IS
  'Trigger (usage): a task created by a turn (not a fork''s copied history, inserted settled) counts a turn.';
DROP TRIGGER IF EXISTS tasks_usage ON sessionq.tasks;
CREATE TRIGGER tasks_usage AFTER INSERT ON sessionq.tasks
  FOR EACH ROW WHEN (NEW.phase IS DISTINCT FROM 'settled')
  EXECUTE FUNCTION sessionq.usage_on_turn();

CREATE OR REPLACE FUNCTION sessionq.usage_on_checkpoint() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO sessionq.session_usage AS u (session_id, checkpoints_held)
    SELECT s.id, 1 FROM sessionq.sessions s WHERE s.id = NEW.session_id
    ON CONFLICT (session_id) DO UPDATE SET checkpoints_held = u.checkpoints_held + 1;
  ELSIF TG_OP = 'DELETE' AND OLD.state <> 'FAILED' OR TG_OP = 'UPDATE' THEN
    UPDATE sessionq.session_usage u SET checkpoints_held = greatest(u.checkpoints_held - 1, 0)
     WHERE u.session_id = OLD.session_id;
  END IF;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION sessionq.usage_on_checkpoint() IS
  'Trigger (usage): a checkpoint created counts as held by its Session until it is deleted or fails.';
DROP TRIGGER IF EXISTS checkpoints_usage_insert ON sessionq.checkpoints;
CREATE TRIGGER checkpoints_usage_insert AFTER INSERT ON sessionq.checkpoints
  FOR EACH ROW EXECUTE FUNCTION sessionq.usage_on_checkpoint();
DROP TRIGGER IF EXISTS checkpoints_usage_delete ON sessionq.checkpoints;
CREATE TRIGGER checkpoints_usage_delete AFTER DELETE ON sessionq.checkpoints
  FOR EACH ROW EXECUTE FUNCTION sessionq.usage_on_checkpoint();
DROP TRIGGER IF EXISTS checkpoints_usage_failed ON sessionq.checkpoints;
CREATE TRIGGER checkpoints_usage_failed AFTER UPDATE OF state ON sessionq.checkpoints
  FOR EACH ROW WHEN (NEW.state = 'FAILED' AND OLD.state <> 'FAILED')
  EXECUTE FUNCTION sessionq.usage_on_checkpoint();

CREATE OR REPLACE FUNCTION sessionq.get_session_usage(p_session uuid, p_caller text, p_share_hash text)
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
  u sessionq.session_usage;
BEGIN
  PERFORM sessionq.get_session(p_session, p_caller, p_share_hash);  -- NOT_FOUND as GetSession
  SELECT * INTO u FROM sessionq.session_usage x WHERE x.session_id = p_session;
  RETURN jsonb_build_object(
    'turns', coalesce(u.turns, 0),
    'running_seconds', coalesce(u.running_seconds, 0)
                       + coalesce(extract(epoch FROM clock_timestamp() - u.running_since)::double precision, 0),
    'running', u.running_since IS NOT NULL,
    'snapshots', coalesce(u.snapshots, 0), 'checkpoints_held', coalesce(u.checkpoints_held, 0),
    'resumes', coalesce(u.resumes, 0), 'resume_seconds', coalesce(u.resume_seconds, 0),
    'resume_seconds_max', coalesce(u.resume_seconds_max, 0));
END $$;
COMMENT ON FUNCTION sessionq.get_session_usage(uuid, text, text) IS
  'A Session''s usage for a caller who may read it (NOT_FOUND otherwise): turns, Actor running seconds (an open interval counted up to now), snapshots, checkpoints held, resumes and their total and slowest latency; zeros before any work.';

CREATE OR REPLACE FUNCTION sessionq.agent_usage()
RETURNS TABLE (agent_namespace text, agent_name text, turns numeric, running_seconds double precision,
               snapshots numeric, checkpoints_held bigint, resumes numeric, resume_seconds double precision)
LANGUAGE sql STABLE AS $$
  SELECT s.agent_namespace, s.agent_name, sum(u.turns), sum(u.running_seconds), sum(u.snapshots),
         sum(u.checkpoints_held), sum(u.resumes), sum(u.resume_seconds)
    FROM sessionq.session_usage u JOIN sessionq.sessions s ON s.id = u.session_id
   WHERE s.state <> 'DELETED'
   GROUP BY s.agent_namespace, s.agent_name
$$;
COMMENT ON FUNCTION sessionq.agent_usage() IS
  'Usage summed per Agent over its live Sessions (the metrics'' sessionq_agent_usage_* gauges, refreshed with the other gauges; one row a Session that used anything is read).';
