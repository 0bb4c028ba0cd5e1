"""The reads both stand-in runtimes make the same way, each on its own schema and inside the
caller's transaction: an Actor with its snapshots, a page of Actors, a template, a tag, an egress
policy, and the NOT_FOUND / FAILED_PRECONDITION checks of an Actor row."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from psycopg.rows import DictRow

from sessionq.runtime.base import Actor, ActorTemplate, Code, EgressPolicy, Page, Snapshot, SubstrateError, Tag
from sessionq.runtime.stand_in.database import Cursor
from sessionq.runtime.stand_in.pages import actor_page, tag_page
from sessionq.runtime.stand_in.rows import actor_from_row, policy_from_row, template_from_row

__all__ = ["StandInReads", "checked_actor"]


def checked_actor(row: DictRow | None, atespace: str, name: str, uid: str | None) -> DictRow:
    """The Actor row: NOT_FOUND without one, FAILED_PRECONDITION when `uid` is given and differs."""
    if row is None:
        raise SubstrateError(Code.NOT_FOUND, f"actor {atespace}/{name} not found")
    if uid is not None and row["uid"] != uid:
        raise SubstrateError(
            Code.FAILED_PRECONDITION,
            f"actor uid mismatch for {atespace}/{name}: expected {uid}, found {row['uid']}",
        )
    return row


@dataclass(frozen=True)
class StandInReads:
    """The shared reads on `schema`. `actor_columns` are the columns of an Actor row (alias a, its
    worker w: ``w.ip AS worker_ip`` among them), `snapshot_columns` those of a snapshots row that
    `to_snapshot` maps (where the runtime keeps a snapshot differs)."""

    schema: str
    actor_columns: str
    snapshot_columns: str
    to_snapshot: Callable[[DictRow], Snapshot]

    @property
    def actor_select(self) -> str:
        """The Actor rows joined with their workers, to be followed by a WHERE on alias a."""
        return (
            f"SELECT {self.actor_columns} FROM {self.schema}.actors a"
            f" LEFT JOIN {self.schema}.workers w ON w.name = a.worker"
        )

    async def snapshots_of(self, cur: Cursor, uids: list[str]) -> dict[str, list[Snapshot]]:
        """The snapshots of these Actors, ascending by generation, in one query."""
        result: dict[str, list[Snapshot]] = {u: [] for u in uids}
        if uids:
            await cur.execute(
                f"SELECT {self.snapshot_columns} FROM {self.schema}.snapshots"
                " WHERE actor_uid = ANY(%s) ORDER BY actor_uid, generation",
                (uids,),
            )
            for row in await cur.fetchall():
                result[row["actor_uid"]].append(self.to_snapshot(row))
        return result

    async def actor(self, cur: Cursor, atespace: str, name: str) -> Actor:
        """The Actor with its snapshots; NOT_FOUND without one."""
        await cur.execute(self.actor_select + " WHERE a.atespace = %s AND a.name = %s", (atespace, name))
        row = checked_actor(await cur.fetchone(), atespace, name, None)
        snaps = await self.snapshots_of(cur, [row["uid"]])
        return actor_from_row(row, snaps[row["uid"]])

    async def actor_page(
        self, cur: Cursor, atespace: str | None, boundary: tuple[str | None, str] | None, size: int
    ) -> Page[Actor]:
        """One keyset page of Actors after `boundary` (pages.actor_page)."""
        return await actor_page(cur, self.actor_select, atespace, boundary, size, self.snapshots_of, actor_from_row)

    async def template(self, cur: Cursor, atespace: str, name: str) -> ActorTemplate:
        """The template; NOT_FOUND without one."""
        await cur.execute(f"SELECT * FROM {self.schema}.templates WHERE atespace = %s AND name = %s", (atespace, name))
        row = await cur.fetchone()
        if row is None:
            raise SubstrateError(Code.NOT_FOUND, f"actor template {atespace}/{name} not found")
        return template_from_row(row)

    async def tag_page(
        self, cur: Cursor, atespace: str | None, boundary: tuple[str | None, str] | None, size: int,
        to_tag: Callable[[Any], Tag],
    ) -> Page[Tag]:
        """One keyset page of tags after `boundary` (pages.tag_page)."""
        return await tag_page(cur, f"{self.schema}.tags", atespace, boundary, size, to_tag)

    async def tag_row(self, cur: Cursor, atespace: str, name: str) -> dict[str, Any]:
        """The tag's row; NOT_FOUND without one."""
        await cur.execute(f"SELECT * FROM {self.schema}.tags WHERE atespace = %s AND name = %s", (atespace, name))
        row = await cur.fetchone()
        if row is None:
            raise SubstrateError(Code.NOT_FOUND, f"tag {atespace}/{name} not found")
        return row

    async def egress_policy(self, cur: Cursor, atespace: str, actor: str) -> EgressPolicy:
        """The Actor's egress policy default; NOT_FOUND without the Actor or without the policy."""
        await cur.execute(
            f"SELECT a.uid, p.actor_uid, p.rules, p.version FROM {self.schema}.actors a"
            f" LEFT JOIN {self.schema}.egress_policies p ON p.actor_uid = a.uid"
            " WHERE a.atespace = %s AND a.name = %s",
            (atespace, actor),
        )
        row = await cur.fetchone()
        if row is None:
            raise SubstrateError(Code.NOT_FOUND, f"actor {atespace}/{actor} not found")
        if row["actor_uid"] is None:
            raise SubstrateError(Code.NOT_FOUND, f"egress policy default of actor {atespace}/{actor} not found")
        return policy_from_row(row, row["uid"])
