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

-- Webhooks: subscriptions (each its owner's, or global: an operator's, for every Session) and the
-- deliveries of each event to each subscription that matches it, written with the event. The
-- subscription's deliver_webhooks job delivers them, in event order per Session (domain/webhooks.py).
CREATE TABLE IF NOT EXISTS sessionq.webhook_subscriptions (
  id                   uuid PRIMARY KEY DEFAULT sessionq.uuid_v7(),
  owner                text NOT NULL,
  is_global            boolean NOT NULL DEFAULT false,
  url                  text NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
  event_types          text[] NOT NULL DEFAULT '{}' CHECK (cardinality(event_types) <= 13),
  agent_namespace      text CHECK (length(agent_namespace) <= 253),
  agent_name           text CHECK (length(agent_name) <= 253),
  secret               text NOT NULL,
  enabled              boolean NOT NULL DEFAULT true,
  consecutive_failures integer NOT NULL DEFAULT 0,
  last_failure         text,
  disabled_at          timestamptz,
  created_at           timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at           timestamptz NOT NULL DEFAULT clock_timestamp(),
  CONSTRAINT webhook_agent_filter_whole CHECK ((agent_namespace IS NULL) = (agent_name IS NULL))
);
CREATE INDEX IF NOT EXISTS webhook_subscriptions_enabled_idx ON sessionq.webhook_subscriptions (owner) WHERE enabled;
COMMENT ON TABLE sessionq.webhook_subscriptions IS
  'Webhook subscriptions: where the lifecycle events of the owner''s Sessions (is_global: of every Session; operators only) are POSTed, signed as Standard Webhooks say with the secret (shown once at creation, never read back by the API). Disabled after webhooks.disableAfterFailures failed attempts in a row.';
COMMENT ON COLUMN sessionq.webhook_subscriptions.owner IS 'Who created it: it receives the events of this user''s Sessions.';
COMMENT ON COLUMN sessionq.webhook_subscriptions.is_global IS 'Created by an administrator for every Session''s events.';
COMMENT ON COLUMN sessionq.webhook_subscriptions.url IS 'The http(s) receiver; checked against the push target rules when created and before every delivery.';
COMMENT ON COLUMN sessionq.webhook_subscriptions.event_types IS 'The event kinds delivered (empty: all).';
COMMENT ON COLUMN sessionq.webhook_subscriptions.agent_namespace IS 'Only events of Sessions of this Agent (namespace; NULL: any Agent).';
COMMENT ON COLUMN sessionq.webhook_subscriptions.agent_name IS 'Only events of Sessions of this Agent (name; NULL: any Agent).';
COMMENT ON COLUMN sessionq.webhook_subscriptions.secret IS 'The signing secret (whsec_<base64>). Write-only: no procedure or view returns it but the delivery claim.';
COMMENT ON COLUMN sessionq.webhook_subscriptions.enabled IS 'False once disabled after a run of failures: no new deliveries, the pending ones failed.';
COMMENT ON COLUMN sessionq.webhook_subscriptions.consecutive_failures IS 'Failed delivery attempts since the last success.';
COMMENT ON COLUMN sessionq.webhook_subscriptions.last_failure IS 'The error of the last failed attempt (an HTTP status or a connection error).';
COMMENT ON COLUMN sessionq.webhook_subscriptions.disabled_at IS 'When it was disabled after a run of failures.';
COMMENT ON COLUMN sessionq.webhook_subscriptions.created_at IS 'Database time of its creation.';
COMMENT ON COLUMN sessionq.webhook_subscriptions.updated_at IS 'Database time of the last change (a failed attempt, or the success that ended a run of failures, included).';

