-- 0030_webhook_job_once: one committing transaction defers a subscription's deliver_webhooks job.
-- Every transition with an event deferred the job of its subscription at commit unless one was
-- waiting; while the first of them held its uncommitted insert, the others queued behind it on the
-- queueing lock's unique index (one subscription is every Session's: tens of ms at 64 clients). The
-- deferral now takes an advisory lock first and a transaction that finds it held defers nothing (the
-- holder's job delivers its events: a job ends only once every transaction begun before its first
-- claim has ended); the periodic tick defers the job of a subscription whose events no job covers
-- (wake_webhook_jobs), should the holder have rolled back; both defer through defer_webhook_job.
-- No table changes.
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
