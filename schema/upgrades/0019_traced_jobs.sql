-- Upgrade 0019_traced_jobs: a traced call's W3C trace context travels with the work it starts;
-- webhook deliveries in batches.
--
-- Applied by its revision only, to a database whose schema was installed before it; a database
-- installed from schema/ at or after it has all of this already. Frozen: a later change to these
-- statements is a later upgrade, and the canonical text lives in schema/. Every statement is
-- idempotent.
--
-- sessionq.defer adds the transaction-local setting sessionq.traceparent (set by the store for a
-- statement made inside a sampled span) to the job's args, and sessionq.notify to the payload.
-- Webhook deliveries are claimed and recorded a batch at a time (claim_webhook_batch,
-- record_webhook_attempts) where one delivery at a time was (claim_webhook_delivery,
-- record_webhook_attempt and webhook_streams go).

CREATE OR REPLACE FUNCTION sessionq.notify(p_channel text, p_payload jsonb) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_text text;
  v_traceparent text := current_setting('sessionq.traceparent', true);
BEGIN
  IF v_traceparent <> '' THEN  -- a traced statement: what it wakes joins its trace
    p_payload := p_payload || jsonb_build_object('traceparent', v_traceparent);
  END IF;
  v_text := p_payload::text;
  IF octet_length(v_text) > 7900 THEN  -- NOTIFY's limit is 8000 bytes: the optional row goes
    v_text := (p_payload - 'row')::text;
  END IF;
  PERFORM pg_notify(p_channel, v_text);
END $$;
COMMENT ON FUNCTION sessionq.notify(text, jsonb) IS
  'Send a sessionq notification (delivered at commit): p_payload, a JSON object holding the key of its channel (session, checkpoint or worker); an optional "row" is dropped when the payload would not fit NOTIFY''s 8000 bytes; the W3C "traceparent" of a traced statement (the transaction-local setting sessionq.traceparent) is added. Channels and payloads: src/sessionq/db/notify.py.';

CREATE OR REPLACE FUNCTION sessionq.defer(p_task text, p_subject text, p_args jsonb, p_at timestamptz DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  k sessionq.job_kinds;
  v_traceparent text := current_setting('sessionq.traceparent', true);
BEGIN
  SELECT * INTO k FROM sessionq.job_kinds WHERE task_name = p_task;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'sessionq.defer: unknown task %', p_task;
  END IF;
  IF v_traceparent <> '' THEN  -- a traced statement: the job's spans join its trace (jobs/tracing.py)
    p_args := p_args || jsonb_build_object('traceparent', v_traceparent);
  END IF;
  RETURN sessionq.defer_job(k.queue_name, p_task, p_args, k.lock_prefix || ':' || p_subject, p_at);
END $$;
COMMENT ON FUNCTION sessionq.defer(text, text, jsonb, timestamptz) IS
  'Queue a job of task p_task (sessionq.job_kinds: its queue, and its queueing lock for subject p_subject) with keyword arguments p_args (and the W3C traceparent of a traced statement, the transaction-local setting sessionq.traceparent), due at p_at (NULL: now). A job already waiting under that lock covers it and runs no later than p_at. Returns the new job id, or NULL.';

DROP FUNCTION IF EXISTS sessionq.webhook_streams(uuid, integer);
DROP FUNCTION IF EXISTS sessionq.claim_webhook_delivery(uuid, uuid, uuid, double precision);
DROP FUNCTION IF EXISTS sessionq.record_webhook_attempt(bigint, uuid, boolean, integer, text, boolean, integer);

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