CREATE TABLE IF NOT EXISTS sessionq.webhook_deliveries (
  id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  -- no foreign key: every transition would take a share lock on its subscription's row (one row
  -- for every Session's transitions); delete_webhook deletes the deliveries with the subscription
  subscription_id uuid NOT NULL,
  event_seq       bigint NOT NULL,
  event_xid       xid8 NOT NULL,
  session_id      uuid NOT NULL,
  state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
  attempts        integer NOT NULL DEFAULT 0,
  last_status     integer,
  last_error      text,
  claimed_by      uuid,
  claimed_until   timestamptz,
  created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
  finished_at     timestamptz,
  CONSTRAINT webhook_deliveries_once UNIQUE (subscription_id, event_seq)
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_event_idx ON sessionq.webhook_deliveries (event_seq);
CREATE INDEX IF NOT EXISTS webhook_deliveries_pending_idx
  ON sessionq.webhook_deliveries (subscription_id, session_id, event_xid, event_seq) WHERE state = 'pending';
COMMENT ON TABLE sessionq.webhook_deliveries IS
  'One delivery of one event to one subscription, written in the event''s transaction; delivered in event order per subscription and Session by the deliver_webhooks job (retried with backoff; given up after webhooks.maxAttempts attempts). Operators read them in sessionq.webhook_delivery_log.';
COMMENT ON COLUMN sessionq.webhook_deliveries.event_seq IS 'The event (lifecycle_events.seq).';
COMMENT ON COLUMN sessionq.webhook_deliveries.event_xid IS 'The event''s transaction: with event_seq its position, the delivery order.';
COMMENT ON COLUMN sessionq.webhook_deliveries.session_id IS 'The event''s Session: the deliveries of one subscription and Session go out in order.';
COMMENT ON COLUMN sessionq.webhook_deliveries.state IS 'pending, delivered (a 2xx answer) or failed (given up, or its subscription disabled).';
COMMENT ON COLUMN sessionq.webhook_deliveries.attempts IS 'Attempts made.';
COMMENT ON COLUMN sessionq.webhook_deliveries.last_status IS 'The HTTP status of the last attempt, when one came.';
COMMENT ON COLUMN sessionq.webhook_deliveries.last_error IS 'What failed in the last attempt.';
COMMENT ON COLUMN sessionq.webhook_deliveries.claimed_by IS 'The job attempt delivering it now (with claimed_until, a lease).';
COMMENT ON COLUMN sessionq.webhook_deliveries.claimed_until IS 'When the claim lapses: another job may take the stream over.';
COMMENT ON COLUMN sessionq.webhook_deliveries.created_at IS 'Database time of the event.';
COMMENT ON COLUMN sessionq.webhook_deliveries.finished_at IS 'When it was delivered or given up.';

-- record_event: the one insert of an event (the triggers and announce_expiring call it).
CREATE OR REPLACE FUNCTION sessionq.record_event(
  p_session sessionq.sessions, p_kind text, p_payload jsonb DEFAULT '{}', p_operation uuid DEFAULT NULL,
  p_task text DEFAULT NULL
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_seq bigint;
  v_sub uuid;
BEGIN
  INSERT INTO sessionq.lifecycle_events (session_id, kind, owner, agent_namespace, agent_name, operation_id, task_id, payload)
  VALUES (p_session.id, p_kind, p_session.creator, p_session.agent_namespace, p_session.agent_name, p_operation,
          p_task, jsonb_strip_nulls(coalesce(p_payload, '{}')))
  RETURNING seq INTO v_seq;
  -- wakes the readers that follow (delivered at commit; identical payloads of one transaction fold)
  PERFORM sessionq.notify('sessionq_event', jsonb_build_object('session', p_session.id));
  FOR v_sub IN
    INSERT INTO sessionq.webhook_deliveries (subscription_id, event_seq, event_xid, session_id)
    SELECT w.id, v_seq, pg_current_xact_id(), p_session.id FROM sessionq.webhook_subscriptions w
     WHERE w.enabled AND (w.is_global OR w.owner = p_session.creator)
       AND (cardinality(w.event_types) = 0 OR p_kind = ANY (w.event_types))
       AND (w.agent_namespace IS NULL
            OR w.agent_namespace = p_session.agent_namespace AND w.agent_name = p_session.agent_name)
    RETURNING subscription_id
  LOOP
    -- one waiting job per subscription: under load it takes every event that came while it waited
    -- (and the events of concurrent transitions do not queue behind each other's defer)
    IF NOT sessionq.job_waiting(sessionq.job_lock('deliver_webhooks', v_sub::text)) THEN
      PERFORM sessionq.defer('deliver_webhooks', v_sub::text, jsonb_build_object('subscription_id', v_sub));
    END IF;
  END LOOP;
END $$;
COMMENT ON FUNCTION sessionq.record_event(sessionq.sessions, text, jsonb, uuid, text) IS
  'Insert one lifecycle event of Session p_session (its owner and Agent copied from the row): kind p_kind, the payload without null members, the operation and the turn it belongs to; NOTIFY sessionq_event {"session"} wakes the readers that follow; a delivery for each enabled webhook subscription that matches (the owner''s or a global one, its event types, its Agent), each with its deliver_webhooks job (lock webhook:<subscription>:<session>).';

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
    RETURNING e.seq
  ), finished AS (
    -- the finished deliveries of those events go with them (pending ones fail at their claim)
    DELETE FROM sessionq.webhook_deliveries w USING gone g WHERE w.event_seq = g.seq AND w.state <> 'pending'
  )
  SELECT count(*)::integer FROM gone
$$;
COMMENT ON FUNCTION sessionq.purge_lifecycle_events(double precision, integer) IS
  'Delete events older than p_retention seconds among the p_limit oldest (by seq, which follows time closely), with their finished webhook deliveries, so one call is one short batch; returns how many events went. The periodic lifecycle_events_tick task repeats it.';

-- create_webhook: a subscription of its owner (a global one: administrators only, checked by the API).
CREATE OR REPLACE FUNCTION sessionq.create_webhook(
  p_owner text, p_global boolean, p_url text, p_event_types text[], p_agent_namespace text, p_agent_name text,
  p_secret text, p_max_per_owner integer DEFAULT 100
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.webhook_subscriptions;
  v_unknown text;
BEGIN
  SELECT t INTO v_unknown FROM unnest(coalesce(p_event_types, '{}')) t
   WHERE t NOT IN ('created', 'ready', 'suspended', 'resumed', 'paused', 'checkpointed', 'forked',
                   'quiescence_failed', 'expiring_soon', 'expired', 'deleting', 'deleted', 'runtime_lost') LIMIT 1;
  IF FOUND THEN
    PERFORM sessionq.fail('SQ400', format('unknown event type %s', sessionq.clip(v_unknown)));
  END IF;
  IF (p_agent_namespace IS NULL) <> (p_agent_name IS NULL) THEN
    PERFORM sessionq.fail('SQ400', 'an Agent filter names both the namespace and the name');
  END IF;
  PERFORM pg_advisory_xact_lock(hashtextextended('sessionq.webhooks:' || p_owner, 0));
  IF (SELECT count(*) FROM sessionq.webhook_subscriptions w WHERE w.owner = p_owner) >= p_max_per_owner THEN
    PERFORM sessionq.fail('SQ412', format('%s already has %s webhook subscriptions; delete one first', sessionq.clip(p_owner), p_max_per_owner));
  END IF;
  INSERT INTO sessionq.webhook_subscriptions (owner, is_global, url, event_types, agent_namespace, agent_name, secret)
  VALUES (p_owner, p_global, p_url, ARRAY(SELECT DISTINCT unnest(coalesce(p_event_types, '{}')) ORDER BY 1),
          p_agent_namespace, p_agent_name, p_secret)
  RETURNING * INTO v;
  RETURN to_jsonb(v) - 'secret';
END $$;
COMMENT ON FUNCTION sessionq.create_webhook(text, boolean, text, text[], text, text, text, integer) IS
  'Create a webhook subscription of p_owner (p_global: every Session''s events; the API lets administrators only) for the event types p_event_types (empty: all; unknown types INVALID_ARGUMENT) of the Sessions of one Agent (both names, or neither), signed with p_secret; FAILED_PRECONDITION when the owner has p_max_per_owner already. Returns the subscription without its secret.';

CREATE OR REPLACE FUNCTION sessionq.list_webhooks(p_caller text, p_admin boolean, p_after uuid, p_limit integer)
RETURNS SETOF jsonb LANGUAGE sql STABLE AS $$
  SELECT to_jsonb(w) - 'secret' FROM sessionq.webhook_subscriptions w
   WHERE (p_admin OR w.owner = p_caller) AND (p_after IS NULL OR w.id > p_after)
   ORDER BY w.id LIMIT p_limit
$$;
COMMENT ON FUNCTION sessionq.list_webhooks(text, boolean, uuid, integer) IS
  'One page of the caller''s webhook subscriptions (administrators: everyone''s) after p_after, by id, without their secrets.';

CREATE OR REPLACE FUNCTION sessionq.delete_webhook(p_id uuid, p_caller text, p_admin boolean) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM sessionq.webhook_subscriptions w WHERE w.id = p_id AND (p_admin OR w.owner = p_caller);
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ404', format('webhook %s not found', p_id));
  END IF;
  DELETE FROM sessionq.webhook_deliveries d WHERE d.subscription_id = p_id;
END $$;
COMMENT ON FUNCTION sessionq.delete_webhook(uuid, text, boolean) IS
  'Delete a webhook subscription of the caller (administrators: anyone''s) and its deliveries; NOT_FOUND when there is none the caller may delete.';

-- claim_webhook_batch: the next deliveries of a subscription, every stream's in order, in one claim.
CREATE OR REPLACE FUNCTION sessionq.claim_webhook_batch(
  p_subscription uuid, p_executor uuid, p_lease double precision, p_limit integer
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_out jsonb;
BEGIN
  -- a claim lost in a crash only lets another job retry sooner: no need to wait for the WAL flush
  PERFORM set_config('synchronous_commit', 'off', true);
  WITH picked AS (
    -- the oldest p_limit pending deliveries, locked in delivery order (a concurrent claim waits,
    -- never deadlocks); being in one global order, they hold a prefix of each Session's pending ones
    SELECT d.id, d.session_id, d.event_seq,
           d.claimed_by IS DISTINCT FROM p_executor AND d.claimed_until > clock_timestamp() AS busy
      FROM sessionq.webhook_deliveries d
     WHERE d.subscription_id = p_subscription AND d.state = 'pending'
     ORDER BY d.event_xid, d.event_seq LIMIT p_limit FOR UPDATE
  ), free AS (  -- a Session's stream that another job holds (a live lease) is left alone
    SELECT p.* FROM picked p WHERE NOT EXISTS (SELECT 1 FROM picked x WHERE x.session_id = p.session_id AND x.busy)
  ), purged AS (  -- purged before they could be delivered (events.retention): nothing left to send
    UPDATE sessionq.webhook_deliveries d SET state = 'failed', last_error = 'the event was purged before delivery',
           finished_at = clock_timestamp(), claimed_by = NULL, claimed_until = NULL
      FROM free f
     WHERE d.id = f.id AND NOT EXISTS (SELECT 1 FROM sessionq.lifecycle_events e WHERE e.seq = f.event_seq)
    RETURNING d.id
  ), claimed AS (
    UPDATE sessionq.webhook_deliveries d SET claimed_by = p_executor,
           claimed_until = clock_timestamp() + make_interval(secs => p_lease)
      FROM free f JOIN sessionq.lifecycle_events e ON e.seq = f.event_seq
     WHERE d.id = f.id
    RETURNING d.id, d.session_id, d.attempts, d.event_xid, d.event_seq,
              to_jsonb(e) || jsonb_build_object('xid', (e.xid::text)::bigint) AS event
  )
  SELECT jsonb_build_object(
           'url', w.url, 'secret', w.secret,
           'taken', (SELECT count(*) FROM picked),
           'busy', (SELECT count(*) FROM picked) - (SELECT count(*) FROM free),
           'deliveries', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                            'id', c.id, 'session_id', c.session_id, 'attempts', c.attempts, 'event', c.event)
                            ORDER BY c.event_xid, c.event_seq), '[]') FROM claimed c))
    INTO v_out
    FROM sessionq.webhook_subscriptions w WHERE w.id = p_subscription;
  RETURN v_out;
