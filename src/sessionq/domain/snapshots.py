"""Which snapshot a suspension recorded: the exact, durable VOLUMES snapshot or none."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sessionq.models import SnapshotState
from sessionq.runtime.base import Snapshot, SnapshotFidelity, SnapshotStatus


class IdentityMismatch(Exception):
    pass


def pick_snapshot(snapshots: Sequence[Snapshot]) -> dict[str, Any] | None:
    """The exact snapshot to record: the highest generation. Its URI is accepted only once its
    durable status is COMPLETED; a pending generation never falls back to an older one.
    Only VOLUMES snapshots are accepted (ROOTFS and MEMORY would restore more than files).
    The result is what sessions.snapshot_* record: generation, uri and status (a SnapshotState)."""
    if not snapshots:
        return None
    top = max(snapshots, key=lambda s: s.generation)
    if top.fidelity != SnapshotFidelity.VOLUMES:
        raise IdentityMismatch(f"snapshot generation {top.generation} is {top.fidelity}, not VOLUMES")
    done = top.status == SnapshotStatus.COMPLETED
    return {
        "generation": top.generation,
        "uri": top.uri if done else None,
        "status": SnapshotState.COMPLETED if done else SnapshotState.IN_PROGRESS,
    }
