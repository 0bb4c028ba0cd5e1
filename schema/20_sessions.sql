-- Sessions: one lifecycle row per Session, its operations and executor claims, and its shares.
--
-- A lifecycle intent (Create, Suspend, Resume, Delete) is admitted under the row lock: it writes
-- the operation kind and a fresh operation UUID (the generation) and queues the
-- execute_operation job in the same transaction. An attempt to execute it claims the generation
-- (executor_id + executor_expires_at, at most sessions.claimLifetime), issues runtime calls with
-- no transaction open, then completes (or releases the claim on error). A released claim keeps
-- executor_id: it records that runtime work may have been issued.

CREATE TABLE sessionq.sessions (
  id                   uuid PRIMARY KEY DEFAULT sessionq.uuid_v7(),
  creator              text NOT NULL,
  request_kind         text NOT NULL CHECK (request_kind IN ('create', 'fork', 'sandbox')),
  kind                 text NOT NULL GENERATED ALWAYS AS (CASE WHEN request_kind = 'sandbox' THEN 'sandbox' ELSE 'session' END) STORED,
  request_id           text NOT NULL CHECK (length(request_id) BETWEEN 1 AND 128),
  request_fingerprint  text NOT NULL,
  agent_namespace      text NOT NULL,
  agent_name           text NOT NULL,
  revision_id          uuid REFERENCES sessionq.revisions (id),
  name                 text NOT NULL DEFAULT '' CHECK (length(name) <= 200),
  state                text NOT NULL DEFAULT 'CREATING'
                       CHECK (state IN ('CREATING', 'READY', 'SUSPENDED', 'FAILED', 'DELETING', 'DELETED')),
  operation            text NOT NULL DEFAULT 'CREATE'
                       CHECK (operation IN ('NONE', 'CREATE', 'SUSPEND', 'RESUME', 'DELETE')),
  operation_id         uuid,
  executor_id          uuid,
  executor_expires_at  timestamptz,
  failure_reason       text,
  failure_message      text,
  failed_operation_id  uuid,
  actor_atespace       text NOT NULL,
  actor_name           text NOT NULL,
  actor_template       text NOT NULL,
  actor_uid            text,
  snapshot_generation  bigint,
  snapshot_uri         text,
  deletion_reason      text CHECK (deletion_reason IN ('user_requested', 'idle_timeout')),
  source_checkpoint_id uuid,
  expires_at           timestamptz,  -- sandboxes (25_sandboxes.sql): when it expires by itself
  -- turns (30_tasks.sql): the dispatch reservation, the running and the unsettled task
  dispatch_id          uuid,
  dispatch_expires_at  timestamptz,
  dispatch_message     jsonb,
  dispatch_task_id     text,
  dispatch_failure     jsonb,
  active_task_id       text,
  unsettled_task_id    text,
  last_event_seq       bigint NOT NULL DEFAULT 0,
  last_event_at        timestamptz,
  -- automatic quiescence: the idle boundary a settlement marks and the worker that claimed it
  idle_boundary_id     uuid,
  idle_boundary_at     timestamptz,
  idle_executor        uuid,
  idle_claimed_at      timestamptz,
  idle_uncertain_at    timestamptz,
  idle_retry_at        timestamptz,
  idle_attempts        integer NOT NULL DEFAULT 0,
  idle_unsent          boolean NOT NULL DEFAULT false,
  quiescence_failure   jsonb,
  actor_paused_at      timestamptz,  -- 30_tasks.sql: paused waiting for input (sessions.pausedRuntimeTtl)
  snapshot_status      text CHECK (snapshot_status IN ('IN_PROGRESS', 'COMPLETED')),
  snapshot_event_seq   bigint,
  pinned_checkpoint_id uuid GENERATED ALWAYS AS (CASE WHEN state <> 'DELETED' THEN source_checkpoint_id END) STORED,
  created_at           timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at           timestamptz NOT NULL DEFAULT clock_timestamp(),
  CONSTRAINT sessions_request_unique UNIQUE (creator, request_kind, request_id),
  CONSTRAINT executor_only_in_flight CHECK (executor_id IS NULL OR operation <> 'NONE'),
  CONSTRAINT claim_has_expiry CHECK ((executor_id IS NULL) = (executor_expires_at IS NULL)),
  CONSTRAINT deleted_is_released CHECK (state <> 'DELETED' OR (revision_id IS NULL AND operation = 'NONE' AND actor_uid IS NULL)),
  CONSTRAINT live_has_revision CHECK (state = 'DELETED' OR revision_id IS NOT NULL),
  CONSTRAINT deleting_iff_delete CHECK ((state = 'DELETING') = (operation = 'DELETE')),
  CONSTRAINT generation_only_with_operation CHECK (operation <> 'NONE' OR executor_id IS NULL),
  CONSTRAINT idle_claim_needs_boundary CHECK (idle_executor IS NULL OR idle_boundary_id IS NOT NULL),
  CONSTRAINT dispatch_has_expiry CHECK ((dispatch_id IS NULL) = (dispatch_expires_at IS NULL))
) WITH (fillfactor = 85);
CREATE INDEX sessions_idle_boundary_idx ON sessionq.sessions (idle_boundary_at)
  WHERE idle_boundary_id IS NOT NULL AND idle_executor IS NULL;
-- only uncertain claims are indexed: a normal claim and its recording leave these columns NULL and
-- stay HOT updates
CREATE INDEX sessions_idle_uncertain_idx ON sessionq.sessions (idle_retry_at)
  WHERE idle_uncertain_at IS NOT NULL;
-- listing a caller's live Sessions; partial, so that it cannot serve the request-id lookup of a
-- retried creation (only the unique constraint can, whatever plan a connection has cached)
CREATE INDEX sessions_creator_idx ON sessionq.sessions (creator, id) WHERE state <> 'DELETED';
-- no index names a column that claims and progress writes change (executor_*, actor_uid, dispatch_*,
-- updated_at): those updates stay HOT (no index maintenance); fillfactor leaves room on the page
CREATE INDEX sessions_pending_idx ON sessionq.sessions (id) WHERE operation <> 'NONE';
CREATE INDEX sessions_revision_idx ON sessionq.sessions (revision_id);
CREATE INDEX sessions_actor_idx ON sessionq.sessions (actor_atespace, actor_name);
COMMENT ON TABLE sessionq.sessions IS
  'One row per Session: its pinned revision, its Actor, the lifecycle state and the operation in flight with its generation (operation_id) and executor claim. DELETED rows are kept forever as tombstones of explicit deletions. The columns form six groups, each column''s comment starting with its group: [audit] who created it by which request and when; [lifecycle] state, the operation in flight and its claim, the Actor; [turns] the dispatch reservation, the running and unsettled task, the event history; [quiescence] the idle boundary and its claim; [snapshot] the recorded snapshot; [fork] the source checkpoint. The row is deliberately not split into one table per group: claims and progress writes are HOT updates of this one row (no index names a column they change; fillfactor 85), and every rule that spans groups (a turn against an operation, quiescence against a checkpoint) checks them under one row lock.';
