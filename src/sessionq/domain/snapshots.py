"""Which snapshot a suspension recorded: the exact, durable VOLUMES snapshot or none."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sessionq.models import SnapshotState
from sessionq.runtime.base import Snapshot, SnapshotFidelity, SnapshotStatus

log = logging.getLogger(__name__)

# the largest snapshot size recorded (1 PiB; sessionq.check_snapshot_bytes refuses more): a runtime
# reporting a negative, non-integral or larger size has its size taken as unknown
MAX_SNAPSHOT_BYTES = 1 << 50


class IdentityMismatch(Exception):
    pass


def snapshot_bytes(snap: Snapshot) -> int | None:
    """The snapshot's size as recorded in the Session's usage: the runtime's figure when it gave a
    plausible one, else None (unknown, never counted as 0)."""
    size = snap.size_bytes
    if size is None:
        return None
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_SNAPSHOT_BYTES:
        log.warning("the runtime reported an implausible size for snapshot generation %d; recorded as unknown",
                    snap.generation)
        return None
    return size


def pick_snapshot(snapshots: Sequence[Snapshot]) -> dict[str, Any] | None:
    """The exact snapshot to record: the highest generation. Its URI is accepted only once its
    durable status is COMPLETED; a pending generation never falls back to an older one.
    Only VOLUMES snapshots are accepted (ROOTFS and MEMORY would restore more than files).
    The result is what sessions.snapshot_* record: generation, uri, status (a SnapshotState) and
    bytes (the durable snapshot's size, None while pending or when the runtime cannot say)."""
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
        "bytes": snapshot_bytes(top) if done else None,
    }
