-- Agents and their runtime revisions.
--
-- Applying an Agent spec that differs from its desired revision creates a new revision and
-- queues a job that prepares it in the runtime (creates its actor template). Preparation marks
-- the revision READY or FAILED; the Agent's latest successful revision only ever moves to a
-- newer READY revision, so pending or failed edits leave the last good one in use (CRE-2).

CREATE TABLE sessionq.revisions (
  id                uuid PRIMARY KEY DEFAULT sessionq.uuid_v7(),
  agent_namespace   text NOT NULL,
  agent_name        text NOT NULL,
  number            integer NOT NULL CHECK (number > 0),
  spec              jsonb NOT NULL,
  spec_hash         text NOT NULL,
  image             text NOT NULL,
  template_atespace text NOT NULL,
  template_name     text NOT NULL,
  template_uid      text,
  egress            jsonb NOT NULL DEFAULT '[]',
  state             text NOT NULL DEFAULT 'PENDING' CHECK (state IN ('PENDING', 'READY', 'FAILED')),
  failure_message   text,
  created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
  prepared_at       timestamptz,
  gc_marked_at      timestamptz,
  gc_collected_at   timestamptz,
  UNIQUE (agent_namespace, agent_name, number),
  UNIQUE (template_atespace, template_name),
  CHECK (state <> 'READY' OR template_uid IS NOT NULL)
);
COMMENT ON TABLE sessionq.revisions IS
  'Runtime revisions of Agents: one prepared actor template each. Sessions pin one (sessions.revision_id). gc_marked_at is a deletion marker that is never cleared.';
COMMENT ON COLUMN sessionq.revisions.spec IS 'The applied Agent spec, credential header values included (write-only secrets: every read path shows them redacted).';
COMMENT ON COLUMN sessionq.revisions.egress IS 'The persisted intended egress policy: compiled runtime rules [{protocol, hostname, port, credential_headers}]. Holds the credential header values the runtime is given; never shown to clients.';
COMMENT ON COLUMN sessionq.revisions.state IS 'PENDING until the prepare job ran; READY once its actor template exists; FAILED with failure_message.';

CREATE TABLE sessionq.agents (
  namespace                     text NOT NULL,
  name                          text NOT NULL,
  spec                          jsonb NOT NULL,
  desired_revision_id           uuid NOT NULL REFERENCES sessionq.revisions (id),
  latest_successful_revision_id uuid REFERENCES sessionq.revisions (id),
  conditions                    jsonb NOT NULL DEFAULT '[]',
  created_by                    text NOT NULL,
  created_at                    timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at                    timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (namespace, name)
);
COMMENT ON TABLE sessionq.agents IS
  'Agent definitions. desired_revision_id is the newest applied spec; latest_successful_revision_id is what new Sessions pin. conditions: Accepted, ResolvedRefs, Compatible, Ready.';
COMMENT ON COLUMN sessionq.agents.spec IS 'The desired spec, credential header values included (write-only secrets: every read path shows them redacted).';

-- notify_agent_change: an Agent applied, changed (spec, revision, conditions) or deleted, through
-- any replica, wakes the API processes' subscribers of the Agent list (MCP's kagent://agents).
CREATE OR REPLACE FUNCTION sessionq.notify_agent_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM sessionq.notify('sessionq_agent', jsonb_build_object('agent', OLD.namespace || '/' || OLD.name));
  ELSE
    PERFORM sessionq.notify('sessionq_agent', jsonb_build_object('agent', NEW.namespace || '/' || NEW.name));
  END IF;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION sessionq.notify_agent_change() IS
  'Trigger: NOTIFY sessionq_agent after an Agent row is inserted, updated or deleted (delivered at commit). Payload {"agent": "namespace/name"} (src/sessionq/db/notify.py).';
CREATE TRIGGER agents_notify AFTER INSERT OR UPDATE OR DELETE ON sessionq.agents
  FOR EACH ROW EXECUTE FUNCTION sessionq.notify_agent_change();