END $$;
COMMENT ON FUNCTION sessionq.claim_webhook_batch(uuid, uuid, double precision, integer) IS
  'Claim, for p_lease seconds, the oldest p_limit pending deliveries of subscription p_subscription, in delivery order, leaving out every Session whose stream another executor''s live lease holds (its deliveries go out in order, by one job at a time). Returns {url, secret, taken (deliveries looked at), busy (of them, left to another executor), deliveries: [{id, session_id, attempts, event}]} (in delivery order), or NULL for a subscription that is gone. A delivery whose event was purged is failed. Its commit does not wait for the WAL flush (synchronous_commit off). For the deliver_webhooks job only.';

-- record_webhook_attempts: the outcomes of a batch's attempts, and the rest of its claims released.
CREATE OR REPLACE FUNCTION sessionq.record_webhook_attempts(
  p_subscription uuid, p_executor uuid, p_outcomes jsonb, p_disable_after integer
) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  o jsonb;
  v_run integer;
  v_reset boolean := false;
  v_last_error text;
  v_failures integer;
BEGIN
  -- an outcome lost in a crash means a delivery sent again (receivers deduplicate by webhook-id)
  PERFORM set_config('synchronous_commit', 'off', true);
  SELECT w.consecutive_failures INTO v_run FROM sessionq.webhook_subscriptions w WHERE w.id = p_subscription
     FOR UPDATE;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  FOR o IN SELECT * FROM jsonb_array_elements(p_outcomes) LOOP  -- in the order the attempts ended
    UPDATE sessionq.webhook_deliveries d
       SET attempts = d.attempts + 1, last_status = (o ->> 'status')::integer,
           last_error = sessionq.clip(o ->> 'error', 500),
           state = CASE WHEN (o ->> 'ok')::boolean THEN 'delivered'
                        WHEN (o ->> 'give_up')::boolean THEN 'failed' ELSE 'pending' END,
           finished_at = CASE WHEN (o ->> 'ok')::boolean OR (o ->> 'give_up')::boolean THEN clock_timestamp() END,
           claimed_by = NULL, claimed_until = NULL
     WHERE d.id = (o ->> 'id')::bigint AND d.claimed_by = p_executor AND d.state = 'pending';
    CONTINUE WHEN NOT FOUND;  -- no longer this executor's: its lease lapsed and another job took it
    IF (o ->> 'ok')::boolean THEN
      v_run := 0;
      v_reset := true;
    ELSE
      v_run := v_run + 1;
      v_last_error := sessionq.clip(o ->> 'error', 500);
    END IF;
  END LOOP;
  -- what was claimed and not attempted (behind a failed attempt of its stream) waits for the retry
  UPDATE sessionq.webhook_deliveries d SET claimed_by = NULL, claimed_until = NULL
   WHERE d.subscription_id = p_subscription AND d.claimed_by = p_executor AND d.state = 'pending';
  IF v_last_error IS NULL AND NOT v_reset THEN
    RETURN true;
  END IF;
  UPDATE sessionq.webhook_subscriptions w
     SET consecutive_failures = v_run, last_failure = coalesce(v_last_error, w.last_failure),
         updated_at = clock_timestamp()
   WHERE w.id = p_subscription AND (w.consecutive_failures <> v_run OR v_last_error IS NOT NULL)
  RETURNING consecutive_failures INTO v_failures;
  IF p_disable_after > 0 AND v_failures >= p_disable_after THEN
    UPDATE sessionq.webhook_subscriptions SET enabled = false, disabled_at = clock_timestamp()
     WHERE id = p_subscription AND enabled;
    UPDATE sessionq.webhook_deliveries SET state = 'failed', finished_at = clock_timestamp(),
           last_error = coalesce(last_error || '; ', '') || 'the subscription was disabled'
     WHERE subscription_id = p_subscription AND state = 'pending';
    RETURN false;
  END IF;
  RETURN true;
