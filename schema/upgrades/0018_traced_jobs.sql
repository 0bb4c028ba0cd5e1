-- Upgrade 0018_traced_jobs: a traced call's W3C trace context travels with the work it starts.
--
-- Applied by its revision only, to a database whose schema was installed before it; a database
-- installed from schema/ at or after it has all of this already. Frozen: a later change to these
-- statements is a later upgrade, and the canonical text lives in schema/. Every statement is
-- idempotent.
--
-- sessionq.defer adds the transaction-local setting sessionq.traceparent (set by the store for a
-- statement made inside a sampled span) to the job's args, and sessionq.notify to the payload.

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