-- redact_agent_spec: a spec as every reader sees it (credential values are write-only).
CREATE OR REPLACE FUNCTION sessionq.redact_agent_spec(p_spec jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN jsonb_typeof(p_spec -> 'egress') = 'array' THEN
    jsonb_set(p_spec, '{egress}', coalesce((
      SELECT jsonb_agg(CASE WHEN jsonb_typeof(d -> 'credentialHeaders') = 'object' THEN
               jsonb_set(d, '{credentialHeaders}', coalesce((
                 SELECT jsonb_object_agg(h.key, CASE WHEN h.value = '""'::jsonb THEN '' ELSE '<redacted>' END)
                   FROM jsonb_each(d -> 'credentialHeaders') h), '{}'::jsonb))
             ELSE d END ORDER BY i)
        FROM jsonb_array_elements(p_spec -> 'egress') WITH ORDINALITY AS e(d, i)), '[]'::jsonb))
  ELSE p_spec END
$$;
COMMENT ON FUNCTION sessionq.redact_agent_spec(jsonb) IS
  'An Agent spec with every credential header value that is set replaced by <redacted> (an empty value stays empty). Every read path (the API, sessionq.agent_overview) shows specs through it; only applying a spec reads the stored values (to keep those a re-applied spec gives as <redacted>).';

-- agent_conditions: the four conditions of an Agent, derived from its revisions.
CREATE OR REPLACE FUNCTION sessionq.agent_conditions(p_desired sessionq.revisions, p_latest_ok uuid)
RETURNS jsonb LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_array(
    jsonb_build_object('type', 'Accepted', 'status', 'True', 'reason', 'Accepted', 'message', 'spec accepted',
                       'lastTransitionTime', p_desired.created_at),
    jsonb_build_object('type', 'ResolvedRefs', 'status', 'True', 'reason', 'ResolvedRefs', 'message', 'references resolved',
                       'lastTransitionTime', p_desired.created_at),
    jsonb_build_object('type', 'Compatible',
                       'status', CASE WHEN p_desired.state = 'FAILED' THEN 'False' ELSE 'True' END,
                       'reason', CASE WHEN p_desired.state = 'FAILED' THEN 'RevisionFailed' ELSE 'Compatible' END,
                       'message', coalesce(p_desired.failure_message, 'revision ' || p_desired.number || ' is ' || lower(p_desired.state)),
                       'lastTransitionTime', coalesce(p_desired.prepared_at, p_desired.created_at)),
    jsonb_build_object('type', 'Ready',
                       'status', CASE WHEN p_latest_ok IS NOT NULL THEN 'True'
                                      WHEN p_desired.state = 'FAILED' THEN 'False' ELSE 'Unknown' END,
                       'reason', CASE WHEN p_latest_ok IS NOT NULL THEN 'RevisionReady'
                                      WHEN p_desired.state = 'FAILED' THEN 'RevisionFailed' ELSE 'RevisionPreparing' END,
                       'message', CASE WHEN p_latest_ok IS NOT NULL THEN 'a prepared revision is available for new sessions'
                                       WHEN p_desired.state = 'FAILED' THEN 'no revision could be prepared'
                                       ELSE 'the first revision is being prepared' END,
                       'lastTransitionTime', coalesce(p_desired.prepared_at, p_desired.created_at)))
$$;
COMMENT ON FUNCTION sessionq.agent_conditions(sessionq.revisions, uuid) IS
  'Compute the Accepted, ResolvedRefs, Compatible and Ready conditions from the desired revision and the latest successful revision id.';

-- apply_agent: create or update an Agent; a changed spec makes a new revision and queues its preparation.
-- p_base_revision: the desired revision whose stored credential header values the caller kept (a
-- spec applied with redacted values); the apply is refused (SQ409) when it is no longer the desired one.
-- p_mode: apply (create or update), create (ALREADY_EXISTS when the Agent exists: CreateAgent) or
-- update (NOT_FOUND when it does not: UpdateAgent).
CREATE OR REPLACE FUNCTION sessionq.apply_agent(
  p_namespace text, p_name text, p_spec jsonb, p_spec_hash text, p_image text, p_egress jsonb, p_caller text,
  p_admin boolean DEFAULT false, p_base_revision uuid DEFAULT NULL, p_mode text DEFAULT 'apply'
) RETURNS TABLE (agent_namespace text, agent_name text, revision_created boolean)
LANGUAGE plpgsql AS $$
DECLARE
  v_agent sessionq.agents;
  v_desired sessionq.revisions;
  v_rev sessionq.revisions;
  v_number integer;
BEGIN
  -- serialize appliers of one Agent name (the row may not exist yet)
  PERFORM pg_advisory_xact_lock(hashtextextended('sessionq.agent:' || p_namespace || '/' || p_name, 0));
  SELECT * INTO v_agent FROM sessionq.agents a WHERE a.namespace = p_namespace AND a.name = p_name FOR UPDATE;
  IF p_mode NOT IN ('apply', 'create', 'update') THEN
    PERFORM sessionq.fail('SQ400', format('unknown apply mode %s', sessionq.clip(p_mode)));
  END IF;
  IF FOUND AND p_mode = 'create' THEN
    PERFORM sessionq.fail('SQ422', format('agent %s/%s already exists; update it instead',
                                          sessionq.clip(p_namespace), sessionq.clip(p_name)));
  ELSIF NOT FOUND AND p_mode = 'update' THEN
    PERFORM sessionq.fail('SQ404', format('agent %s/%s not found; create it first',
                                          sessionq.clip(p_namespace), sessionq.clip(p_name)));
  END IF;
  IF FOUND THEN
    IF v_agent.created_by <> p_caller AND NOT p_admin THEN
      PERFORM sessionq.fail('SQ403', format('agent %s/%s belongs to %s; only its owner or an administrator may change it',
                                            sessionq.clip(p_namespace), sessionq.clip(p_name), v_agent.created_by));
    END IF;
    IF p_base_revision IS NOT NULL AND v_agent.desired_revision_id <> p_base_revision THEN
      PERFORM sessionq.fail('SQ409', format('agent %s/%s changed while this apply kept its stored credentials; apply again',
                                            p_namespace, p_name));
    END IF;
    SELECT * INTO v_desired FROM sessionq.revisions r WHERE r.id = v_agent.desired_revision_id;
    IF v_desired.spec_hash = p_spec_hash THEN
      RETURN QUERY SELECT p_namespace, p_name, false;
      RETURN;
    END IF;
  ELSIF p_base_revision IS NOT NULL THEN
    PERFORM sessionq.fail('SQ409', format('agent %s/%s was deleted while this apply kept its stored credentials; apply again',
                                          p_namespace, p_name));
  END IF;
  SELECT coalesce(max(r.number), 0) + 1 INTO v_number
    FROM sessionq.revisions r WHERE r.agent_namespace = p_namespace AND r.agent_name = p_name;
  INSERT INTO sessionq.revisions (agent_namespace, agent_name, number, spec, spec_hash, image,
                                  template_atespace, template_name, egress)
  VALUES (p_namespace, p_name, v_number, p_spec, p_spec_hash, p_image, p_namespace,
          -- one template per revision: <agent>-<12 hex of the revision identity>
          left(p_name, 50) || '-' || left(md5(p_namespace || '/' || p_name || '#' || v_number), 12),
          p_egress)
  RETURNING * INTO v_rev;
  IF v_agent.name IS NULL THEN
    INSERT INTO sessionq.agents (namespace, name, spec, desired_revision_id, conditions, created_by)
    VALUES (p_namespace, p_name, p_spec, v_rev.id, sessionq.agent_conditions(v_rev, NULL), p_caller);
  ELSE
    UPDATE sessionq.agents a
       SET spec = p_spec, desired_revision_id = v_rev.id,
           conditions = sessionq.agent_conditions(v_rev, a.latest_successful_revision_id),
           updated_at = clock_timestamp()
     WHERE a.namespace = p_namespace AND a.name = p_name;
  END IF;
  PERFORM sessionq.defer('prepare_revision', v_rev.id::text, jsonb_build_object('revision_id', v_rev.id));
  RETURN QUERY SELECT p_namespace, p_name, true;
END $$;
COMMENT ON FUNCTION sessionq.apply_agent(text, text, jsonb, text, text, jsonb, text, boolean, uuid, text) IS
  'Create or update an Agent (an existing one only by its owner or an administrator); p_mode create refuses an existing Agent (ALREADY_EXISTS), update a missing one (NOT_FOUND), apply does either. A spec whose hash differs from the desired revision creates revision n+1 (PENDING) and queues its prepare_revision job in the same transaction. p_base_revision (optional): the desired revision the caller took kept credential header values from; SQ409 when another apply or a delete came in between. p_spec and p_egress hold the credential values: no view or read path returns them (readers see them redacted).';

-- finish_revision: record the outcome of preparing a revision in the runtime.
CREATE OR REPLACE FUNCTION sessionq.finish_revision(p_revision uuid, p_template_uid text, p_failure text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_rev sessionq.revisions;
  v_agent sessionq.agents;
  v_latest sessionq.revisions;
  v_desired sessionq.revisions;
BEGIN
  SELECT * INTO v_rev FROM sessionq.revisions WHERE id = p_revision FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ404', format('revision %s does not exist', p_revision));
  END IF;
  IF v_rev.state <> 'PENDING' THEN
    RETURN;  -- already recorded (a retried job)
  END IF;
  IF p_failure IS NULL THEN
    UPDATE sessionq.revisions SET state = 'READY', template_uid = p_template_uid, prepared_at = clock_timestamp()
     WHERE id = p_revision RETURNING * INTO v_rev;
  ELSE
    UPDATE sessionq.revisions SET state = 'FAILED', failure_message = p_failure, prepared_at = clock_timestamp()
     WHERE id = p_revision RETURNING * INTO v_rev;
  END IF;
  SELECT * INTO v_agent FROM sessionq.agents a
   WHERE a.namespace = v_rev.agent_namespace AND a.name = v_rev.agent_name FOR UPDATE;
  IF NOT FOUND THEN
    RETURN;  -- the Agent was deleted meanwhile
  END IF;
  IF v_rev.state = 'READY' THEN
    SELECT * INTO v_latest FROM sessionq.revisions WHERE id = v_agent.latest_successful_revision_id;
    IF v_latest.id IS NULL OR v_latest.number < v_rev.number THEN
      v_agent.latest_successful_revision_id := v_rev.id;
    END IF;
  END IF;
  SELECT * INTO v_desired FROM sessionq.revisions WHERE id = v_agent.desired_revision_id;
  UPDATE sessionq.agents a
     SET latest_successful_revision_id = v_agent.latest_successful_revision_id,
         conditions = sessionq.agent_conditions(v_desired, v_agent.latest_successful_revision_id),
         updated_at = clock_timestamp()
   WHERE a.namespace = v_agent.namespace AND a.name = v_agent.name;
END $$;
COMMENT ON FUNCTION sessionq.finish_revision(uuid, text, text) IS
  'Record a prepared revision (template uid, READY) or its failure (FAILED); move the Agent''s latest successful revision forward only, and refresh its conditions. Idempotent.';

CREATE OR REPLACE FUNCTION sessionq.delete_agent(p_namespace text, p_name text, p_caller text, p_admin boolean)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_agent sessionq.agents;
BEGIN
  SELECT * INTO v_agent FROM sessionq.agents WHERE namespace = p_namespace AND name = p_name FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ404', format('agent %s/%s not found', sessionq.clip(p_namespace), sessionq.clip(p_name)));
  END IF;
  IF v_agent.created_by <> p_caller AND NOT p_admin THEN
    PERFORM sessionq.fail('SQ403', format('agent %s/%s belongs to %s; only its owner or an administrator may delete it',
                                          sessionq.clip(p_namespace), sessionq.clip(p_name), v_agent.created_by));
  END IF;
  DELETE FROM sessionq.agents WHERE namespace = p_namespace AND name = p_name;
END $$;
COMMENT ON FUNCTION sessionq.delete_agent(text, text, text, boolean) IS
  'Delete an Agent definition. Its revisions stay while Sessions or checkpoints pin them; revision GC collects the rest.';
