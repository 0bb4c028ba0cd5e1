"""Checkpoints and forks (schema/40_checkpoints.sql)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from uuid import UUID

from sessionq.db import notify
from sessionq.db.notify import Channel
from sessionq.db.stores.base import StoreBase
from sessionq.models import (
    Admission,
    Checkpoint,
    CheckpointClaim,
    CheckpointClaimStatus,
    CheckpointState,
    TagOwner,
    Turn,
    TurnPin,
)


class CheckpointStore(StoreBase):

    async def admit_checkpoint(self, session_id: UUID, caller: str, request_id: str, expected_head: str) -> Checkpoint:
        value = await self._value(
            "SELECT sessionq.admit_checkpoint(%s, %s, %s, %s)", (session_id, caller, request_id, expected_head)
        )
        return Checkpoint.from_json(value)

    async def claim_checkpoint(self, checkpoint_id: UUID, executor: UUID, lifetime: float) -> CheckpointClaim:
        row = await self._one(
            "SELECT * FROM sessionq.claim_checkpoint(%s, %s, %s)", (checkpoint_id, executor, lifetime)
        )
        c = row["checkpoint"]
        return CheckpointClaim(
            CheckpointClaimStatus(row["status"]),
            row["previous_executor"],
            row["expires_at"],
            Checkpoint.from_json(c) if c else None,
        )

    async def release_checkpoint(self, checkpoint_id: UUID, executor: UUID) -> None:
        await self._rows("SELECT sessionq.release_checkpoint(%s, %s)", (checkpoint_id, executor))

    async def finish_checkpoint(
        self, checkpoint_id: UUID, executor: UUID, failure: str | None, tag_snapshot_uri: str | None = None
    ) -> Checkpoint | None:
        """tag_snapshot_uri: the URI of the tag's own snapshot copy (None: the recorded snapshot_uri)."""
        value = await self._value(
            "SELECT sessionq.finish_checkpoint(%s, %s, %s, %s)", (checkpoint_id, executor, failure, tag_snapshot_uri)
        )
        return Checkpoint.from_json(value) if value else None

    async def get_checkpoint(self, checkpoint_id: UUID, caller: str) -> Checkpoint:
        return Checkpoint.from_json(
            await self._value("SELECT sessionq.get_checkpoint(%s, %s)", (checkpoint_id, caller))
        )

    async def checkpoint_by_id(self, checkpoint_id: UUID) -> Checkpoint | None:
        rows = await self._rows("SELECT to_jsonb(c) AS c FROM sessionq.checkpoints c WHERE id = %s", (checkpoint_id,))
        return Checkpoint.from_json(rows[0]["c"]) if rows else None

    async def list_checkpoints(self, session_id: UUID, caller: str, after: UUID | None, limit: int) -> list[Checkpoint]:
        rows = await self._rows(
            "SELECT c FROM sessionq.list_checkpoints(%s, %s, %s, %s) c", (session_id, caller, after, limit)
        )
        return [Checkpoint.from_json(r["c"]) for r in rows]

    async def rename_checkpoint(self, checkpoint_id: UUID, caller: str, name: str) -> Checkpoint:
        return Checkpoint.from_json(
            await self._value("SELECT sessionq.rename_checkpoint(%s, %s, %s)", (checkpoint_id, caller, name))
        )

    async def admit_checkpoint_delete(self, checkpoint_id: UUID, caller: str) -> Checkpoint:
        return Checkpoint.from_json(
            await self._value("SELECT sessionq.admit_checkpoint_delete(%s, %s)", (checkpoint_id, caller))
        )

    async def admit_fork(self, checkpoint_id: UUID, caller: str, request_id: str) -> Admission:
        return await self._admit("SELECT * FROM sessionq.admit_fork(%s, %s, %s)", (checkpoint_id, caller, request_id))

    async def wait_for_checkpoint(
        self, checkpoint_id: UUID, states: set[CheckpointState], timeout: float
    ) -> Checkpoint | None:
        """Wait until the checkpoint is in one of `states` or gone (None); returns the last read
        (still in another state on timeout). Woken by NOTIFY sessionq_checkpoint."""
        woke = asyncio.Event()
        key = str(checkpoint_id)

        def on_notify(payload: str | None) -> None:
            if payload is None or notify.key_of(Channel.CHECKPOINT, payload) == key:
                woke.set()

        unsubscribe = self.listener.subscribe(Channel.CHECKPOINT, on_notify) if self.listener else None
        deadline = time.monotonic() + timeout
        try:
            while True:
                woke.clear()
                c = await self.checkpoint_by_id(checkpoint_id)
                remaining = deadline - time.monotonic()
                if c is None or c.state in states or remaining <= 0:
                    return c
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woke.wait(), timeout=min(remaining, 1.0 if self.listener else 0.05))
        finally:
            if unsubscribe:
                unsubscribe()

    # turn pins and time travel (the turn snapshots of schema/40_checkpoints.sql)

    async def begin_turn_pin(
        self, session_id: UUID, boundary: UUID, executor: UUID, generation: int, uri: str | None
    ) -> TurnPin | None:
        value = await self._value(
            "SELECT sessionq.begin_turn_pin(%s, %s, %s, %s, %s)", (session_id, boundary, executor, generation, uri)
        )
        return TurnPin.from_json(value) if value else None

    async def finish_turn_pin(
        self, pin_id: UUID, executor: UUID, failure: str | None, tag_snapshot_uri: str | None, keep: int
    ) -> TurnPin:
        value = await self._value(
            "SELECT sessionq.finish_turn_pin(%s, %s, %s, %s, %s)", (pin_id, executor, failure, tag_snapshot_uri, keep)
        )
        return TurnPin.from_json(value)

    async def turn_pin_by_id(self, pin_id: UUID) -> TurnPin | None:
        rows = await self._rows("SELECT to_jsonb(p) AS p FROM sessionq.turn_snapshots p WHERE id = %s", (pin_id,))
        return TurnPin.from_json(rows[0]["p"]) if rows else None

    async def forget_turn_pin(self, pin_id: UUID) -> bool:
        return bool(await self._value("SELECT sessionq.forget_turn_pin(%s)", (pin_id,)))

    async def list_turns(self, session_id: UUID, caller: str, after_seq: int | None, limit: int) -> list[Turn]:
        rows = await self._rows(
            "SELECT t FROM sessionq.list_turns(%s, %s, %s, %s) t", (session_id, caller, after_seq, limit)
        )
        return [Turn.from_json(r["t"]) for r in rows]

    async def admit_turn_checkpoint(self, session_id: UUID, caller: str, request_id: str, task_id: str) -> Checkpoint:
        return Checkpoint.from_json(
            await self._value(
                "SELECT sessionq.admit_turn_checkpoint(%s, %s, %s, %s)", (session_id, caller, request_id, task_id)
            )
        )

    async def admit_fork_at_turn(self, session_id: UUID, caller: str, request_id: str, task_id: str) -> Admission:
        return await self._admit(
            "SELECT * FROM sessionq.admit_fork_at_turn(%s, %s, %s, %s)", (session_id, caller, request_id, task_id)
        )

    async def describe_tags(self, caller: str, admin: bool, names: list[str]) -> dict[str, TagOwner]:
        """What sessionq knows of these runtime tags, those the caller may see only (by name)."""
        rows = await self._rows("SELECT * FROM sessionq.describe_tags(%s, %s, %s)", (caller, admin, names))
        return {r["tag_name"]: TagOwner.from_json(r) for r in rows}
