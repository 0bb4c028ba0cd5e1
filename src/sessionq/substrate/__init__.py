"""The runtime boundary (`Substrate`) and its PostgreSQL-backed simulator."""

from sessionq.substrate.base import (
    Actor,
    ActorState,
    ActorTemplate,
    Code,
    EgressPolicy,
    EgressRule,
    Page,
    Snapshot,
    SnapshotFidelity,
    SnapshotStatus,
    Substrate,
    SubstrateError,
    Tag,
    Worker,
)
from sessionq.substrate.simulator import (
    SimulatedSubstrate,
    decode_actor_token,
    encode_actor_token,
    install_schema,
)

__all__ = [
    "Actor",
    "ActorState",
    "ActorTemplate",
    "Code",
    "EgressPolicy",
    "EgressRule",
    "Page",
    "SimulatedSubstrate",
    "Snapshot",
    "SnapshotFidelity",
    "SnapshotStatus",
    "Substrate",
    "SubstrateError",
    "Tag",
    "Worker",
    "decode_actor_token",
    "encode_actor_token",
    "install_schema",
]