-- [audit]
COMMENT ON COLUMN sessionq.sessions.id IS '[audit] The Session id (UUIDv7); also its A2A context id and, as session-<id>, its Actor''s name.';
COMMENT ON COLUMN sessionq.sessions.creator IS '[audit] The user who created it (owner): the only one who sees it without a share.';
COMMENT ON COLUMN sessionq.sessions.request_kind IS '[audit] The creating request: create (CreateSession, or SendMessage without a context), fork (ForkSession) or sandbox (CreateSandbox).';
COMMENT ON COLUMN sessionq.sessions.kind IS '[audit] Generated from request_kind: session, or sandbox (a standalone sandbox of SandboxService, 25_sandboxes.sql: the same lifecycle machinery, no turns, no shares). Every Session-facing read and admission sees only kind session, every Sandbox-facing one only kind sandbox (sessionq.access).';
COMMENT ON COLUMN sessionq.sessions.expires_at IS '[lifecycle] Sandboxes only: when the sandbox expires by itself (creation plus its ttl; activity never extends it); the expiry sweep then deletes it like an idle Session. NULL for Sessions.';
COMMENT ON COLUMN sessionq.sessions.request_id IS '[audit] The caller''s idempotency key of the creating request, unique per creator and request kind.';
COMMENT ON COLUMN sessionq.sessions.request_fingerprint IS '[audit] The parameters of the creating request (agent and name, or checkpoint); a reused request id with other parameters is an idempotency conflict.';
COMMENT ON COLUMN sessionq.sessions.name IS '[audit] Display name given by the owner (empty: none); renaming does not touch the idle clock.';
COMMENT ON COLUMN sessionq.sessions.created_at IS '[audit] Database time of the admission; the idle clock starts here.';
COMMENT ON COLUMN sessionq.sessions.updated_at IS '[audit] Database time of the last change of the row, by any group.';
-- [lifecycle]
COMMENT ON COLUMN sessionq.sessions.agent_namespace IS '[lifecycle] The Agent the Session runs (namespace); with agent_name, its A2A authority.';
COMMENT ON COLUMN sessionq.sessions.agent_name IS '[lifecycle] The Agent the Session runs (name).';
COMMENT ON COLUMN sessionq.sessions.revision_id IS '[lifecycle] The pinned revision: the Agent''s latest successful one at creation (a fork: its checkpoint''s). Released (NULL) by the DELETED tombstone, which lets revision GC collect it.';
COMMENT ON COLUMN sessionq.sessions.state IS '[lifecycle] CREATING, READY, SUSPENDED, DELETING or DELETED; changed only by admission (DELETE enters DELETING) and by completion of the operation in flight. FAILED is allowed, as in the API''s states, but no procedure enters it: a failed preparation keeps the state and records failure_reason.';
COMMENT ON COLUMN sessionq.sessions.operation IS '[lifecycle] The operation in flight: CREATE, SUSPEND, RESUME or DELETE, NONE when none. Admitted with a new generation (operation_id); NONE again at completion.';
COMMENT ON COLUMN sessionq.sessions.operation_id IS '[lifecycle] The generation: a fresh UUID per admitted operation, kept after completion until a later operation supersedes it.';
COMMENT ON COLUMN sessionq.sessions.executor_id IS '[lifecycle] The attempt that claimed the generation. Kept when the claim is released: runtime work may have been issued.';
COMMENT ON COLUMN sessionq.sessions.executor_expires_at IS '[lifecycle] When the claim lapses (at most sessions.claimLifetime after the claim); a retry may then claim with a new executor id.';
COMMENT ON COLUMN sessionq.sessions.failure_reason IS '[lifecycle] Why the preparation of failed_operation_id failed (RevisionUnavailable, CheckpointUnavailable, CheckpointMismatch, ActorReplaced, RuntimeUnavailable) or, while the operation is still pending and failed_operation_id is unset, why its last attempt failed (RuntimeError, RuntimeConflict, AttemptTimedOut, InternalError: the job retries it), or, with no operation, why the last turn could not start (RestoreFailed: the Actor''s snapshot could not be restored; see record_turn_failure, cleared by the next resume that succeeds); clients see it as Failure.reason. Cleared by the next admission or completion.';
COMMENT ON COLUMN sessionq.sessions.failure_message IS '[lifecycle] The message of that failure, shown to clients.';
COMMENT ON COLUMN sessionq.sessions.failed_operation_id IS '[lifecycle] The generation whose preparation failed (failure_reason, failure_message say why); waiting callers of it are told.';
COMMENT ON COLUMN sessionq.sessions.deletion_reason IS '[lifecycle] Why a DELETE was admitted: user_requested (leaves a DELETED tombstone) or idle_timeout (the row goes at completion); an earlier reason is kept.';
COMMENT ON COLUMN sessionq.sessions.actor_atespace IS '[lifecycle] The runtime atespace of the Actor (the revision''s template atespace).';
COMMENT ON COLUMN sessionq.sessions.actor_name IS '[lifecycle] The deterministic Actor name session-<id>: a retried creation finds what an earlier attempt made.';
COMMENT ON COLUMN sessionq.sessions.actor_template IS '[lifecycle] The actor template (<atespace>/<name>) of the pinned revision; an Actor with another template is never adopted.';
COMMENT ON COLUMN sessionq.sessions.actor_uid IS '[lifecycle] The Actor''s runtime UID, recorded as soon as the creation returns it (record_actor); an Actor with another UID is never adopted. NULL before creation and in the tombstone.';
-- [turns]
COMMENT ON COLUMN sessionq.sessions.dispatch_id IS '[turns] The dispatch reservation of an admitted turn: the dispatch job delivers dispatch_message to the Actor, whose task writes must carry this id. Expires at dispatch_expires_at.';
COMMENT ON COLUMN sessionq.sessions.dispatch_expires_at IS '[turns] When the reservation lapses (sessions.dispatchTimeout after admission); a lapsed reservation no longer blocks a new turn.';
COMMENT ON COLUMN sessionq.sessions.dispatch_message IS '[turns] The admitted user message (A2A Message JSON) that the dispatch job delivers.';
COMMENT ON COLUMN sessionq.sessions.dispatch_task_id IS '[turns] The task of the reservation: the waiting task a continuation names, or the task the Actor created for this turn (set by task_create).';
COMMENT ON COLUMN sessionq.sessions.dispatch_failure IS '[turns] The last failed dispatch ({dispatch_id, message, task_id}), for the SendMessage call waiting on it. Cleared by the next admitted turn.';
COMMENT ON COLUMN sessionq.sessions.active_task_id IS '[turns] The task the Actor is running (created or updated and not yet settled): blocks a new turn and a SUSPEND.';
COMMENT ON COLUMN sessionq.sessions.unsettled_task_id IS '[turns] A task whose final update is staged but not yet settled (native cleanup unfinished): blocks task writes and explicit lifecycle changes.';
COMMENT ON COLUMN sessionq.sessions.last_event_seq IS '[turns] The sequence number of the newest event of the history (sessionq.events); a fork starts at its checkpoint''s.';
COMMENT ON COLUMN sessionq.sessions.last_event_at IS '[turns] Database time of the newest stored event of this Session (the idle clock runs from the later of this and created_at).';
-- [quiescence]
COMMENT ON COLUMN sessionq.sessions.idle_boundary_id IS '[quiescence] Set by a settlement (or a Resume): the Actor may be suspended. Claimed by a quiescence worker (idle_executor); a claim for possibly issued runtime work never expires.';
COMMENT ON COLUMN sessionq.sessions.idle_boundary_at IS '[quiescence] When the boundary was marked: workers claim the oldest first (sessions_idle_boundary_idx).';
COMMENT ON COLUMN sessionq.sessions.idle_executor IS '[quiescence] The quiescence worker that claimed the boundary; until it records the outcome (finish_idle), new turns, task writes and lifecycle changes wait.';
COMMENT ON COLUMN sessionq.sessions.actor_paused_at IS '[quiescence] Since when the Actor is paused (PauseActor, not suspended) because its last turn ended waiting for input and sessions.pausedRuntimeTtl is set (finish_pause); its idle boundary falls due when the TTL passes, and the Actor is then suspended with its snapshot. Cleared by a recorded suspension and by a turn (the answer resumes the paused Actor). While set, explicit lifecycle changes wait, as for a claimed idle boundary.';
COMMENT ON COLUMN sessionq.sessions.quiescence_failure IS '[quiescence] The last quiescence failure record {task_id, reason, message, failed_at} (reason SuspendFailed, PauseFailed or RuntimeUnavailable): the boundary after turn task_id got neither a pause nor a snapshot (record_quiescence_failure). Clients see it as Session.last_quiescence_failure; a later quiescence that records a snapshot clears it.';
COMMENT ON COLUMN sessionq.sessions.idle_claimed_at IS '[quiescence] When idle_executor claimed the boundary (operators see long-held claims).';
COMMENT ON COLUMN sessionq.sessions.idle_uncertain_at IS '[quiescence] When the idle claim became uncertain: an attempt ended without a recorded outcome (or its holder outlived its lease). NULL while the first attempt runs. New turns are refused while it is set (the last suspend is being confirmed); cleared when the outcome is recorded.';
COMMENT ON COLUMN sessionq.sessions.idle_retry_at IS '[quiescence] Of an uncertain idle claim: when a quiescence worker may take it over next (after a failed attempt: a backoff; while one resolves it: the end of its lease).';
COMMENT ON COLUMN sessionq.sessions.idle_attempts IS '[quiescence] Failed attempts at the current idle claim (the backoff grows with it); 0 once recorded.';
COMMENT ON COLUMN sessionq.sessions.idle_unsent IS '[quiescence] The last failed attempt certainly never reached the runtime (the connection was refused): nothing was issued.';
-- [snapshot]
COMMENT ON COLUMN sessionq.sessions.snapshot_generation IS '[snapshot] The exact VOLUMES snapshot generation recorded by the last suspension (quiescence or SUSPEND); never an older one.';
COMMENT ON COLUMN sessionq.sessions.snapshot_uri IS '[snapshot] The URI of that generation, once durable (NULL while IN_PROGRESS).';
COMMENT ON COLUMN sessionq.sessions.snapshot_status IS '[snapshot] IN_PROGRESS while the runtime still writes the recorded generation (a refresh_snapshot job looks again), then COMPLETED.';
COMMENT ON COLUMN sessionq.sessions.snapshot_event_seq IS '[snapshot] The history sequence the recorded snapshot covers: a checkpoint of the head turn needs snapshot_event_seq = last_event_seq and snapshot_status COMPLETED.';
-- [fork]
COMMENT ON COLUMN sessionq.sessions.source_checkpoint_id IS '[fork] The checkpoint a forked Session was created from (NULL: not a fork); its Actor is created from tag checkpoint-<id>.';
COMMENT ON COLUMN sessionq.sessions.pinned_checkpoint_id IS '[fork] Generated: the source checkpoint while the Session is live (a RESTRICT foreign key pins it); NULL once DELETED.';

