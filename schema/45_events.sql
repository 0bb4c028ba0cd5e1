-- Lifecycle events: one row for every Session transition a user or operator cares about, written in
-- the transition's own transaction.
--
-- The events are derived from the rows themselves, not written by each procedure: triggers on
-- sessionq.sessions (created, ready, suspended, resumed, paused, expired, deleting, deleted,
-- quiescence_failed, runtime_lost, and forked on the fork's source) and on sessionq.checkpoints
-- (checkpointed) see every change of state whichever procedure makes it, so a transition that
-- rolls back leaves no event and a new procedure needs no event code. expiring_soon is written by
-- the leader's periodic tick (announce_expiring). Sandboxes (kind sandbox) have no events.
--
-- An event never carries a secret or a message body: the Session, its Agent and owner, the
-- operation (generation) or turn, the time and a small payload of ids, reasons and snapshot URIs.
--
-- Order. seq is taken when the row is inserted, but transactions commit in another order, so a
-- reader that resumed after the highest seq it saw could miss an event committed later with a
-- smaller one. A reader therefore orders by (xid, seq), the inserting transaction's id first, and
-- reads only events of transactions older than every one still running (pg_snapshot_xmin of its
-- snapshot): no event can appear later before a position it has read, so a cursor (xid, seq)
-- resumes exactly after the last event seen, on any replica, after any restart.
--
-- The file is idempotent (it is also the upgrade that brings the domain to an older database).

CREATE TABLE IF NOT EXISTS sessionq.lifecycle_events (
  seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  xid             xid8 NOT NULL DEFAULT pg_current_xact_id(),
  session_id      uuid NOT NULL,  -- no foreign key: events outlive their Session
  kind            text NOT NULL CHECK (kind IN (
                    'created', 'ready', 'suspended', 'resumed', 'paused', 'checkpointed', 'forked',
                    'quiescence_failed', 'expiring_soon', 'expired', 'deleting', 'deleted', 'runtime_lost')),
  owner           text NOT NULL,
  agent_namespace text NOT NULL,
  agent_name      text NOT NULL,
  operation_id    uuid,
  task_id         text,
  payload         jsonb NOT NULL DEFAULT '{}',
  created_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS lifecycle_events_position_idx ON sessionq.lifecycle_events (xid, seq);
CREATE INDEX IF NOT EXISTS lifecycle_events_session_idx ON sessionq.lifecycle_events (session_id, xid, seq);
CREATE INDEX IF NOT EXISTS lifecycle_events_owner_idx ON sessionq.lifecycle_events (owner, xid, seq);
COMMENT ON TABLE sessionq.lifecycle_events IS
  'Lifecycle events of Sessions, one per transition, written in the transition''s transaction by the triggers of 45_events.sql (expiring_soon by announce_expiring). Readers page by the position (xid, seq) up to the oldest running transaction (event_page), so a cursor resumes exactly after the last event seen. Purged after events.retention (purge_lifecycle_events). Never a secret or a message body.';
COMMENT ON COLUMN sessionq.lifecycle_events.seq IS 'Insertion order within a transaction; with xid the event''s position and its public id (<xid>-<seq>).';
COMMENT ON COLUMN sessionq.lifecycle_events.xid IS 'The inserting transaction (pg_current_xact_id): positions are ordered by it first, so that events committed late never land before a position a reader has passed.';
COMMENT ON COLUMN sessionq.lifecycle_events.session_id IS 'The Session (kept after the Session is deleted: no foreign key).';
COMMENT ON COLUMN sessionq.lifecycle_events.kind IS 'created, ready, suspended, resumed, paused, checkpointed, forked, quiescence_failed, expiring_soon, expired, deleting, deleted or runtime_lost (docs/events.md).';
COMMENT ON COLUMN sessionq.lifecycle_events.owner IS 'The Session''s creator: who sees the event (with administrators, and holders of a live share of the Session).';
COMMENT ON COLUMN sessionq.lifecycle_events.agent_namespace IS 'The Agent the Session runs (namespace).';
COMMENT ON COLUMN sessionq.lifecycle_events.agent_name IS 'The Agent the Session runs (name).';
COMMENT ON COLUMN sessionq.lifecycle_events.operation_id IS 'The generation of the lifecycle operation the event belongs to (NULL for quiescence and expiring_soon).';
COMMENT ON COLUMN sessionq.lifecycle_events.task_id IS 'The turn the event follows (quiescence events), else NULL.';
COMMENT ON COLUMN sessionq.lifecycle_events.payload IS 'A small JSON object of ids, reasons and snapshot references (docs/events.md); never a secret or a message body.';
COMMENT ON COLUMN sessionq.lifecycle_events.created_at IS 'Database time of the transition.';

-- record_event: the one insert of an event (the triggers and announce_expiring call it).
CREATE OR REPLACE FUNCTION sessionq.record_event(
  p_session sessionq.sessions, p_kind text, p_payload jsonb DEFAULT '{}', p_operation uuid DEFAULT NULL,
  p_task text DEFAULT NULL
) RETURNS void LANGUAGE sql AS $$
  INSERT INTO sessionq.lifecycle_events (session_id, kind, owner, agent_namespace, agent_name, operation_id, task_id, payload)
  VALUES (p_session.id, p_kind, p_session.creator, p_session.agent_namespace, p_session.agent_name, p_operation,
          p_task, jsonb_strip_nulls(coalesce(p_payload, '{}')));
  -- wakes the readers that follow (delivered at commit; identical payloads of one transaction fold)
  SELECT sessionq.notify('sessionq_event', jsonb_build_object('session', p_session.id));
$$;
COMMENT ON FUNCTION sessionq.record_event(sessionq.sessions, text, jsonb, uuid, text) IS
  'Insert one lifecycle event of Session p_session (its owner and Agent copied from the row): kind p_kind, the payload without null members, the operation and the turn it belongs to; NOTIFY sessionq_event {"session"} wakes the readers that follow.';

-- event_snapshot: the snapshot reference an event carries.
CREATE OR REPLACE FUNCTION sessionq.event_snapshot(p_session sessionq.sessions) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN p_session.snapshot_generation IS NOT NULL THEN jsonb_strip_nulls(jsonb_build_object(
    'generation', p_session.snapshot_generation, 'uri', p_session.snapshot_uri, 'status', p_session.snapshot_status)) END
$$;
COMMENT ON FUNCTION sessionq.event_snapshot(sessionq.sessions) IS
  'The snapshot a suspension recorded, as an event payload member {generation, uri, status}, or NULL.';

-- session_events: derive the event of a Session row's change (trigger).
CREATE OR REPLACE FUNCTION sessionq.session_events() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_source uuid;
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.source_checkpoint_id IS NOT NULL THEN
      SELECT c.session_id INTO v_source FROM sessionq.checkpoints c WHERE c.id = NEW.source_checkpoint_id;
    END IF;
    PERFORM sessionq.record_event(NEW, 'created', jsonb_build_object(
      'request_kind', NEW.request_kind,
      'source_checkpoint_id', NEW.source_checkpoint_id, 'source_session_id', v_source), NEW.operation_id);
    IF v_source IS NOT NULL THEN
      -- the source Session's own event, under its owner (who may not be the fork's)
      PERFORM sessionq.record_event(s, 'forked', jsonb_build_object(
        'checkpoint_id', NEW.source_checkpoint_id, 'fork_session_id', NEW.id))
        FROM sessionq.sessions s WHERE s.id = v_source AND s.state <> 'DELETED';
    END IF;
    RETURN NULL;
  END IF;
  IF TG_OP = 'DELETE' THEN  -- an idle deletion completed: the row goes, no tombstone
    PERFORM sessionq.record_event(OLD, 'deleted', jsonb_build_object('reason', OLD.deletion_reason), OLD.operation_id);
    RETURN NULL;
  END IF;
  IF OLD.state IS DISTINCT FROM NEW.state THEN
    IF NEW.state = 'READY' AND OLD.state = 'CREATING' THEN
      PERFORM sessionq.record_event(NEW, 'ready', '{}', NEW.operation_id);
    ELSIF NEW.state = 'READY' THEN
      PERFORM sessionq.record_event(NEW, 'resumed', '{}', NEW.operation_id);
    ELSIF NEW.state = 'SUSPENDED' THEN
      PERFORM sessionq.record_event(NEW, 'suspended', jsonb_build_object(
        'mode', 'explicit', 'snapshot', sessionq.event_snapshot(NEW)), NEW.operation_id);
    ELSIF NEW.state = 'DELETING' THEN
      PERFORM sessionq.record_event(NEW, CASE WHEN NEW.deletion_reason = 'idle_timeout' THEN 'expired' ELSE 'deleting' END,
        jsonb_build_object('reason', NEW.deletion_reason), NEW.operation_id);
    ELSIF NEW.state = 'DELETED' THEN
      PERFORM sessionq.record_event(NEW, 'deleted', jsonb_build_object('reason', NEW.deletion_reason), NEW.operation_id);
    END IF;
    RETURN NULL;
  END IF;
  IF OLD.idle_executor IS NOT NULL AND NEW.idle_executor IS NULL AND NEW.idle_boundary_id IS NULL THEN
    -- a quiescence outcome recorded (finish_idle): a new snapshot, or an Actor stopped without one
    IF NEW.snapshot_generation IS DISTINCT FROM OLD.snapshot_generation THEN
      PERFORM sessionq.record_event(NEW, 'suspended', jsonb_build_object(
        'mode', 'automatic', 'snapshot', sessionq.event_snapshot(NEW)));
    ELSE
      PERFORM sessionq.record_event(NEW, 'paused', '{}');
    END IF;
    RETURN NULL;
  END IF;
  IF NEW.quiescence_failure IS NOT NULL
     AND (OLD.quiescence_failure ->> 'reason') IS DISTINCT FROM (NEW.quiescence_failure ->> 'reason') THEN
    PERFORM sessionq.record_event(NEW,
      CASE WHEN NEW.quiescence_failure ->> 'reason' = 'RuntimeUnavailable' THEN 'runtime_lost' ELSE 'quiescence_failed' END,
      jsonb_build_object('reason', NEW.quiescence_failure ->> 'reason', 'during', 'quiescence'),
      NULL, nullif(NEW.quiescence_failure ->> 'task_id', ''));
    RETURN NULL;
  END IF;
  IF NEW.failed_operation_id IS DISTINCT FROM OLD.failed_operation_id AND NEW.failure_reason = 'ActorReplaced' THEN
    PERFORM sessionq.record_event(NEW, 'runtime_lost', jsonb_build_object('reason', NEW.failure_reason, 'during', 'preparation'),
                                  NEW.failed_operation_id);
  END IF;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION sessionq.session_events() IS
  'Trigger on sessionq.sessions (kind session): the lifecycle event of the change, in its transaction. Insert: created (with the fork''s source checkpoint and Session) and, for a fork, forked on the source Session. Delete (idle deletion completed): deleted. State change: ready (CREATING -> READY), resumed (-> READY), suspended mode explicit with the snapshot, expired (DELETING by idle_timeout) or deleting, deleted. A quiescence outcome (the idle claim ended by finish_idle): suspended mode automatic with the new snapshot, or paused without one. A new quiescence failure reason: quiescence_failed, or runtime_lost for RuntimeUnavailable. A preparation that found the Actor replaced (ActorReplaced): runtime_lost. At most one event per change of the row.';

DROP TRIGGER IF EXISTS sessions_events_insert ON sessionq.sessions;
CREATE TRIGGER sessions_events_insert AFTER INSERT ON sessionq.sessions
  FOR EACH ROW WHEN (NEW.kind = 'session') EXECUTE FUNCTION sessionq.session_events();
DROP TRIGGER IF EXISTS sessions_events_delete ON sessionq.sessions;
CREATE TRIGGER sessions_events_delete AFTER DELETE ON sessionq.sessions
  FOR EACH ROW WHEN (OLD.kind = 'session' AND OLD.state = 'DELETING') EXECUTE FUNCTION sessionq.session_events();
-- only the changes that are transitions: claims, progress writes and turns fire nothing
DROP TRIGGER IF EXISTS sessions_events_update ON sessionq.sessions;
CREATE TRIGGER sessions_events_update AFTER UPDATE ON sessionq.sessions
  FOR EACH ROW
  WHEN (NEW.kind = 'session' AND (
        OLD.state IS DISTINCT FROM NEW.state
        OR (OLD.idle_executor IS NOT NULL AND NEW.idle_executor IS NULL)
        OR OLD.quiescence_failure IS DISTINCT FROM NEW.quiescence_failure
        OR OLD.failed_operation_id IS DISTINCT FROM NEW.failed_operation_id))
  EXECUTE FUNCTION sessionq.session_events();

-- checkpoint_events: checkpointed, when a checkpoint becomes READY (trigger).
CREATE OR REPLACE FUNCTION sessionq.checkpoint_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM sessionq.record_event(s, 'checkpointed', jsonb_build_object(
    'checkpoint_id', NEW.id, 'task_id', NEW.head_task_id, 'snapshot_generation', NEW.snapshot_generation))
    FROM sessionq.sessions s WHERE s.id = NEW.session_id AND s.kind = 'session';
  RETURN NULL;
END $$;
COMMENT ON FUNCTION sessionq.checkpoint_events() IS
  'Trigger on sessionq.checkpoints: the checkpointed event of the source Session when a checkpoint becomes READY (its id, head turn and snapshot generation), in the transaction that completes it.';
DROP TRIGGER IF EXISTS checkpoints_events ON sessionq.checkpoints;
CREATE TRIGGER checkpoints_events AFTER UPDATE ON sessionq.checkpoints
  FOR EACH ROW WHEN (NEW.state = 'READY' AND OLD.state IS DISTINCT FROM 'READY')
  EXECUTE FUNCTION sessionq.checkpoint_events();

-- announce_expiring: expiring_soon for Sessions whose idle TTL ends within the lead time.
CREATE OR REPLACE FUNCTION sessionq.announce_expiring(p_ttl double precision, p_lead double precision, p_limit integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz := clock_timestamp();
  v_cutoff timestamptz := clock_timestamp() - make_interval(secs => greatest(p_ttl - p_lead, 0));
  v_count integer := 0;
  v sessionq.sessions;
BEGIN
  IF p_ttl <= 0 OR p_lead <= 0 THEN
    RETURN 0;
  END IF;
  FOR v IN
    SELECT s.* FROM sessionq.sessions s
     WHERE s.state IN ('READY', 'SUSPENDED') AND s.kind = 'session' AND s.operation = 'NONE'
       AND greatest(s.created_at, s.last_event_at) < v_cutoff
       AND NOT EXISTS (SELECT 1 FROM sessionq.lifecycle_events e
                        WHERE e.session_id = s.id AND e.kind = 'expiring_soon'
                          AND e.created_at >= greatest(s.created_at, s.last_event_at))
     ORDER BY greatest(s.created_at, s.last_event_at), s.id
     LIMIT p_limit
     FOR UPDATE OF s SKIP LOCKED
  LOOP
    PERFORM sessionq.record_event(v, 'expiring_soon', jsonb_build_object(
      'expires_at', greatest(v.created_at, v.last_event_at) + make_interval(secs => p_ttl),
      'idle_since', greatest(v.created_at, v.last_event_at), 'lead_seconds', p_lead));
    v_count := v_count + 1;
  END LOOP;
  RETURN v_count;
END $$;
COMMENT ON FUNCTION sessionq.announce_expiring(double precision, double precision, integer) IS
  'Record expiring_soon, at most p_limit at a time, for each idle READY or SUSPENDED Session whose idle clock (later of creation and newest turn event) is older than p_ttl - p_lead seconds and that has none since its clock last moved (payload: expires_at, idle_since, lead_seconds). Locked rows are skipped (a turn is being admitted); nothing when p_ttl or p_lead is 0. Returns how many were recorded.';

-- event_visible: whether a caller may see an event.
CREATE OR REPLACE FUNCTION sessionq.event_visible(
  p_owner text, p_session uuid, p_caller text, p_share_hash text, p_admin boolean
) RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT p_admin OR p_owner = p_caller
      OR (p_share_hash IS NOT NULL AND sessionq.share_permission(p_session, p_share_hash) IS NOT NULL)
$$;
COMMENT ON FUNCTION sessionq.event_visible(text, uuid, text, text, boolean) IS
  'An event is visible to administrators (auth.admins), to the Session''s owner, and to the holder of an unexpired share of its Session (revoked with the Session''s deletion).';

-- event_page: one page of the events a caller may see, after a position.
CREATE OR REPLACE FUNCTION sessionq.event_page(
  p_caller text, p_share_hash text, p_admin boolean, p_session uuid, p_kinds text[],
  p_after_xid xid8, p_after_seq bigint, p_limit integer
) RETURNS SETOF sessionq.lifecycle_events LANGUAGE plpgsql STABLE AS $$
DECLARE
  -- only events of transactions older than every running one: no event may commit before them later
  v_horizon xid8 := pg_snapshot_xmin(pg_current_snapshot());
BEGIN
  IF p_session IS NOT NULL THEN
    RETURN QUERY
    SELECT e.* FROM sessionq.lifecycle_events e
     WHERE e.session_id = p_session AND e.xid < v_horizon
       AND (p_after_xid IS NULL OR (e.xid, e.seq) > (p_after_xid, p_after_seq))
       AND (p_kinds IS NULL OR e.kind = ANY (p_kinds))
       AND sessionq.event_visible(e.owner, e.session_id, p_caller, p_share_hash, p_admin)
     ORDER BY e.xid, e.seq LIMIT p_limit;
  ELSIF p_admin THEN
    RETURN QUERY
    SELECT e.* FROM sessionq.lifecycle_events e
     WHERE e.xid < v_horizon AND (p_after_xid IS NULL OR (e.xid, e.seq) > (p_after_xid, p_after_seq))
       AND (p_kinds IS NULL OR e.kind = ANY (p_kinds))
     ORDER BY e.xid, e.seq LIMIT p_limit;
  ELSE
    -- the caller's own Sessions' events (a share token names one Session: p_session)
    RETURN QUERY
    SELECT e.* FROM sessionq.lifecycle_events e
     WHERE e.owner = p_caller AND e.xid < v_horizon
       AND (p_after_xid IS NULL OR (e.xid, e.seq) > (p_after_xid, p_after_seq))
       AND (p_kinds IS NULL OR e.kind = ANY (p_kinds))
     ORDER BY e.xid, e.seq LIMIT p_limit;
  END IF;
END $$;
COMMENT ON FUNCTION sessionq.event_page(text, text, boolean, uuid, text[], xid8, bigint, integer) IS
  'Up to p_limit events the caller may see (event_visible), of one Session (p_session) or of every Session the caller owns (administrators: every Session), of the kinds p_kinds (NULL: all), in position order (xid, seq) after (p_after_xid, p_after_seq) (NULL: from the oldest kept). Only events of transactions older than the oldest one running are returned, so a later page never holds an event positioned before this one''s last.';

-- event_position_known: whether a position names an event that exists or existed.
CREATE OR REPLACE FUNCTION sessionq.event_position_known(p_xid xid8, p_seq bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT EXISTS (SELECT 1 FROM sessionq.lifecycle_events e WHERE e.xid = p_xid AND e.seq = p_seq)
      OR p_seq < coalesce((SELECT min(e.seq) FROM sessionq.lifecycle_events e), 0)
$$;
COMMENT ON FUNCTION sessionq.event_position_known(xid8, bigint) IS
  'Whether a position (a Last-Event-ID or page token) is that of a kept event, or of one already purged (seq below the oldest kept). A position that never existed is refused by the callers.';

-- purge_lifecycle_events: retention, in batches.
CREATE OR REPLACE FUNCTION sessionq.purge_lifecycle_events(p_retention double precision, p_limit integer DEFAULT 1000)
RETURNS integer LANGUAGE sql AS $$
  WITH doomed AS (
    SELECT e.seq FROM sessionq.lifecycle_events e ORDER BY e.seq LIMIT p_limit
  ), gone AS (
    DELETE FROM sessionq.lifecycle_events e USING doomed d
     WHERE e.seq = d.seq AND e.created_at < clock_timestamp() - make_interval(secs => p_retention)
    RETURNING 1
  )
  SELECT count(*)::integer FROM gone
$$;
COMMENT ON FUNCTION sessionq.purge_lifecycle_events(double precision, integer) IS
  'Delete events older than p_retention seconds among the p_limit oldest (by seq, which follows time closely), so one call is one short batch; returns how many went. The periodic purge_lifecycle_events task repeats it.';
