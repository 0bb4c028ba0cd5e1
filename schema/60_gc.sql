-- Runtime revision garbage collection: discovery marks revisions nothing references; collection
-- deletes their actor templates from the runtime. Deletion markers (gc_marked_at) are never
-- cleared; a reference that appears later only stops collection, it never unmarks.

CREATE OR REPLACE FUNCTION sessionq.revision_referenced(p_revision uuid) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT EXISTS (SELECT 1 FROM sessionq.agents a
                  WHERE a.desired_revision_id = p_revision OR a.latest_successful_revision_id = p_revision)
      OR EXISTS (SELECT 1 FROM sessionq.sessions s WHERE s.revision_id = p_revision)
      OR EXISTS (SELECT 1 FROM sessionq.checkpoints c WHERE c.revision_id = p_revision)
      OR EXISTS (SELECT 1 FROM sessionq.turn_snapshots p WHERE p.revision_id = p_revision)
$$;
COMMENT ON FUNCTION sessionq.revision_referenced(uuid) IS
  'True while an Agent definition (desired or latest successful), a live Session, a checkpoint or a turn pin (until its tag is released) references the revision.';

CREATE OR REPLACE FUNCTION sessionq.gc_discover() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_pending bigint;
BEGIN
  UPDATE sessionq.revisions r SET gc_marked_at = clock_timestamp()
   WHERE r.gc_marked_at IS NULL AND r.state IN ('READY', 'FAILED') AND NOT sessionq.revision_referenced(r.id);
  SELECT count(*) INTO v_pending FROM sessionq.revisions r
   WHERE r.gc_marked_at IS NOT NULL AND r.gc_collected_at IS NULL AND NOT sessionq.revision_referenced(r.id);
  RETURN v_pending;
END $$;
COMMENT ON FUNCTION sessionq.gc_discover() IS
  'Discovery: mark (gc_marked_at, never cleared) prepared or failed revisions that nothing references, and return how many marked revisions are eligible for collection now.';

CREATE OR REPLACE FUNCTION sessionq.gc_claim(p_limit integer) RETURNS SETOF jsonb
LANGUAGE sql AS $$
  SELECT to_jsonb(r) FROM sessionq.revisions r
   WHERE r.gc_marked_at IS NOT NULL AND r.gc_collected_at IS NULL AND NOT sessionq.revision_referenced(r.id)
   ORDER BY r.gc_marked_at, r.id
   LIMIT p_limit
$$;
COMMENT ON FUNCTION sessionq.gc_claim(integer) IS
  'Revisions to collect now: marked, not collected, still unreferenced (rechecked; references are never bypassed).';

CREATE OR REPLACE FUNCTION sessionq.gc_finish(p_revision uuid) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE sessionq.revisions SET gc_collected_at = clock_timestamp()
   WHERE id = p_revision AND gc_marked_at IS NOT NULL AND gc_collected_at IS NULL;
  RETURN FOUND;
END $$;
COMMENT ON FUNCTION sessionq.gc_finish(uuid) IS 'Record that the revision''s actor template is gone from the runtime.';
