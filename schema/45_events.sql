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

-- Webhooks: subscriptions (each its owner's, or global: an operator's, for every Session), each with
-- a cursor in the events. A transition writes its event and, when a subscription matches, makes
-- sure at commit that subscription's deliver_webhooks job waits (queue_webhook_jobs); it writes no
-- delivery. The job, under the subscription's lease, reads the events past the cursor up to the
-- horizon (as event_page does), POSTs them, each Session's in order (domain/webhooks.py), and moves
-- the cursor past them. Only a delivery that failed, and the later events of its Session that wait
-- behind it, get a row (webhook_deliveries), retried from there.
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
  from_xid             xid8 NOT NULL DEFAULT pg_current_xact_id(),
  cursor_xid           xid8 NOT NULL DEFAULT pg_current_xact_id(),
  cursor_seq           bigint NOT NULL DEFAULT 0,
  claimed_by           uuid,
  claimed_until        timestamptz,
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
COMMENT ON COLUMN sessionq.webhook_subscriptions.from_xid IS 'The creating transaction: the subscription receives the events of transactions from this one on.';
COMMENT ON COLUMN sessionq.webhook_subscriptions.cursor_xid IS 'With cursor_seq, the position (xid, seq) up to which every event the subscription receives was delivered, given up or held as a delivery row; the deliver_webhooks job reads the events after it.';
COMMENT ON COLUMN sessionq.webhook_subscriptions.cursor_seq IS 'With cursor_xid, the position of the cursor.';
COMMENT ON COLUMN sessionq.webhook_subscriptions.claimed_by IS 'The deliver_webhooks executor delivering the subscription''s events now (with claimed_until, a lease: one executor at a time, so each Session''s go out in order).';
COMMENT ON COLUMN sessionq.webhook_subscriptions.claimed_until IS 'When the lease lapses: another executor may take the subscription over.';

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
  claimed_by      uuid,         -- unused since 0028 (the lease is the subscription's); upgrade 0012 names them
  claimed_until   timestamptz,
  created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
  finished_at     timestamptz,
  CONSTRAINT webhook_deliveries_once UNIQUE (subscription_id, event_seq)
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_event_idx ON sessionq.webhook_deliveries (event_seq);
CREATE INDEX IF NOT EXISTS webhook_deliveries_pending_idx
  ON sessionq.webhook_deliveries (subscription_id, session_id, event_xid, event_seq) WHERE state = 'pending';
COMMENT ON TABLE sessionq.webhook_deliveries IS
  'Held deliveries: an event whose delivery to a subscription failed, and the later events of its Session that wait behind it (in order), written by record_webhook_round; retried by the deliver_webhooks job with backoff, given up after webhooks.maxAttempts attempts. An event delivered at its first attempt has no row (the subscription''s cursor passed it). Operators read every delivery in sessionq.webhook_delivery_log.';
COMMENT ON COLUMN sessionq.webhook_deliveries.event_seq IS 'The event (lifecycle_events.seq).';
COMMENT ON COLUMN sessionq.webhook_deliveries.event_xid IS 'The event''s transaction: with event_seq its position, the delivery order.';
COMMENT ON COLUMN sessionq.webhook_deliveries.session_id IS 'The event''s Session: the deliveries of one subscription and Session go out in order.';
COMMENT ON COLUMN sessionq.webhook_deliveries.state IS 'pending, delivered (a 2xx answer) or failed (given up, or its subscription disabled).';
COMMENT ON COLUMN sessionq.webhook_deliveries.attempts IS 'Attempts made.';
COMMENT ON COLUMN sessionq.webhook_deliveries.last_status IS 'The HTTP status of the last attempt, when one came.';
COMMENT ON COLUMN sessionq.webhook_deliveries.last_error IS 'What failed in the last attempt.';
COMMENT ON COLUMN sessionq.webhook_deliveries.claimed_by IS 'Unused since upgrade 0028: the deliver_webhooks executor holds the subscription''s lease (webhook_subscriptions.claimed_by).';
COMMENT ON COLUMN sessionq.webhook_deliveries.claimed_until IS 'Unused since upgrade 0028 (webhook_subscriptions.claimed_until).';
COMMENT ON COLUMN sessionq.webhook_deliveries.created_at IS 'When the row was written (the attempt that failed, or the round that held it).';
COMMENT ON COLUMN sessionq.webhook_deliveries.finished_at IS 'When it was delivered or given up.';

-- record_event: the one insert of an event (the triggers and announce_expiring call it).
CREATE OR REPLACE FUNCTION sessionq.record_event(
  p_session sessionq.sessions, p_kind text, p_payload jsonb DEFAULT '{}', p_operation uuid DEFAULT NULL,
  p_task text DEFAULT NULL
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO sessionq.lifecycle_events (session_id, kind, owner, agent_namespace, agent_name, operation_id, task_id, payload)
  VALUES (p_session.id, p_kind, p_session.creator, p_session.agent_namespace, p_session.agent_name, p_operation,
          p_task, jsonb_strip_nulls(coalesce(p_payload, '{}')));
  -- wakes the readers that follow (delivered at commit; identical payloads of one transaction fold)
  PERFORM sessionq.notify('sessionq_event', jsonb_build_object('session', p_session.id));
  -- no delivery row, and no job here: the matching subscriptions' jobs are deferred at commit
  -- (queue_webhook_jobs)
END $$;
COMMENT ON FUNCTION sessionq.record_event(sessionq.sessions, text, jsonb, uuid, text) IS
  'Insert one lifecycle event of Session p_session (its owner and Agent copied from the row): kind p_kind, the payload without null members, the operation and the turn it belongs to; NOTIFY sessionq_event {"session"} wakes the readers that follow. No delivery row is written: at commit, each matching webhook subscription''s deliver_webhooks job is made sure of (queue_webhook_jobs), and the job reads the events past the subscription''s cursor (claim_webhook_round).';

-- defer_webhook_job: the one way a subscription's deliver_webhooks job is made sure of by those
-- that many transactions run at once (queue_webhook_jobs at every commit with events, and the
-- periodic wake_webhook_jobs): nothing when a job waits, and nothing when another transaction is
-- deferring it now (it holds the advisory lock on the job's queueing lock until it ends), so that no
-- transaction waits for another one's uncommitted insert of the same job.
CREATE OR REPLACE FUNCTION sessionq.defer_webhook_job(p_subscription uuid) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  v_lock text := sessionq.job_lock('deliver_webhooks', p_subscription::text);
BEGIN
  IF sessionq.job_waiting(v_lock) OR NOT pg_try_advisory_xact_lock(hashtextextended('sessionq.job:' || v_lock, 0)) THEN
    RETURN false;
  END IF;
  PERFORM sessionq.defer('deliver_webhooks', p_subscription::text, jsonb_build_object('subscription_id', p_subscription));
  RETURN true;
END $$;
COMMENT ON FUNCTION sessionq.defer_webhook_job(uuid) IS
  'Defer the deliver_webhooks job of subscription p_subscription unless one waits or another transaction is deferring it (an advisory lock on its queueing lock, held until that transaction ends: its job covers the caller''s events); true when this call deferred it.';

-- queue_webhook_jobs: at commit, make sure the deliver_webhooks job of every subscription that one
-- of the transaction's events matches waits (one waiting job per subscription: under load it takes
-- every event that came while it waited). A deferred trigger, so that it runs once the transaction
-- holds every row it takes: a transaction making several transitions (a bulk action's page, a batch
-- of suspensions) defers no job while it may still wait for a Session's row. The transaction's first
-- firing covers its events so far (sessionq.webhook_jobs_upto: the highest seq covered); the others
-- return at once.
-- Only one committing transaction defers a subscription's job (pg_try_advisory_xact_lock on the job's
-- queueing lock): deferring waits for another transaction's uncommitted insert of the same job (the
-- queueing lock's unique index), and one subscription is every Session's, so without the lock each
-- time the job was taken the commits of the moment queued behind the first (tens of ms each at 64
-- clients). A transaction that finds the lock held defers nothing: the holder's job starts after
-- the holder commits, and a job delivers only once every transaction begun before its first claim
-- has ended (claim_webhook_round), so the events of this one are its. Should the holder roll back
-- instead, the periodic wake_webhook_jobs defers the job within a minute.
CREATE OR REPLACE FUNCTION sessionq.queue_webhook_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_upto bigint := coalesce(nullif(current_setting('sessionq.webhook_jobs_upto', true), '')::bigint, 0);
  v_last bigint;
  v_subs uuid[];
  v_sub uuid;
BEGIN
  IF NEW.seq <= v_upto THEN
    RETURN NULL;
  END IF;
  SELECT max(e.seq), array_agg(DISTINCT w.id ORDER BY w.id) FILTER (WHERE w.id IS NOT NULL)
    INTO v_last, v_subs
    FROM sessionq.lifecycle_events e
    LEFT JOIN sessionq.webhook_subscriptions w
      ON w.enabled AND (w.is_global OR w.owner = e.owner)
     AND (cardinality(w.event_types) = 0 OR e.kind = ANY (w.event_types))
     AND (w.agent_namespace IS NULL OR w.agent_namespace = e.agent_namespace AND w.agent_name = e.agent_name)
   WHERE e.xid = pg_current_xact_id() AND e.seq > v_upto;
  PERFORM set_config('sessionq.webhook_jobs_upto', v_last::text, true);
  FOREACH v_sub IN ARRAY coalesce(v_subs, '{}') LOOP
    PERFORM sessionq.defer_webhook_job(v_sub);
  END LOOP;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION sessionq.queue_webhook_jobs() IS
  'Deferred trigger on sessionq.lifecycle_events (runs at commit): for each enabled webhook subscription that an event of the transaction matches (the owner''s or a global one, its event types, its Agent), in id order, its deliver_webhooks job unless one waits (queueing lock webhook:<subscription>) or another committing transaction is deferring it (an advisory lock on the queueing lock: that job delivers this transaction''s events too). Once per transaction (the setting sessionq.webhook_jobs_upto: the highest event seq covered).';
DROP TRIGGER IF EXISTS lifecycle_events_webhooks ON sessionq.lifecycle_events;
CREATE CONSTRAINT TRIGGER lifecycle_events_webhooks AFTER INSERT ON sessionq.lifecycle_events
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION sessionq.queue_webhook_jobs();

-- wake_webhook_jobs: the periodic safety net of queue_webhook_jobs. A transaction that found another
-- one deferring a subscription's job deferred none; should that other one have rolled back, the
-- events wait here for at most a tick (lifecycle_events_tick, once a minute), not for the next event.
CREATE OR REPLACE FUNCTION sessionq.wake_webhook_jobs() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  w sessionq.webhook_subscriptions;
  v_horizon xid8 := pg_snapshot_xmax(pg_current_snapshot());
  v_woken integer := 0;
BEGIN
  FOR w IN SELECT * FROM sessionq.webhook_subscriptions s
            WHERE s.enabled AND (s.claimed_until IS NULL OR s.claimed_until <= clock_timestamp())
            ORDER BY s.id LOOP
    IF EXISTS (SELECT 1 FROM sessionq.webhook_events(w, w.cursor_xid, w.cursor_seq, v_horizon, 1))
       AND sessionq.defer_webhook_job(w.id) THEN
      v_woken := v_woken + 1;
    END IF;
  END LOOP;
  RETURN v_woken;
END $$;
COMMENT ON FUNCTION sessionq.wake_webhook_jobs() IS
  'Defer the deliver_webhooks job of every enabled subscription that no executor holds, whose job does not wait, and that has a committed event past its cursor; returns how many were deferred. The periodic lifecycle_events_tick task runs it: a missed deferral (queue_webhook_jobs) costs at most a tick.';

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

-- webhook_events: a subscription's events after a position, up to a horizon, in position order.
CREATE OR REPLACE FUNCTION sessionq.webhook_events(
  w sessionq.webhook_subscriptions, p_after_xid xid8, p_after_seq bigint, p_horizon xid8, p_limit integer
) RETURNS SETOF sessionq.lifecycle_events LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF w.is_global THEN  -- two statements, so that each reads its own index in position order
    RETURN QUERY SELECT e.* FROM sessionq.lifecycle_events e
     WHERE (e.xid, e.seq) > (p_after_xid, p_after_seq) AND e.xid < p_horizon
       AND (cardinality(w.event_types) = 0 OR e.kind = ANY (w.event_types))
       AND (w.agent_namespace IS NULL OR e.agent_namespace = w.agent_namespace AND e.agent_name = w.agent_name)
     ORDER BY e.xid, e.seq LIMIT p_limit;
  ELSE
    RETURN QUERY SELECT e.* FROM sessionq.lifecycle_events e
     WHERE e.owner = w.owner AND (e.xid, e.seq) > (p_after_xid, p_after_seq) AND e.xid < p_horizon
       AND (cardinality(w.event_types) = 0 OR e.kind = ANY (w.event_types))
       AND (w.agent_namespace IS NULL OR e.agent_namespace = w.agent_namespace AND e.agent_name = w.agent_name)
     ORDER BY e.xid, e.seq LIMIT p_limit;
  END IF;
END $$;
COMMENT ON FUNCTION sessionq.webhook_events(sessionq.webhook_subscriptions, xid8, bigint, xid8, integer) IS
  'The first p_limit events subscription w receives (its owner''s Sessions'', or every Session''s for a global one; its event types; its Agent) positioned after (p_after_xid, p_after_seq) and written by transactions older than p_horizon, in position order (xid, seq).';

-- claim_webhook_round: the next events of a subscription, held ones first, under the subscription's lease.
CREATE OR REPLACE FUNCTION sessionq.claim_webhook_round(
  p_subscription uuid, p_executor uuid, p_lease double precision, p_limit integer, p_start xid8 DEFAULT NULL
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  w sessionq.webhook_subscriptions;
  v_horizon xid8;
  v_start xid8;
  v_held jsonb;
  v_held_count integer;
  v_events jsonb;
  v_count integer;
  v_end_xid xid8;
  v_end_seq bigint;
BEGIN
  -- a claim lost in a crash only lets another job deliver sooner: no need to wait for the WAL flush
  PERFORM set_config('synchronous_commit', 'off', true);
  SELECT * INTO w FROM sessionq.webhook_subscriptions s WHERE s.id = p_subscription AND s.enabled FOR UPDATE;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF w.claimed_by IS DISTINCT FROM p_executor AND w.claimed_until > clock_timestamp() THEN
    -- another executor delivers: a follow-up job runs when it lets go (record_webhook_round, or this
    -- claim's release) or when its lease lapses. Under the row lock, so its release sees the job.
    PERFORM sessionq.defer('deliver_webhooks', p_subscription::text,
                           jsonb_build_object('subscription_id', p_subscription), w.claimed_until);
    RETURN jsonb_build_object('busy', true);
  END IF;
  -- the horizon: every transaction older than it has ended, so no event can appear later before it
  v_horizon := pg_snapshot_xmin(pg_current_snapshot());
  -- where this executor started (its first claim's transaction, which the row lock gave an id): it
  -- lets go only once every transaction begun before has ended (one that saw its job waiting, and
  -- so deferred none, may not have committed its event yet)
  v_start := coalesce(p_start, pg_current_xact_id());
  -- held deliveries (a failed attempt and what waits behind it), oldest first; purged ones fail
  UPDATE sessionq.webhook_deliveries d SET state = 'failed', last_error = 'the event was purged before delivery',
         finished_at = clock_timestamp()
   WHERE d.subscription_id = p_subscription AND d.state = 'pending'
     AND NOT EXISTS (SELECT 1 FROM sessionq.lifecycle_events e WHERE e.seq = d.event_seq);
  SELECT coalesce(jsonb_agg(jsonb_build_object('id', d.id, 'session_id', d.session_id, 'attempts', d.attempts,
                                               'event', to_jsonb(e) || jsonb_build_object('xid', (e.xid::text)::bigint))
                            ORDER BY d.event_xid, d.event_seq), '[]'), count(*)
    INTO v_held, v_held_count
    FROM (SELECT * FROM sessionq.webhook_deliveries d WHERE d.subscription_id = p_subscription AND d.state = 'pending'
           ORDER BY d.event_xid, d.event_seq LIMIT p_limit) d
    JOIN sessionq.lifecycle_events e ON e.seq = d.event_seq;
  -- new events past the cursor; with more held than claimed, a Session that has held ones left
  -- behind holds its new ones back too (in order)
  SELECT coalesce(jsonb_agg(jsonb_build_object(
           'seq', e.seq, 'xid', e.xid::text, 'session_id', e.session_id,
           'hold', v_held_count >= p_limit AND EXISTS (
             SELECT 1 FROM sessionq.webhook_deliveries d WHERE d.subscription_id = p_subscription
                AND d.session_id = e.session_id AND d.state = 'pending'),
           'event', to_jsonb(e) || jsonb_build_object('xid', (e.xid::text)::bigint)) ORDER BY e.xid, e.seq), '[]'),
         count(*), (array_agg(e.xid ORDER BY e.xid DESC, e.seq DESC))[1],
         (array_agg(e.seq ORDER BY e.xid DESC, e.seq DESC))[1]
    INTO v_events, v_count, v_end_xid, v_end_seq
    FROM sessionq.webhook_events(w, w.cursor_xid, w.cursor_seq, v_horizon, p_limit) e;
  IF v_count < p_limit THEN
    -- nothing else to deliver before the horizon: the cursor may pass the events this subscription skips
    IF w.is_global THEN
      SELECT e.xid, e.seq INTO v_end_xid, v_end_seq FROM sessionq.lifecycle_events e
       WHERE e.xid < v_horizon ORDER BY e.xid DESC, e.seq DESC LIMIT 1;
    ELSE
      SELECT e.xid, e.seq INTO v_end_xid, v_end_seq FROM sessionq.lifecycle_events e
       WHERE e.owner = w.owner AND e.xid < v_horizon ORDER BY e.xid DESC, e.seq DESC LIMIT 1;
    END IF;
    IF NOT FOUND OR (v_end_xid, v_end_seq) <= (w.cursor_xid, w.cursor_seq) THEN
      v_end_xid := w.cursor_xid;
      v_end_seq := w.cursor_seq;
    END IF;
  END IF;
  IF v_count = 0 AND v_held_count = 0 THEN
    -- nothing to deliver: the cursor moves now; caught up with its start, the executor lets go
    UPDATE sessionq.webhook_subscriptions s SET cursor_xid = v_end_xid, cursor_seq = v_end_seq,
           claimed_by = CASE WHEN v_horizon > v_start THEN NULL ELSE p_executor END,
           claimed_until = CASE WHEN v_horizon > v_start THEN NULL
                                ELSE clock_timestamp() + make_interval(secs => p_lease) END
     WHERE s.id = p_subscription;
    IF v_horizon > v_start THEN
      PERFORM sessionq.run_waiting_job(sessionq.job_lock('deliver_webhooks', p_subscription::text));
      RETURN jsonb_build_object('done', true);
    END IF;
    RETURN jsonb_build_object('start', v_start::text, 'held', '[]'::jsonb, 'events', '[]'::jsonb);
  END IF;
  UPDATE sessionq.webhook_subscriptions s
     SET claimed_by = p_executor, claimed_until = clock_timestamp() + make_interval(secs => p_lease)
   WHERE s.id = p_subscription;
  RETURN jsonb_build_object('url', w.url, 'secret', w.secret, 'start', v_start::text,
                            'cursor', jsonb_build_array(v_end_xid::text, v_end_seq),
                            'held', v_held, 'events', v_events);
END $$;
COMMENT ON FUNCTION sessionq.claim_webhook_round(uuid, uuid, double precision, integer, xid8) IS
  'Take (or keep) subscription p_subscription''s lease for p_lease seconds and return its next deliveries: {url, secret, start, cursor: [xid, seq], held: [{id, session_id, attempts, event}], events: [{seq, xid, session_id, hold, event}]}: up to p_limit held deliveries (a failed attempt and what waits behind it) and up to p_limit events past the cursor written by transactions older than every running one, each in position order; cursor is where the subscription''s cursor goes once they are recorded (record_webhook_round). With nothing to deliver the cursor moves at once and, once the horizon has passed p_start (the executor''s first claim''s transaction, returned as start), the lease is let go and {done} returned (a waiting job made due). {busy} when another executor''s lease is live (a follow-up job is deferred for its end); NULL when the subscription is gone or disabled. Held deliveries of purged events fail. Commits without waiting for the WAL flush. For the deliver_webhooks job only.';

-- record_webhook_round: the outcomes of a round's attempts, the cursor moved past it.
CREATE OR REPLACE FUNCTION sessionq.record_webhook_round(
  p_subscription uuid, p_executor uuid, p_cursor_xid xid8, p_cursor_seq bigint, p_outcomes jsonb,
  p_disable_after integer, p_release boolean
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  w sessionq.webhook_subscriptions;
  v_run integer;
  v_last_error text;
  v_last_ok integer;
BEGIN
  -- an outcome lost in a crash means a delivery sent again (receivers deduplicate by webhook-id)
  PERFORM set_config('synchronous_commit', 'off', true);
  SELECT * INTO w FROM sessionq.webhook_subscriptions s WHERE s.id = p_subscription FOR UPDATE;
  IF NOT FOUND OR w.claimed_by IS DISTINCT FROM p_executor THEN
    RETURN 'lost';  -- gone, or its lease lapsed and another executor took it: that one sends them again
  END IF;
  -- new events not delivered (failed, given up, or held behind a failure of their Session): a row each
  INSERT INTO sessionq.webhook_deliveries (subscription_id, event_seq, event_xid, session_id, state, attempts,
                                           last_status, last_error, finished_at)
  SELECT p_subscription, (o ->> 'seq')::bigint, (o ->> 'xid')::xid8, (o ->> 'session_id')::uuid,
         CASE WHEN (o ->> 'give_up')::boolean THEN 'failed' ELSE 'pending' END,
         CASE WHEN (o ->> 'attempted')::boolean THEN 1 ELSE 0 END, (o ->> 'status')::integer,
         sessionq.clip(o ->> 'error', 500), CASE WHEN (o ->> 'give_up')::boolean THEN clock_timestamp() END
    FROM jsonb_array_elements(p_outcomes) o
   WHERE o ? 'seq' AND NOT coalesce((o ->> 'ok')::boolean, false)
  ON CONFLICT (subscription_id, event_seq) DO NOTHING;
  -- held deliveries attempted: delivered, given up or still held
  UPDATE sessionq.webhook_deliveries d
     SET attempts = d.attempts + 1, last_status = (o ->> 'status')::integer,
         last_error = sessionq.clip(o ->> 'error', 500),
         state = CASE WHEN (o ->> 'ok')::boolean THEN 'delivered'
                      WHEN (o ->> 'give_up')::boolean THEN 'failed' ELSE 'pending' END,
         finished_at = CASE WHEN (o ->> 'ok')::boolean OR (o ->> 'give_up')::boolean THEN clock_timestamp() END
    FROM jsonb_array_elements(p_outcomes) o
   WHERE o ? 'id' AND (o ->> 'attempted')::boolean AND d.id = (o ->> 'id')::bigint AND d.state = 'pending';
  -- the run of failed attempts: reset by a success, grown by each failure after the last one
  SELECT max(n) FILTER (WHERE (o ->> 'ok')::boolean) INTO v_last_ok
    FROM jsonb_array_elements(p_outcomes) WITH ORDINALITY AS a (o, n) WHERE (o ->> 'attempted')::boolean;
  SELECT CASE WHEN v_last_ok IS NULL THEN w.consecutive_failures ELSE 0 END + count(*),
         (array_agg(sessionq.clip(o ->> 'error', 500) ORDER BY n DESC))[1]
    INTO v_run, v_last_error
    FROM jsonb_array_elements(p_outcomes) WITH ORDINALITY AS a (o, n)
   WHERE (o ->> 'attempted')::boolean AND NOT (o ->> 'ok')::boolean AND n > coalesce(v_last_ok, 0);
  IF p_disable_after > 0 AND v_run >= p_disable_after THEN
    UPDATE sessionq.webhook_subscriptions s
       SET consecutive_failures = v_run, last_failure = coalesce(v_last_error, s.last_failure),
           updated_at = clock_timestamp(), enabled = false, disabled_at = clock_timestamp(),
           cursor_xid = coalesce(p_cursor_xid, s.cursor_xid), cursor_seq = coalesce(p_cursor_seq, s.cursor_seq),
           claimed_by = NULL, claimed_until = NULL
     WHERE s.id = p_subscription;
    UPDATE sessionq.webhook_deliveries SET state = 'failed', finished_at = clock_timestamp(),
           last_error = coalesce(last_error || '; ', '') || 'the subscription was disabled'
     WHERE subscription_id = p_subscription AND state = 'pending';
    RETURN 'disabled';
  END IF;
  UPDATE sessionq.webhook_subscriptions s
     SET consecutive_failures = v_run, last_failure = coalesce(v_last_error, s.last_failure),
         updated_at = CASE WHEN v_run <> s.consecutive_failures OR v_last_error IS NOT NULL THEN clock_timestamp()
                           ELSE s.updated_at END,
         cursor_xid = coalesce(p_cursor_xid, s.cursor_xid), cursor_seq = coalesce(p_cursor_seq, s.cursor_seq),
         claimed_by = CASE WHEN p_release THEN NULL ELSE s.claimed_by END,
         claimed_until = CASE WHEN p_release THEN NULL ELSE s.claimed_until END
   WHERE s.id = p_subscription;
  IF p_release THEN
    PERFORM sessionq.run_waiting_job(sessionq.job_lock('deliver_webhooks', p_subscription::text));
  END IF;
  RETURN 'recorded';
END $$;
COMMENT ON FUNCTION sessionq.record_webhook_round(uuid, uuid, xid8, bigint, jsonb, integer, boolean) IS
  'Record a round claimed by p_executor (claim_webhook_round) and move the subscription''s cursor to (p_cursor_xid, p_cursor_seq): p_outcomes [{id (a held delivery) | seq, xid, session_id (a new event), attempted, ok, status, error, give_up}], the attempted ones in the order they ended. A new event delivered leaves no row; one that failed, was given up or waits behind its Session''s failure becomes a delivery row; a held delivery is delivered, given up or stays held. The run of failures is reset by a success and grows with each failure after the last one; at p_disable_after (0: never) the subscription is disabled and its held deliveries failed (''disabled''). p_release lets the lease go (a waiting job made due). ''lost'' (nothing recorded) when the executor no longer holds the lease. Commits without waiting for the WAL flush.';

CREATE OR REPLACE VIEW sessionq.webhook_delivery_log AS
SELECT d.event_seq AS id, d.subscription_id, w.owner, w.is_global, w.enabled AS subscription_enabled, d.session_id,
       e.kind AS event_type, (d.event_xid::text || '-' || d.event_seq) AS event_id, d.state, d.attempts,
       d.last_status, d.last_error, coalesce(e.created_at, d.created_at) AS created_at, d.finished_at
  FROM sessionq.webhook_deliveries d
  JOIN sessionq.webhook_subscriptions w ON w.id = d.subscription_id
  LEFT JOIN sessionq.lifecycle_events e ON e.seq = d.event_seq
UNION ALL
-- the events a subscription receives that hold no row: delivered at the first attempt (behind the
-- cursor), not yet attempted (past it), or cut off by the subscription's disabling
SELECT e.seq, w.id, w.owner, w.is_global, w.enabled, e.session_id, e.kind, (e.xid::text || '-' || e.seq),
       CASE WHEN (e.xid, e.seq) <= (w.cursor_xid, w.cursor_seq) THEN 'delivered'
            WHEN w.enabled THEN 'pending' ELSE 'failed' END,
       CASE WHEN (e.xid, e.seq) <= (w.cursor_xid, w.cursor_seq) THEN 1 ELSE 0 END,
       NULL::integer,
       CASE WHEN (e.xid, e.seq) > (w.cursor_xid, w.cursor_seq) AND NOT w.enabled THEN 'the subscription was disabled' END,
       e.created_at, NULL::timestamptz
  FROM sessionq.webhook_subscriptions w
  JOIN sessionq.lifecycle_events e
    ON (w.is_global OR e.owner = w.owner) AND e.xid >= w.from_xid
   AND (cardinality(w.event_types) = 0 OR e.kind = ANY (w.event_types))
   AND (w.agent_namespace IS NULL OR e.agent_namespace = w.agent_namespace AND e.agent_name = w.agent_name)
 WHERE (w.enabled OR (e.xid, e.seq) <= (w.cursor_xid, w.cursor_seq) OR e.created_at <= w.disabled_at)
   AND NOT EXISTS (SELECT 1 FROM sessionq.webhook_deliveries d WHERE d.subscription_id = w.id AND d.event_seq = e.seq);
COMMENT ON VIEW sessionq.webhook_delivery_log IS
  'Webhook deliveries for operators, one per event and subscription that receives it: which subscription (its owner, whether global and still enabled), which event of which Session, the state, attempts and the last status or error. A delivery that went through at its first attempt keeps no row of its own (the subscription''s cursor passed it): it shows delivered, one attempt, no status. The URL and the secret are not shown (the URL may carry its owner''s secret path).';
COMMENT ON COLUMN sessionq.webhook_delivery_log.id IS 'The event (lifecycle_events.seq): with subscription_id, the delivery.';
COMMENT ON COLUMN sessionq.webhook_delivery_log.subscription_id IS 'The subscription.';
COMMENT ON COLUMN sessionq.webhook_delivery_log.owner IS 'The subscription''s owner.';
COMMENT ON COLUMN sessionq.webhook_delivery_log.is_global IS 'Whether the subscription is global (every Session).';
COMMENT ON COLUMN sessionq.webhook_delivery_log.subscription_enabled IS 'False once the subscription was disabled after a run of failures.';
COMMENT ON COLUMN sessionq.webhook_delivery_log.session_id IS 'The event''s Session.';
COMMENT ON COLUMN sessionq.webhook_delivery_log.event_type IS 'The event''s kind (NULL once the event was purged).';
COMMENT ON COLUMN sessionq.webhook_delivery_log.event_id IS 'The event''s id (<xid>-<seq>).';
COMMENT ON COLUMN sessionq.webhook_delivery_log.state IS 'pending, delivered or failed.';
COMMENT ON COLUMN sessionq.webhook_delivery_log.attempts IS 'Attempts made.';
COMMENT ON COLUMN sessionq.webhook_delivery_log.last_status IS 'The HTTP status of the last attempt (kept only for a delivery that failed once).';
COMMENT ON COLUMN sessionq.webhook_delivery_log.last_error IS 'What failed in the last attempt.';
COMMENT ON COLUMN sessionq.webhook_delivery_log.created_at IS 'When the event happened.';
COMMENT ON COLUMN sessionq.webhook_delivery_log.finished_at IS 'When it was delivered or given up.';