CREATE TABLE sessionq.session_shares (
  id          uuid PRIMARY KEY DEFAULT sessionq.uuid_v7(),
  session_id  uuid NOT NULL REFERENCES sessionq.sessions (id) ON DELETE CASCADE,
  permission  text NOT NULL CHECK (permission IN ('READ_ONLY', 'READ_WRITE')),
  token_hash  text NOT NULL UNIQUE,
  created_by  text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  expires_at  timestamptz  -- NULL: never (a share created without a ttl and no shares.maxTtl)
);
CREATE INDEX session_shares_session_idx ON sessionq.session_shares (session_id, id);
COMMENT ON TABLE sessionq.session_shares IS
  'Bearer shares of a Session: the token is shown once and only its SHA-256 is stored. READ_ONLY reads; READ_WRITE also sends and cancels. Valid until expires_at (NULL: until revoked); revoked by deletion of the Session.';

-- A change of a Session row's outcome wakes the callers waiting on it (API waiters LISTEN on this
-- channel). An insert notifies nobody: its admitting caller already knows the generation is pending.
CREATE OR REPLACE FUNCTION sessionq.notify_session_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- a waiter learns from the payload whether its generation is still pending without reading the
  -- row; when no operation is pending the row itself rides along, so the waiter of the generation
  -- that just finished answers without reading it (unless it would pass NOTIFY's limit)
  IF TG_OP = 'DELETE' THEN
    PERFORM sessionq.notify('sessionq_session', jsonb_build_object('session', OLD.id, 'gone', true));
    RETURN NULL;
  END IF;
  PERFORM sessionq.notify('sessionq_session', jsonb_build_object(
    'session', NEW.id, 'state', NEW.state, 'operation', NEW.operation, 'generation', NEW.operation_id,
    'row', CASE WHEN NEW.operation = 'NONE' THEN to_jsonb(NEW) END));
  RETURN NULL;
END $$;
COMMENT ON FUNCTION sessionq.notify_session_change() IS
  'Trigger: NOTIFY sessionq_session after a delete, or an update that changes the state, the operation or its generation (delivered at commit). Payload {"session", "state", "operation", "generation", "row"}, the row only when the operation is NONE (and it fits NOTIFY''s limit), or {"session", "gone": true} for a deleted row (src/sessionq/db/notify.py).';
CREATE TRIGGER sessions_notify_delete AFTER DELETE ON sessionq.sessions
  FOR EACH ROW EXECUTE FUNCTION sessionq.notify_session_change();
-- waiters care about a generation's outcome only: not every claim or progress write
CREATE TRIGGER sessions_notify_update AFTER UPDATE ON sessionq.sessions
  FOR EACH ROW
  WHEN (OLD.operation IS DISTINCT FROM NEW.operation OR OLD.operation_id IS DISTINCT FROM NEW.operation_id
        OR OLD.failed_operation_id IS DISTINCT FROM NEW.failed_operation_id OR OLD.state IS DISTINCT FROM NEW.state)
  EXECUTE FUNCTION sessionq.notify_session_change();

-- access: how the caller may use a Session: 'owner', 'READ_WRITE', 'READ_ONLY' or NULL (invisible).
-- share_permission and access are applied again from here by migration 0005 (sqlfiles.apply_functions).
CREATE OR REPLACE FUNCTION sessionq.share_permission(p_session uuid, p_share_hash text)
RETURNS text LANGUAGE sql STABLE AS $$
  SELECT max(sh.permission) FROM sessionq.session_shares sh
   WHERE sh.session_id = p_session AND sh.token_hash = p_share_hash
     AND (sh.expires_at IS NULL OR sh.expires_at > clock_timestamp())
$$;
COMMENT ON FUNCTION sessionq.share_permission(uuid, text) IS
  'The strongest permission (READ_WRITE or READ_ONLY) an unexpired share with this token hash grants on a Session, or NULL. A part of access.';

-- access has no subquery of its own, so that PostgreSQL inlines it into the queries that call it for
-- each row (a SQL function it cannot inline runs its body as a query of its own per row: before
-- PostgreSQL 18 that is planned again at every statement, about 4x a GetSession's database CPU)
CREATE OR REPLACE FUNCTION sessionq.access(
  p_session sessionq.sessions, p_caller text, p_share_hash text, p_of text DEFAULT 'session'
) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT CASE
    WHEN p_session.id IS NULL OR p_session.state = 'DELETED' OR p_session.kind IS DISTINCT FROM p_of THEN NULL
    WHEN p_session.creator = p_caller THEN 'owner'
    ELSE sessionq.share_permission(p_session.id, p_share_hash)
  END
$$;
COMMENT ON FUNCTION sessionq.access(sessionq.sessions, text, text, text) IS
  'The caller''s access to a live row of kind p_of (session, or sandbox: 25_sandboxes.sql): owner, READ_WRITE or READ_ONLY (by an unexpired share token hash; sandboxes have no shares), or NULL. Deleted rows, and rows of the other kind, are invisible to everyone.';

-- visible_session: lock and return a Session the caller may see, or raise NOT_FOUND / PERMISSION_DENIED.
CREATE OR REPLACE FUNCTION sessionq.visible_session(
  p_session uuid, p_caller text, p_share_hash text, p_need text, p_of text DEFAULT 'session'
) RETURNS sessionq.sessions LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
  v_access text;
BEGIN
  SELECT * INTO v FROM sessionq.sessions WHERE id = p_session FOR UPDATE;
  v_access := sessionq.access(v, p_caller, p_share_hash, p_of);
  IF v_access IS NULL THEN
    -- a missing, deleted and another user's Session answer alike
    PERFORM sessionq.fail('SQ404', format('%s %s not found', p_of, p_session));
  END IF;
  IF p_need = 'owner' AND v_access <> 'owner'
     OR p_need = 'write' AND v_access NOT IN ('owner', 'READ_WRITE') THEN
    PERFORM sessionq.fail('SQ403', format('a %s share of %s %s does not allow this', v_access, p_of, p_session));
  END IF;
  RETURN v;
END $$;
COMMENT ON FUNCTION sessionq.visible_session(uuid, text, text, text, text) IS
  'Lock a Session (or, p_of sandbox, a Sandbox) FOR UPDATE for a caller who needs p_need (read, write or owner) access; NOT_FOUND when missing, deleted, of the other kind or not visible, PERMISSION_DENIED when a share is too weak.';

-- queue_operation: make sure an execute_operation job is waiting for this Session.
CREATE OR REPLACE FUNCTION sessionq.queue_operation(p_session uuid, p_at timestamptz DEFAULT NULL)
RETURNS bigint LANGUAGE sql AS $$
  SELECT sessionq.defer('execute_operation', p_session::text, jsonb_build_object('session_id', p_session), p_at)
$$;
COMMENT ON FUNCTION sessionq.queue_operation(uuid, timestamptz) IS
  'Queue the execute_operation job of a Session (at most one waiting per Session: queueing lock operation:<id>), due at p_at (NULL: now); a job already waiting runs no later than that. The job executes whatever operation is current when it runs.';

-- new_generation: start a new generation of p_kind on a locked row (admission's common tail).
CREATE OR REPLACE FUNCTION sessionq.new_generation(p_session uuid, p_kind text, p_reason text, p_queue boolean DEFAULT true)
RETURNS sessionq.sessions LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
BEGIN
  UPDATE sessionq.sessions s
     SET operation = p_kind,
         operation_id = sessionq.uuid_v7(),
         executor_id = NULL, executor_expires_at = NULL,
         failure_reason = NULL, failure_message = NULL, failed_operation_id = NULL,
         state = CASE WHEN p_kind = 'DELETE' THEN 'DELETING' ELSE s.state END,
         idle_boundary_id = CASE WHEN p_kind IN ('SUSPEND', 'DELETE') AND s.idle_executor IS NULL
                                 THEN NULL ELSE s.idle_boundary_id END,
         idle_boundary_at = CASE WHEN p_kind IN ('SUSPEND', 'DELETE') AND s.idle_executor IS NULL
                                 THEN NULL ELSE s.idle_boundary_at END,
         deletion_reason = CASE WHEN p_kind = 'DELETE' THEN coalesce(s.deletion_reason, p_reason) ELSE s.deletion_reason END,
         updated_at = clock_timestamp()
   WHERE s.id = p_session
  RETURNING * INTO v;
  IF p_queue THEN
    PERFORM sessionq.queue_operation(p_session);
  END IF;
  RETURN v;
END $$;
COMMENT ON FUNCTION sessionq.new_generation(uuid, text, text, boolean) IS
  'Internal to admission: write operation kind, a fresh generation and no executor; DELETE enters DELETING keeping an earlier deletion reason; queue the job (the idle sweep executes its deletions itself, p_queue false).';

-- creation_retry: answer a repeated Create or Fork request (same caller, kind and request id).
CREATE OR REPLACE FUNCTION sessionq.creation_retry(v sessionq.sessions, p_fingerprint text)
RETURNS TABLE (outcome text, generation uuid, session jsonb) LANGUAGE plpgsql AS $$
BEGIN
  IF v.state = 'DELETED' THEN
    PERFORM sessionq.fail('SQ412', format(
      'request_id %s belongs to %s %s, which was deleted; a deleted %s cannot be recreated, use a new request_id',
      sessionq.clip(v.request_id), v.kind, v.id, v.kind));
  END IF;
  IF v.request_fingerprint <> p_fingerprint THEN
    PERFORM sessionq.fail('SQ422', format(
      'request_id %s was already used for %s %s with different parameters', sessionq.clip(v.request_id), v.kind, v.id));
  END IF;
  IF v.operation = 'CREATE' AND v.operation_id IS NULL THEN  -- its preparation failed: retry under a new generation
    v := sessionq.new_generation(v.id, 'CREATE', NULL);
    RETURN QUERY SELECT 'admitted'::text, v.operation_id, to_jsonb(v);
  ELSIF v.operation = 'CREATE' THEN
    PERFORM sessionq.queue_operation(v.id);  -- join it, and make sure a job drives it
    RETURN QUERY SELECT 'joined'::text, v.operation_id, to_jsonb(v);
  ELSE
    RETURN QUERY SELECT 'existing'::text, v.operation_id, to_jsonb(v);  -- current state, no receipt
  END IF;
END $$;
COMMENT ON FUNCTION sessionq.creation_retry(sessionq.sessions, text) IS
  'Internal to admit_create and admit_fork, on the locked row of an earlier request: a deleted Session''s request id is FAILED_PRECONDITION, other parameters ALREADY_EXISTS; else join the pending creation (or retry a failed preparation) or return the current Session.';

-- admit_creation: admit a new row (a Session, or a Sandbox: 25_sandboxes.sql), or answer a retry.
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

-- admit_create: admit the creation of a Session, or answer a retry of one. PL/pgSQL, not SQL: a
-- PL/pgSQL function keeps its statement's plan for the connection, where PostgreSQL before 18 plans
-- an SQL function's body again on every call of a statement that is not inlined (this one, which
-- writes, never is): 0.05 ms of every creation on PostgreSQL 15.
CREATE OR REPLACE FUNCTION sessionq.admit_create(
  p_caller text, p_request_id text, p_namespace text, p_agent text, p_name text
) RETURNS TABLE (outcome text, generation uuid, session jsonb)
LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY SELECT * FROM sessionq.admit_creation(p_caller, 'create', p_request_id, p_namespace, p_agent, p_name,
                                                     p_namespace || '/' || p_agent || '|' || coalesce(p_name, ''));
END $$;
COMMENT ON FUNCTION sessionq.admit_create(text, text, text, text, text) IS
  'Admit a Session creation pinning the Agent''s latest successful revision, with a deterministic Actor name session-<id>, and queue its job. A retry (same caller and request id) joins the pending creation or returns the existing Session; other parameters: ALREADY_EXISTS; a deleted Session''s request id: FAILED_PRECONDITION. outcome: admitted, joined or existing.';

-- admit_operation: admit Suspend, Resume or Delete on a Session.
CREATE OR REPLACE FUNCTION sessionq.admit_operation(
  p_session uuid, p_caller text, p_share_hash text, p_kind text, p_reason text DEFAULT 'user_requested',
  p_of text DEFAULT 'session'
) RETURNS TABLE (outcome text, generation uuid, session jsonb)
LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
BEGIN
  IF p_kind NOT IN ('SUSPEND', 'RESUME', 'DELETE') THEN
    PERFORM sessionq.fail('SQ400', format('unknown operation %s', p_kind));
  END IF;
  v := sessionq.visible_session(p_session, p_caller, p_share_hash, 'owner', p_of);

  IF v.operation <> 'NONE' THEN
    IF v.operation = p_kind THEN
      IF v.operation_id IS NULL THEN  -- its preparation failed: a retry starts a new generation
        v := sessionq.new_generation(v.id, p_kind, p_reason);
        RETURN QUERY SELECT 'admitted'::text, v.operation_id, to_jsonb(v);
      ELSE
        PERFORM sessionq.queue_operation(v.id);
        RETURN QUERY SELECT 'joined'::text, v.operation_id, to_jsonb(v);
      END IF;
      RETURN;
    END IF;
    IF p_kind = 'DELETE' AND v.executor_id IS NULL
       OR p_of = 'sandbox' AND sessionq.sandbox_intent_replaceable(v, p_kind) THEN
      -- nothing was ever issued for the pending operation: the delete supersedes it (a Sandbox's
      -- pending intent whose attempt has ended may be replaced too: 25_sandboxes.sql)
      v := sessionq.new_generation(v.id, p_kind, p_reason);
      RETURN QUERY SELECT 'admitted'::text, v.operation_id, to_jsonb(v);
      RETURN;
    END IF;
    PERFORM sessionq.fail('SQ409', format(
      '%s %s has a pending %s operation; retry after it completes', p_of, v.id, lower(v.operation)));
  END IF;

  PERFORM sessionq.check_lifecycle_blockers(v, p_kind);  -- turns, quiescence, checkpoints (70_lifecycle_rules.sql)

  IF p_kind = 'SUSPEND' AND v.state = 'SUSPENDED' OR p_kind = 'RESUME' AND v.state = 'READY' THEN
    RETURN QUERY SELECT 'noop'::text, v.operation_id, to_jsonb(v);  -- already at the target state
    RETURN;
  END IF;
  IF p_kind = 'SUSPEND' AND v.state <> 'READY' OR p_kind = 'RESUME' AND v.state <> 'SUSPENDED' THEN
    PERFORM sessionq.fail('SQ412', format('%s %s is %s and cannot be %s', p_of, v.id, v.state,
                                          CASE p_kind WHEN 'SUSPEND' THEN 'suspended' ELSE 'resumed' END));
  END IF;
  v := sessionq.new_generation(v.id, p_kind, p_reason);
  RETURN QUERY SELECT 'admitted'::text, v.operation_id, to_jsonb(v);
END $$;
COMMENT ON FUNCTION sessionq.admit_operation(uuid, text, text, text, text, text) IS
  'Admit SUSPEND, RESUME or DELETE under the row lock of a Session (p_of session) or a Sandbox (p_of sandbox). Same kind pending: join. Another kind pending: ABORTED, except a DELETE supersedes an operation that never had an executor (and, for a Sandbox, sandbox_intent_replaceable). Already at target: noop. DELETE enters DELETING. outcome: admitted, joined or noop.';

-- claim_operation: take the execution claim of a generation for one attempt.
CREATE OR REPLACE FUNCTION sessionq.claim_operation(
  p_session uuid, p_generation uuid, p_executor uuid, p_lifetime double precision
) RETURNS TABLE (status text, previous_executor uuid, expires_at timestamptz, session jsonb)
LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
  v_prev uuid;
BEGIN
  IF p_lifetime IS NULL OR p_lifetime <= 0 THEN
    PERFORM sessionq.fail('SQ400', 'claim lifetime must be positive');
  END IF;
  SELECT * INTO v FROM sessionq.sessions s WHERE s.id = p_session FOR UPDATE;
  IF NOT FOUND THEN
    RETURN QUERY SELECT 'gone'::text, NULL::uuid, NULL::timestamptz, NULL::jsonb;
    RETURN;
  END IF;
  IF v.operation_id IS DISTINCT FROM p_generation THEN
    RETURN QUERY SELECT 'superseded'::text, v.executor_id, v.executor_expires_at, to_jsonb(v);
    RETURN;
  END IF;
  IF v.operation = 'NONE' THEN
    RETURN QUERY SELECT 'done'::text, v.executor_id, v.executor_expires_at, to_jsonb(v);
    RETURN;
  END IF;
  IF v.executor_id IS NOT NULL AND v.executor_expires_at > clock_timestamp() THEN
    RETURN QUERY SELECT 'busy'::text, v.executor_id, v.executor_expires_at, to_jsonb(v);
    RETURN;
  END IF;
  v_prev := v.executor_id;
  UPDATE sessionq.sessions s
     SET executor_id = p_executor,
         executor_expires_at = clock_timestamp() + make_interval(secs => p_lifetime),
         updated_at = clock_timestamp()
   WHERE s.id = p_session
  RETURNING * INTO v;
  RETURN QUERY SELECT 'claimed'::text, v_prev, v.executor_expires_at, to_jsonb(v);
END $$;
COMMENT ON FUNCTION sessionq.claim_operation(uuid, uuid, uuid, double precision) IS
  'Claim generation p_generation for executor p_executor for p_lifetime seconds. status: claimed (previous_executor set means earlier runtime work may have been issued: inspect before acting), busy (another live claim, until expires_at), superseded, done, gone.';

-- begin_operation: an executor's first step on a Session.
CREATE OR REPLACE FUNCTION sessionq.begin_operation(
  p_session uuid, p_executor uuid, p_lifetime double precision
) RETURNS TABLE (status text, previous_executor uuid, expires_at timestamptz, session jsonb, revision jsonb)
LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
  r sessionq.revisions;
BEGIN
  SELECT * INTO v FROM sessionq.sessions s WHERE s.id = p_session;
  IF NOT FOUND THEN
    RETURN QUERY SELECT 'gone'::text, NULL::uuid, NULL::timestamptz, NULL::jsonb, NULL::jsonb;
    RETURN;
  END IF;
  SELECT * INTO r FROM sessionq.revisions WHERE id = v.revision_id;
  -- The first attempt at a plain creation of a prepared revision has nothing to inspect in the
  -- runtime: its preparation (the revision is READY) is decided here and the generation claimed
  -- at once. Everything else (a fork, a retry after an earlier claim, Suspend, Resume, Delete)
  -- is returned unclaimed for the executor to prepare and then claim_operation.
  IF v.operation = 'CREATE' AND v.operation_id IS NOT NULL AND v.executor_id IS NULL AND v.actor_uid IS NULL
     AND v.source_checkpoint_id IS NULL AND r.state = 'READY' THEN
    RETURN QUERY SELECT c.status, c.previous_executor, c.expires_at, c.session, to_jsonb(r)
      FROM sessionq.claim_operation(p_session, v.operation_id, p_executor, p_lifetime) c;
    RETURN;
  END IF;
  RETURN QUERY SELECT 'prepare'::text, NULL::uuid, NULL::timestamptz, to_jsonb(v),
                      CASE WHEN r.id IS NULL THEN NULL ELSE to_jsonb(r) END;
END $$;
COMMENT ON FUNCTION sessionq.begin_operation(uuid, uuid, double precision) IS
  'An executor''s first step: the Session and its pinned revision. A first attempt at a plain creation of a READY revision (nothing to inspect in preparation) is claimed in the same call, with claim_operation''s statuses; otherwise status prepare (or gone) and nothing is claimed.';

-- record_actor: remember the Actor UID as soon as the runtime returns it (before completion).
CREATE OR REPLACE FUNCTION sessionq.record_actor(p_session uuid, p_generation uuid, p_executor uuid, p_uid text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  UPDATE sessionq.sessions s SET actor_uid = p_uid, updated_at = clock_timestamp()
   WHERE s.id = p_session AND s.operation_id = p_generation AND s.executor_id = p_executor
     AND s.operation = 'CREATE' AND (s.actor_uid IS NULL OR s.actor_uid = p_uid);
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ409', format('executor %s does not hold the creation claim of session %s', p_executor, p_session));
  END IF;
END $$;
COMMENT ON FUNCTION sessionq.record_actor(uuid, uuid, uuid, text) IS
  'Record the Actor UID of a creation as soon as it is known, by the claim holder only; a different UID is never adopted.';

-- release_operation: an attempt ends with an error; keep the intent and the executor id.
CREATE OR REPLACE FUNCTION sessionq.release_operation(
  p_session uuid, p_generation uuid, p_executor uuid, p_reason text DEFAULT NULL, p_message text DEFAULT NULL
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  UPDATE sessionq.sessions s SET executor_expires_at = least(s.executor_expires_at, clock_timestamp()),
                                 failure_reason = coalesce(p_reason, s.failure_reason),
                                 failure_message = CASE WHEN p_reason IS NULL THEN s.failure_message
                                                        ELSE sessionq.clip(p_message, 500) END,
                                 updated_at = clock_timestamp()
   WHERE s.id = p_session AND s.operation_id = p_generation AND s.executor_id = p_executor;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ409', format('executor %s no longer holds the claim of session %s', p_executor, p_session));
  END IF;
  -- a job waiting for this claim to lapse may claim now
  PERFORM sessionq.run_waiting_job(sessionq.job_lock('execute_operation', p_session::text));
END $$;
COMMENT ON FUNCTION sessionq.release_operation(uuid, uuid, uuid, text, text) IS
  'End an attempt without completing: the claim lapses now so a retry can claim at once (a job waiting for the claim to lapse becomes due now), but executor_id, the operation and all pins stay. p_reason and p_message, when given, record why the attempt failed (failure_reason, failure_message: shown to clients and in pending_operations until the operation completes or a new one is admitted; failed_operation_id stays unset, the operation is still pending). A stale executor gets ABORTED.';

-- complete_operation: record the successful outcome of the claim holder.
CREATE OR REPLACE FUNCTION sessionq.complete_operation(
  p_session uuid, p_generation uuid, p_executor uuid, p_result jsonb DEFAULT '{}', p_job bigint DEFAULT NULL,
  p_keep_job boolean DEFAULT false
) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
  v_kind text;
BEGIN
  SELECT * INTO v FROM sessionq.sessions s
   WHERE s.id = p_session AND s.operation_id = p_generation AND s.executor_id = p_executor
     AND s.operation <> 'NONE'
   FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ409', format('executor %s no longer holds the claim of session %s', p_executor, p_session));
  END IF;
  IF p_job IS NOT NULL THEN
    PERFORM sessionq.finish_operation_job(p_job, p_session, p_keep_job);  -- the executing job ends with its work
  END IF;
  -- a job that waits for this claim to lapse has nothing left to wait for: it runs now (and ends,
  -- unless a newer operation is current by then), so it never holds the queueing lock for long
  PERFORM sessionq.run_waiting_job(sessionq.job_lock('execute_operation', p_session::text));
  v_kind := v.operation;
  IF v.operation = 'DELETE' AND v.deletion_reason = 'idle_timeout' THEN
    -- idle expiry leaves no tombstone: the row, its shares and its creation receipt go
    DELETE FROM sessionq.sessions WHERE id = v.id;
    RETURN NULL;
  END IF;
  UPDATE sessionq.sessions s
     SET state = CASE v.operation WHEN 'CREATE' THEN 'READY' WHEN 'RESUME' THEN 'READY'
                                  WHEN 'SUSPEND' THEN 'SUSPENDED' WHEN 'DELETE' THEN 'DELETED' END,
         operation = 'NONE',
         executor_id = NULL, executor_expires_at = NULL,
         failure_reason = NULL, failure_message = NULL,
         actor_uid = CASE WHEN v.operation = 'DELETE' THEN NULL ELSE coalesce(p_result ->> 'actor_uid', s.actor_uid) END,
         revision_id = CASE WHEN v.operation = 'DELETE' THEN NULL ELSE s.revision_id END,
         snapshot_generation = coalesce((p_result -> 'snapshot' ->> 'generation')::bigint, s.snapshot_generation),
         snapshot_uri = CASE WHEN p_result -> 'snapshot' ? 'generation' THEN p_result -> 'snapshot' ->> 'uri'
                             ELSE s.snapshot_uri END,
         snapshot_status = coalesce(p_result -> 'snapshot' ->> 'status', s.snapshot_status),
         snapshot_event_seq = CASE WHEN p_result -> 'snapshot' ? 'generation' THEN s.last_event_seq
                                   ELSE s.snapshot_event_seq END,
         snapshot_bytes = sessionq.recorded_snapshot_bytes(s.snapshot_generation, s.snapshot_bytes,
                                                           p_result -> 'snapshot'),  -- 45_usage.sql
         updated_at = clock_timestamp()
   WHERE s.id = v.id
  RETURNING * INTO v;
  IF v.state = 'DELETED' THEN
    DELETE FROM sessionq.session_shares WHERE session_id = v.id;  -- revoke shares with the tombstone
  END IF;
  PERFORM sessionq.on_operation_completed(v, v_kind);  -- what other domains do then (70_lifecycle_rules.sql)
  RETURN to_jsonb(v);
END $$;
COMMENT ON FUNCTION sessionq.complete_operation(uuid, uuid, uuid, jsonb, bigint, boolean) IS
  'Complete the generation by its claim holder, atomically: CREATE and RESUME -> READY, SUSPEND -> SUSPENDED, DELETE -> DELETED tombstone (revision pin, runtime routing, checkpoint pin and shares released) or, for idle_timeout, removal of the row. The operation UUID stays. A stale executor gets ABORTED. p_job, the executing execute_operation job, is ended in the same transaction (finish_operation_job: kept as succeeded with p_keep_job, else deleted); a job of the Session waiting for the claim to lapse becomes due now.';

-- fail_preparation: a generation that never had an executor failed before issuing anything.
CREATE OR REPLACE FUNCTION sessionq.fail_preparation(
  p_session uuid, p_generation uuid, p_reason text, p_message text
) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
BEGIN
  SELECT * INTO v FROM sessionq.sessions s
   WHERE s.id = p_session AND s.operation_id = p_generation AND s.executor_id IS NULL FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ409', format('generation %s of session %s is no longer unclaimed and current', p_generation, p_session));
  END IF;
  UPDATE sessionq.sessions s
     SET operation_id = NULL,
         -- CREATE and DELETE stay pending (CREATING / DELETING keep task admission closed) for a retry;
         -- SUSPEND and RESUME are dropped
         operation = CASE WHEN v.operation IN ('CREATE', 'DELETE') THEN v.operation ELSE 'NONE' END,
         failure_reason = p_reason, failure_message = p_message, failed_operation_id = p_generation,
         updated_at = clock_timestamp()
   WHERE s.id = v.id
  RETURNING * INTO v;
  RETURN to_jsonb(v);
END $$;
COMMENT ON FUNCTION sessionq.fail_preparation(uuid, uuid, text, text) IS
  'Invalidate an unclaimed generation whose read-only preparation failed. CREATE and DELETE stay pending without a generation (a retry admits a new one; DELETING keeps task admission closed); SUSPEND and RESUME are dropped.';

-- observe: what a caller joined to a generation sees (no visibility filter: it was authorized at admission).
CREATE OR REPLACE FUNCTION sessionq.observe(p_session uuid, p_generation uuid)
RETURNS TABLE (status text, session jsonb) LANGUAGE plpgsql STABLE AS $$
DECLARE
  v sessionq.sessions;
BEGIN
  SELECT * INTO v FROM sessionq.sessions s WHERE s.id = p_session;
  IF NOT FOUND THEN
    RETURN QUERY SELECT 'gone'::text, NULL::jsonb;
  ELSIF v.operation_id = p_generation AND v.operation <> 'NONE' THEN
    RETURN QUERY SELECT 'pending'::text, to_jsonb(v);
  ELSIF v.operation_id = p_generation THEN
    RETURN QUERY SELECT 'done'::text, to_jsonb(v);
  ELSIF v.failed_operation_id = p_generation THEN
    RETURN QUERY SELECT 'failed'::text, to_jsonb(v);
  ELSE
    RETURN QUERY SELECT 'superseded'::text, to_jsonb(v);
  END IF;
END $$;
COMMENT ON FUNCTION sessionq.observe(uuid, uuid) IS
  'The state of generation p_generation for a joined caller: pending, done (with the Session, a tombstone included), failed (preparation), superseded, or gone (idle-deleted).';

CREATE OR REPLACE FUNCTION sessionq.get_session(
  p_session uuid, p_caller text, p_share_hash text, p_of text DEFAULT 'session'
) RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
  v sessionq.sessions;
BEGIN
  SELECT * INTO v FROM sessionq.sessions s WHERE s.id = p_session;
  IF sessionq.access(v, p_caller, p_share_hash, p_of) IS NULL THEN
    PERFORM sessionq.fail('SQ404', format('%s %s not found', p_of, p_session));
  END IF;
  RETURN to_jsonb(v);
END $$;
COMMENT ON FUNCTION sessionq.get_session(uuid, text, text, text) IS
  'Read a Session (p_of sandbox: a Sandbox) the caller may see (owner or share); NOT_FOUND otherwise. Reads change nothing.';

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

CREATE OR REPLACE FUNCTION sessionq.rename_session(p_session uuid, p_caller text, p_share_hash text, p_name text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
BEGIN
  v := sessionq.visible_session(p_session, p_caller, p_share_hash, 'owner');
  UPDATE sessionq.sessions s SET name = coalesce(p_name, ''), updated_at = clock_timestamp()
   WHERE s.id = v.id RETURNING * INTO v;
  RETURN to_jsonb(v);
END $$;
COMMENT ON FUNCTION sessionq.rename_session(uuid, text, text, text) IS
  'Rename a Session (empty clears the name). Owner only. Does not touch the idle clock.';

CREATE OR REPLACE FUNCTION sessionq.create_share(
  p_session uuid, p_caller text, p_permission text, p_ttl double precision, p_token_hash text
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
  v_share sessionq.session_shares;
BEGIN
  v := sessionq.visible_session(p_session, p_caller, NULL, 'owner');
  IF v.state = 'DELETING' THEN
    PERFORM sessionq.fail('SQ412', format('session %s is being deleted', v.id));
  END IF;
  INSERT INTO sessionq.session_shares (session_id, permission, token_hash, created_by, expires_at)
  VALUES (v.id, p_permission, p_token_hash, p_caller,
          CASE WHEN p_ttl IS NOT NULL THEN clock_timestamp() + make_interval(secs => p_ttl) END)
  RETURNING * INTO v_share;
  RETURN to_jsonb(v_share);
END $$;
COMMENT ON FUNCTION sessionq.create_share(uuid, text, text, double precision, text) IS
  'Share a Session for p_ttl seconds (NULL: until revoked) with whoever holds the token whose SHA-256 is p_token_hash. Owner only.';

CREATE OR REPLACE FUNCTION sessionq.list_shares(p_session uuid, p_caller text, p_after uuid, p_limit integer)
RETURNS SETOF jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
  v sessionq.sessions;
BEGIN
  SELECT * INTO v FROM sessionq.sessions s WHERE s.id = p_session;
  IF sessionq.access(v, p_caller, NULL) IS DISTINCT FROM 'owner' THEN
    PERFORM sessionq.fail('SQ404', format('session %s not found', p_session));
  END IF;
  RETURN QUERY SELECT to_jsonb(sh) - 'token_hash' FROM sessionq.session_shares sh
    WHERE sh.session_id = p_session AND (p_after IS NULL OR sh.id > p_after)
    ORDER BY sh.id LIMIT p_limit;
END $$;
COMMENT ON FUNCTION sessionq.list_shares(uuid, text, uuid, integer) IS
  'Shares of a Session, for its owner, in id order after p_after.';

CREATE OR REPLACE FUNCTION sessionq.revoke_share(p_share uuid, p_caller text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM sessionq.session_shares sh
   USING sessionq.sessions s
   WHERE sh.id = p_share AND s.id = sh.session_id AND s.creator = p_caller AND s.state <> 'DELETED';
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ404', format('share %s not found', p_share));
  END IF;
END $$;
COMMENT ON FUNCTION sessionq.revoke_share(uuid, text) IS 'Revoke a share of one of the caller''s Sessions.';

-- visible_actors: which of a batch of runtime Actors the caller may see in an inventory listing.
CREATE OR REPLACE FUNCTION sessionq.visible_actors(
  p_caller text, p_share_hash text, p_atespaces text[], p_names text[], p_uids text[]
) RETURNS TABLE (actor_atespace text, actor_name text) LANGUAGE sql STABLE AS $$
  SELECT DISTINCT s.actor_atespace, s.actor_name
    FROM unnest(p_atespaces, p_names, p_uids) AS r(atespace, name, uid)
    JOIN sessionq.sessions s ON s.actor_atespace = r.atespace AND s.actor_name = r.name
   WHERE s.state <> 'DELETED'
     AND (r.uid IS NULL OR s.actor_uid IS NULL OR s.actor_uid = r.uid)
     AND sessionq.access(s, p_caller, p_share_hash, s.kind) IS NOT NULL
$$;
COMMENT ON FUNCTION sessionq.visible_actors(text, text, text[], text[], text[]) IS
  'Of a batch of runtime Actors (atespace, name, uid), those that are the Actor of a live Session (or Sandbox) the caller owns or holds a valid share of; a same-name Actor with another UID than recorded is not theirs. One query per inventory batch.';

-- get_sessions: get_session for a batch of callers at once (the store coalesces concurrent reads).
CREATE OR REPLACE FUNCTION sessionq.get_sessions(
  p_ids uuid[], p_callers text[], p_share_hashes text[], p_of text[]
) RETURNS TABLE (ord integer, session jsonb) LANGUAGE sql STABLE AS $$
  SELECT r.ord::integer, to_jsonb(s)
    FROM unnest(p_ids, p_callers, p_share_hashes, p_of) WITH ORDINALITY AS r(id, caller, share_hash, of_kind, ord)
    JOIN sessionq.sessions s ON s.id = r.id
   WHERE sessionq.access(s, r.caller, r.share_hash, r.of_kind) IS NOT NULL
$$;
COMMENT ON FUNCTION sessionq.get_sessions(uuid[], text[], text[], text[]) IS
  'get_session for a batch: element i of the four arrays is one caller''s read (Session id, caller, share token hash, kind). Returns (i, row) for each read whose caller may see the row under exactly get_session''s rule (sessionq.access); a read with no row answered is NOT_FOUND for its caller. Reads change nothing.';

-- get_session_views: what GetSession shows of each read of a batch, as plain columns (no JSON).
CREATE OR REPLACE FUNCTION sessionq.get_session_views(
  p_ids uuid[], p_callers text[], p_share_hashes text[], p_of text[]
) RETURNS TABLE (
  ord integer, id text, creator text, revision_id text, agent_namespace text, agent_name text, state text,
  operation text, name text, created_us bigint, updated_us bigint, failure_reason text, failure_message text,
  quiescence_failure jsonb
) LANGUAGE sql STABLE AS $$
  SELECT r.ord::integer, s.id::text, s.creator, s.revision_id::text, s.agent_namespace, s.agent_name, s.state,
         s.operation, s.name, (extract(epoch FROM s.created_at) * 1000000)::bigint,
         (extract(epoch FROM s.updated_at) * 1000000)::bigint, s.failure_reason, s.failure_message,
         s.quiescence_failure
    FROM unnest(p_ids, p_callers, p_share_hashes, p_of) WITH ORDINALITY AS r(id, caller, share_hash, of_kind, ord)
    JOIN sessionq.sessions s ON s.id = r.id
   WHERE sessionq.access(s, r.caller, r.share_hash, r.of_kind) IS NOT NULL
$$;
COMMENT ON FUNCTION sessionq.get_session_views(uuid[], text[], text[], text[]) IS
  'get_sessions answering only what GetSession shows, as columns: for each read i of the four arrays (Session id, caller, share token hash, kind) whose caller may see the row under get_session''s rule (sessionq.access), (i, id, creator, revision, agent, state, operation, name, created and updated in microseconds since the epoch, failure reason and message, quiescence failure). A read with no row answered is NOT_FOUND for its caller. Reads change nothing.';

-- list_session_views: ListSessions' page as plain columns: the rows of session_page with what
-- GetSession shows of each (get_session_views' columns), read without JSON.
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
