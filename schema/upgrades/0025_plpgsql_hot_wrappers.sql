-- 0025_plpgsql_hot_wrappers: admit_create, label_pairs, label_keys, job_lock and job_waiting become
-- PL/pgSQL with the same results, so that their plans are kept (PostgreSQL before 18 plans an SQL
-- function's body on every call that is not inlined, and one that reads a table never is).
-- label_pairs feeds sessions.label_pairs and label_keys an index: their values do not change, so no
-- stored value or index entry needs rewriting.
CREATE OR REPLACE FUNCTION sessionq.admit_create(
  p_caller text, p_request_id text, p_namespace text, p_agent text, p_name text
) RETURNS TABLE (outcome text, generation uuid, session jsonb)
LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY SELECT * FROM sessionq.admit_creation(p_caller, 'create', p_request_id, p_namespace, p_agent, p_name,
                                                     p_namespace || '/' || p_agent || '|' || coalesce(p_name, ''));
END $$;

CREATE OR REPLACE FUNCTION sessionq.label_pairs(p_labels jsonb) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN ARRAY(SELECT jsonb_build_object(e.key, e.value)::text FROM jsonb_each(p_labels) AS e);
END $$;

CREATE OR REPLACE FUNCTION sessionq.label_keys(p_labels jsonb) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN ARRAY(SELECT jsonb_object_keys(p_labels));
END $$;

CREATE OR REPLACE FUNCTION sessionq.job_lock(p_task text, p_subject text) RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
  RETURN (SELECT k.lock_prefix || ':' || p_subject FROM sessionq.job_kinds k WHERE k.task_name = p_task);
END $$;

CREATE OR REPLACE FUNCTION sessionq.job_waiting(p_queueing_lock text) RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = sessionq, public
AS $$
BEGIN
  RETURN EXISTS (SELECT 1 FROM procrastinate_jobs j WHERE j.queueing_lock = p_queueing_lock AND j.status = 'todo');
END $$;