END $$;
COMMENT ON FUNCTION sessionq.record_webhook_attempts(uuid, uuid, jsonb, integer) IS
  'Record the attempts of a batch claimed by p_executor (claim_webhook_batch): p_outcomes [{id, ok, status, error, give_up}] in the order they ended, each delivered, given up (failed) or still pending, its claim released (an outcome for a delivery the executor no longer holds is ignored); the executor''s other claims of the subscription are released. The subscription''s run of failures is reset by a success and grows with each failure after the last one; at p_disable_after (0: never) the subscription is disabled and its pending deliveries failed. False when it is disabled (or gone). Its commit does not wait for the WAL flush (synchronous_commit off).';

CREATE OR REPLACE VIEW sessionq.webhook_delivery_log AS
SELECT d.id, d.subscription_id, w.owner, w.is_global, w.enabled AS subscription_enabled, d.session_id,
       e.kind AS event_type, (d.event_xid::text || '-' || d.event_seq) AS event_id, d.state, d.attempts,
       d.last_status, d.last_error, d.created_at, d.finished_at
  FROM sessionq.webhook_deliveries d
  JOIN sessionq.webhook_subscriptions w ON w.id = d.subscription_id
  LEFT JOIN sessionq.lifecycle_events e ON e.seq = d.event_seq;
