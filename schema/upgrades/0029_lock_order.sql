-- 0029_lock_order: two waits that closed deadlocks, taken out.
-- (1) The fetch of an execute_operation job takes its Session's row NOWAIT. The fetch holds the
-- job's row; a retried CreateSession holds the Session's row and, joining its creation, defers the
-- job, which waits on the job's row.
-- (2) A subscription's deliver_webhooks job is deferred at commit (the deferred trigger
-- queue_webhook_jobs), not by record_event. Deferring waits for another transaction deferring the
-- same job; a transaction of several transitions (a bulk action's page, a batch of suspensions)
-- deferred it at its first Session and then waited for the row of a later one, whose transition
-- waited on that job.
-- An execute_operation job begins its operation in the statement that fetches it (jobs/bridge.py,
-- WorkerJobManager with begin_operations_at_fetch): one round trip instead of two per operation.
-- sessionq.begin_operation claims only a first attempt at a plain creation; it runs in a
-- subtransaction, so that its failure leaves the fetch alone (the job then begins as before).
-- The Session's row is taken NOWAIT: this transaction already holds the job's row, and an
-- admission that holds the Session's row may be deferring that job (a retried CreateSession
-- joining its creation waits on the job's row), so waiting here would close a deadlock. A Session
-- busy elsewhere is begun by the job itself, as any other operation is.
CREATE OR REPLACE FUNCTION sessionq.fetch_job_begun(
  p_queues varchar[], p_worker_id bigint, p_executor uuid, p_lifetime double precision
) RETURNS TABLE (id bigint, status procrastinate_job_status, task_name varchar, priority integer, lock text,
                 queueing_lock text, args jsonb, scheduled_at timestamptz, queue_name varchar, attempts integer,
                 worker_id bigint, begun_status text, begun_previous_executor uuid, begun_expires_at timestamptz,
                 begun_session jsonb, begun_revision jsonb)
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v procrastinate_jobs;
  b_status text;
  b_previous uuid;
  b_expires timestamptz;
  b_session jsonb;
  b_revision jsonb;
BEGIN
  v := sessionq.fetch_job(p_queues, p_worker_id);
  IF v.id IS NOT NULL AND v.task_name = 'execute_operation' AND p_executor IS NOT NULL THEN
    BEGIN
      PERFORM 1 FROM sessionq.sessions s WHERE s.id = (v.args->>'session_id')::uuid FOR UPDATE NOWAIT;
      SELECT o.status, o.previous_executor, o.expires_at, o.session, o.revision
        INTO b_status, b_previous, b_expires, b_session, b_revision
        FROM sessionq.begin_operation((v.args->>'session_id')::uuid, p_executor, p_lifetime) o;
    EXCEPTION WHEN OTHERS THEN
      b_status := NULL;  -- rolled back alone: the job's own begin_operation meets the error (or the lock) again
    END;
  END IF;
  RETURN QUERY SELECT v.id, v.status, v.task_name, v.priority, v.lock, v.queueing_lock, v.args, v.scheduled_at,
                      v.queue_name, v.attempts, v.worker_id, b_status, b_previous, b_expires, b_session,
                      b_revision;
END $$;
COMMENT ON FUNCTION sessionq.fetch_job_begun(varchar[], bigint, uuid, double precision) IS
  'sessionq.fetch_job, and for an execute_operation job sessionq.begin_operation of its Session by executor p_executor (claim lifetime p_lifetime seconds) in the same transaction: its columns begun_* (NULL when the job is of another task, the Session''s row is locked by another transaction (taken NOWAIT: an admission holding it may be deferring this job), or the begin failed and was rolled back alone). A worker passes p_executor NULL to fetch only.';

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

-- queue_webhook_jobs: at commit, make sure the deliver_webhooks job of every subscription that one
-- of the transaction's events matches waits (one waiting job per subscription: under load it takes
-- every event that came while it waited). A deferred trigger, so that it runs once the transaction
-- holds every row it takes: deferring a job waits for another transaction deferring the same job
-- (its queueing lock's unique index), and a transaction making several transitions (a bulk action's
-- page, a batch of suspensions) must not wait so while holding a Session's row that the other one
-- waits for. The subscriptions go in id order, so that two committing transactions never wait on
-- each other's jobs crosswise. The transaction's first firing covers its events so far
-- (sessionq.webhook_jobs_upto: the highest seq covered); the others return at once.
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
    IF NOT sessionq.job_waiting(sessionq.job_lock('deliver_webhooks', v_sub::text)) THEN
      PERFORM sessionq.defer('deliver_webhooks', v_sub::text, jsonb_build_object('subscription_id', v_sub));
    END IF;
  END LOOP;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION sessionq.queue_webhook_jobs() IS
  'Deferred trigger on sessionq.lifecycle_events (runs at commit): for each enabled webhook subscription that an event of the transaction matches (the owner''s or a global one, its event types, its Agent), in id order, its deliver_webhooks job unless one waits (queueing lock webhook:<subscription>). Once per transaction (the setting sessionq.webhook_jobs_upto: the highest event seq covered).';
DROP TRIGGER IF EXISTS lifecycle_events_webhooks ON sessionq.lifecycle_events;
CREATE CONSTRAINT TRIGGER lifecycle_events_webhooks AFTER INSERT ON sessionq.lifecycle_events
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION sessionq.queue_webhook_jobs();
