"""Every StrEnum of sessionq.models holds exactly the strings the SQL allows.

The values of a column come from its CHECK constraint (read from pg_constraint, as the database
has it); the statuses and outcomes of a procedure from the literals its RETURN QUERY statements
return (read from pg_proc). A value added on one side only fails here, not in production.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

import psycopg
import pytest

from sessionq import models

# (table, column) -> the enum of its values
COLUMNS: dict[tuple[str, str], type[StrEnum]] = {
    ("sessions", "state"): models.SessionState,
    ("sessions", "operation"): models.OperationKind,
    ("sessions", "request_kind"): models.RequestKind,
    ("sessions", "deletion_reason"): models.DeletionReason,
    ("sessions", "snapshot_status"): models.SnapshotState,
    ("session_shares", "permission"): models.SharePermission,
    ("revisions", "state"): models.RevisionState,
    ("checkpoints", "state"): models.CheckpointState,
    ("tasks", "phase"): models.TaskPhase,
    ("job_attempts", "outcome"): models.JobAttemptOutcome,
    ("push_deliveries", "state"): models.PushDeliveryState,
    ("task_cancels", "outcome"): models.CancelOutcome,
    ("lifecycle_events", "kind"): models.EventKind,
    ("webhook_deliveries", "state"): models.WebhookDeliveryState,
    ("bulk_actions", "kind"): models.BulkActionKind,
    ("bulk_actions", "state"): models.BulkActionState,
    ("turn_snapshots", "state"): models.TurnPinState,
    ("queued_turns", "policy"): models.QueuedTurnPolicy,
}

# enum -> the procedures whose first result column (status / outcome) it holds
PROCEDURES: dict[type[StrEnum], tuple[str, ...]] = {
    models.AdmissionOutcome: ("admit_creation", "admit_operation", "admit_fork", "creation_retry"),
    models.ClaimStatus: ("claim_operation", "begin_operation"),
    models.CheckpointClaimStatus: ("claim_checkpoint",),
    models.ObservationStatus: ("observe",),
    models.ExpiryOutcome: ("expire_session",),
    models.TurnCheckpointability: ("turn_checkpointability",),
}

IN_LIST = re.compile(r"^CHECK \(\((\w+) = ANY \(ARRAY\[(.*)\]\)\)\)$")
LITERAL = re.compile(r"'([^']*)'::text")
RETURNED = re.compile(r"RETURN QUERY SELECT '([^']*)'::text", re.I)


def _rows(url: str, sql: str) -> list[Any]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


def check_lists(url: str) -> dict[tuple[str, str], set[str]]:
    """(table, column) -> the values its CHECK (column IN (...)) constraint allows."""
    out: dict[tuple[str, str], set[str]] = {}
    for table, definition in _rows(
        url,
        "SELECT c.conrelid::regclass::text, pg_get_constraintdef(c.oid) FROM pg_constraint c"
        " JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = 'sessionq' AND c.contype = 'c'",
    ):
        m = IN_LIST.match(definition)
        if m:
            out[(table.removeprefix("sessionq."), m.group(1))] = set(LITERAL.findall(m.group(2)))
    return out


def returned_literals(url: str, names: tuple[str, ...]) -> set[str]:
    rows = _rows(
        url,
        "SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        f" WHERE n.nspname = 'sessionq' AND p.proname IN ({', '.join(repr(n) for n in names)})",
    )
    assert {r[0] for r in rows} == set(names), "a procedure of the map is missing"
    return {value for _, source in rows for value in RETURNED.findall(source)}


@pytest.mark.parametrize("column", list(COLUMNS), ids=lambda c: ".".join(c))
def test_column_enum_matches_its_check_constraint(schema_url, column):
    allowed = check_lists(schema_url)
    assert column in allowed, f"no CHECK ({column[1]} IN (...)) on sessionq.{column[0]}"
    assert {m.value for m in COLUMNS[column]} == allowed[column]


def test_every_checked_value_list_has_its_enum(schema_url):
    """A new CHECK (column IN (...)) gets a StrEnum in sessionq.models (and a line in COLUMNS)."""
    assert set(check_lists(schema_url)) == set(COLUMNS)


@pytest.mark.parametrize("enum", list(PROCEDURES), ids=lambda e: e.__name__)
def test_outcome_enum_matches_what_its_procedures_return(schema_url, enum):
    assert {m.value for m in enum} == returned_literals(schema_url, PROCEDURES[enum])


def test_the_comparison_sees_a_drift(database_url):
    """The parsing above finds what it compares: a value the database allows and the enum lacks fails."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE sessionq.session_shares DROP CONSTRAINT session_shares_permission_check")
        conn.execute(
            "ALTER TABLE sessionq.session_shares ADD CONSTRAINT session_shares_permission_check"
            " CHECK (permission IN ('READ_ONLY', 'READ_WRITE', 'ADMIN'))"
        )
    allowed = check_lists(database_url)[("session_shares", "permission")]
    assert allowed == {"READ_ONLY", "READ_WRITE", "ADMIN"} != {m.value for m in models.SharePermission}


async def test_rows_carry_enum_members(store, sim):
    """The store converts at its boundary: what it returns holds members, not bare strings."""
    from lifecycle import ready_session

    s = await ready_session(store, sim)
    assert type(s.state) is models.SessionState and type(s.operation) is models.OperationKind
    assert type(s.request_kind) is models.RequestKind
    adm = await store.admit_operation(s.id, "alice", None, models.OperationKind.SUSPEND)
    assert type(adm.outcome) is models.AdmissionOutcome and adm.outcome is models.AdmissionOutcome.ADMITTED
    obs = await store.observe(s.id, adm.generation)
    assert obs.status is models.ObservationStatus.PENDING
    with pytest.raises(ValueError, match="'BOGUS' is not a SessionState"):
        models.Session.from_json({**{f: None for f in models.Session.__dataclass_fields__}, "state": "BOGUS"})
