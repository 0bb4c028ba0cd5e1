-- 0027_label_terms: one GIN index for label search. The labels' pairs and keys are one array
-- (sessions.label_terms, sessionq.label_terms) under one index (sessions_label_terms_idx), in place
-- of the pairs' stored column with its index and the keys' expression index: a labelled Session's
-- insert and its non-HOT updates write one GIN insert where they wrote two, and no key function
-- runs. Adding the stored column rewrites sessions.
DROP INDEX IF EXISTS sessionq.sessions_label_keys_idx;
ALTER TABLE sessionq.sessions DROP COLUMN IF EXISTS label_pairs;  -- and sessions_label_pairs_idx
DROP FUNCTION IF EXISTS sessionq.label_pairs(jsonb);
DROP FUNCTION IF EXISTS sessionq.label_keys(jsonb);

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
ALTER TABLE sessionq.sessions ADD COLUMN IF NOT EXISTS label_terms text[]
  GENERATED ALWAYS AS (CASE WHEN labels <> '{}'::jsonb THEN sessionq.label_terms(labels) END) STORED;
COMMENT ON COLUMN sessionq.sessions.label_terms IS '[audit] The labels'' search terms, their pairs and their keys (sessionq.label_terms; NULL without labels), kept by PostgreSQL from labels: what a selector''s equality and set membership (t.label_terms && pairs) and existence (t.label_terms @> {key}) compare (session_filter_sql), through sessions_label_terms_idx.';

-- label search, one GIN index of the live labelled Sessions (a Session without labels has no
-- entry, so its creation writes none): one entry a pair, so `team=rare` reads the posting list of
-- that pair alone and an array's containment and overlap need no recheck of the row, and one a
-- key (existence). One index, not one for the pairs and one for the keys: a labelled Session's
-- insert, and the update that changes its state (not HOT: state is in the indexes' predicates),
-- each write one GIN insert, not two. Never changed by claims or progress writes, so those stay
-- HOT updates.
CREATE INDEX IF NOT EXISTS sessions_label_terms_idx ON sessionq.sessions USING gin (label_terms)
  WHERE state <> 'DELETED' AND label_terms IS NOT NULL;
COMMENT ON COLUMN sessionq.sessions.labels IS '[audit] Labels: a JSON object of Kubernetes-style keys and string values (sessionq.check_labels: at most 32, 4096 bytes), set at creation or by the owner or a READ_WRITE share (set_session_labels), copied by a fork. Visible to every reader of the Session: never secrets. Searched through label_terms'' sessions_label_terms_idx (equality, set membership, existence).';

-- the new column's statistics, which the planner's estimate of a term's overlap reads
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
