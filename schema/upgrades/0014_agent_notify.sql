-- Upgrade 0014_agent_notify: a change of an Agent NOTIFYs sessionq_agent.
--
-- Applied by its revision only, to a database whose schema was installed before it; a database
-- installed from schema/ at or after it has all of this already. Frozen: a later change to these
-- statements is a later upgrade, and the canonical text lives in schema/. Every statement is
-- idempotent.

-- notify_agent_change: an Agent applied, changed (spec, revision, conditions) or deleted, through
-- any replica, wakes the API processes' subscribers of the Agent list (MCP's kagent://agents).
CREATE OR REPLACE FUNCTION sessionq.notify_agent_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM sessionq.notify('sessionq_agent', jsonb_build_object('agent', OLD.namespace || '/' || OLD.name));
  ELSE
    PERFORM sessionq.notify('sessionq_agent', jsonb_build_object('agent', NEW.namespace || '/' || NEW.name));
  END IF;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION sessionq.notify_agent_change() IS
  'Trigger: NOTIFY sessionq_agent after an Agent row is inserted, updated or deleted (delivered at commit). Payload {"agent": "namespace/name"} (src/sessionq/db/notify.py).';
DROP TRIGGER IF EXISTS agents_notify ON sessionq.agents;
CREATE TRIGGER agents_notify AFTER INSERT OR UPDATE OR DELETE ON sessionq.agents
  FOR EACH ROW EXECUTE FUNCTION sessionq.notify_agent_change();
