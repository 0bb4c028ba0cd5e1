-- 0028_webhook_cursor: webhook deliveries without a row per event. A transition writes its event
-- and makes sure each matching subscription's deliver_webhooks job waits, where it wrote a delivery
-- row per subscription; the job reads the events past the subscription's cursor under the
-- subscription's lease (claim_webhook_round) and moves the cursor when it records the round
-- (record_webhook_round). Only a failed delivery, and what waits behind it in its Session, gets a
-- row. Existing subscriptions start their cursor at this upgrade: their pending rows are delivered
-- first, as held deliveries.
ALTER TABLE sessionq.webhook_subscriptions
  ADD COLUMN IF NOT EXISTS from_xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  ADD COLUMN IF NOT EXISTS cursor_xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  ADD COLUMN IF NOT EXISTS cursor_seq bigint NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS claimed_by uuid,
  ADD COLUMN IF NOT EXISTS claimed_until timestamptz;
COMMENT ON COLUMN sessionq.webhook_subscriptions.from_xid IS 'The creating transaction: the subscription receives the events of transactions from this one on.';
COMMENT ON COLUMN sessionq.webhook_subscriptions.cursor_xid IS 'With cursor_seq, the position (xid, seq) up to which every event the subscription receives was delivered, given up or held as a delivery row; the deliver_webhooks job reads the events after it.';
COMMENT ON COLUMN sessionq.webhook_subscriptions.cursor_seq IS 'With cursor_xid, the position of the cursor.';
COMMENT ON COLUMN sessionq.webhook_subscriptions.claimed_by IS 'The deliver_webhooks executor delivering the subscription''s events now (with claimed_until, a lease: one executor at a time, so each Session''s go out in order).';
COMMENT ON COLUMN sessionq.webhook_subscriptions.claimed_until IS 'When the lease lapses: another executor may take the subscription over.';

DROP VIEW IF EXISTS sessionq.webhook_delivery_log;
COMMENT ON COLUMN sessionq.webhook_deliveries.claimed_by IS 'Unused since upgrade 0028: the deliver_webhooks executor holds the subscription''s lease (webhook_subscriptions.claimed_by).';
COMMENT ON COLUMN sessionq.webhook_deliveries.claimed_until IS 'Unused since upgrade 0028 (webhook_subscriptions.claimed_until).';
COMMENT ON TABLE sessionq.webhook_deliveries IS
  'Held deliveries: an event whose delivery to a subscription failed, and the later events of its Session that wait behind it (in order), written by record_webhook_round; retried by the deliver_webhooks job with backoff, given up after webhooks.maxAttempts attempts. An event delivered at its first attempt has no row (the subscription''s cursor passed it). Operators read every delivery in sessionq.webhook_delivery_log.';
COMMENT ON COLUMN sessionq.webhook_deliveries.created_at IS 'When the row was written (the attempt that failed, or the round that held it).';

DROP FUNCTION IF EXISTS sessionq.claim_webhook_batch(uuid, uuid, double precision, integer);
DROP FUNCTION IF EXISTS sessionq.record_webhook_attempts(uuid, uuid, jsonb, integer);

-- record_event: the one insert of an event (the triggers and announce_expiring call it).
CREATE OR REPLACE FUNCTION sessionq.record_event(
  p_session sessionq.sessions, p_kind text, p_payload jsonb DEFAULT '{}', p_operation uuid DEFAULT NULL,
  p_task text DEFAULT NULL
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_sub uuid;
BEGIN
  INSERT INTO sessionq.lifecycle_events (session_id, kind, owner, agent_namespace, agent_name, operation_id, task_id, payload)
  VALUES (p_session.id, p_kind, p_session.creator, p_session.agent_namespace, p_session.agent_name, p_operation,
          p_task, jsonb_strip_nulls(coalesce(p_payload, '{}')));
  -- wakes the readers that follow (delivered at commit; identical payloads of one transaction fold)
  PERFORM sessionq.notify('sessionq_event', jsonb_build_object('session', p_session.id));
  -- no delivery row: each matching subscription's job reads the events past its cursor. One waiting
  -- job per subscription: under load it takes every event that came while it waited (and the events
  -- of concurrent transitions do not queue behind each other's defer)
  FOR v_sub IN
    SELECT w.id FROM sessionq.webhook_subscriptions w
     WHERE w.enabled AND (w.is_global OR w.owner = p_session.creator)
       AND (cardinality(w.event_types) = 0 OR p_kind = ANY (w.event_types))
       AND (w.agent_namespace IS NULL
            OR w.agent_namespace = p_session.agent_namespace AND w.agent_name = p_session.agent_name)
  LOOP
    IF NOT sessionq.job_waiting(sessionq.job_lock('deliver_webhooks', v_sub::text)) THEN
      PERFORM sessionq.defer('deliver_webhooks', v_sub::text, jsonb_build_object('subscription_id', v_sub));
    END IF;
  END LOOP;
END $$;
COMMENT ON FUNCTION sessionq.record_event(sessionq.sessions, text, jsonb, uuid, text) IS
  'Insert one lifecycle event of Session p_session (its owner and Agent copied from the row): kind p_kind, the payload without null members, the operation and the turn it belongs to; NOTIFY sessionq_event {"session"} wakes the readers that follow; for each enabled webhook subscription that matches (the owner''s or a global one, its event types, its Agent), its deliver_webhooks job unless one waits (queueing lock webhook:<subscription>). No delivery row is written: the job reads the events past the subscription''s cursor (claim_webhook_round).';

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