COMMENT ON VIEW sessionq.webhook_delivery_log IS
  'Webhook deliveries for operators: which subscription (its owner, whether global and still enabled), which event of which Session, the state, attempts and the last status or error. The URL and the secret are not shown (the URL may carry its owner''s secret path).';
COMMENT ON COLUMN sessionq.webhook_delivery_log.id IS 'The delivery.';
COMMENT ON COLUMN sessionq.webhook_delivery_log.subscription_id IS 'The subscription.';
COMMENT ON COLUMN sessionq.webhook_delivery_log.owner IS 'The subscription''s owner.';
COMMENT ON COLUMN sessionq.webhook_delivery_log.is_global IS 'Whether the subscription is global (every Session).';
COMMENT ON COLUMN sessionq.webhook_delivery_log.subscription_enabled IS 'False once the subscription was disabled after a run of failures.';
COMMENT ON COLUMN sessionq.webhook_delivery_log.session_id IS 'The event''s Session.';
COMMENT ON COLUMN sessionq.webhook_delivery_log.event_type IS 'The event''s kind (NULL once the event was purged).';
COMMENT ON COLUMN sessionq.webhook_delivery_log.event_id IS 'The event''s id (<xid>-<seq>).';
COMMENT ON COLUMN sessionq.webhook_delivery_log.state IS 'pending, delivered or failed.';
COMMENT ON COLUMN sessionq.webhook_delivery_log.attempts IS 'Attempts made.';
COMMENT ON COLUMN sessionq.webhook_delivery_log.last_status IS 'The HTTP status of the last attempt.';
COMMENT ON COLUMN sessionq.webhook_delivery_log.last_error IS 'What failed in the last attempt.';
COMMENT ON COLUMN sessionq.webhook_delivery_log.created_at IS 'When the event happened.';
COMMENT ON COLUMN sessionq.webhook_delivery_log.finished_at IS 'When it was delivered or given up.';
