"""The simulated Substrate: a PostgreSQL-backed stand-in for the real runtime.

- `substrate.py`: `SimulatedSubstrate`, the `Substrate` implementation (Actors, templates, tags,
  egress policies, workers) and its fault injection;
- `agent.py`: the deterministic agent an Actor runs for a turn;
- `taskstore_client.py`: how that agent reports to the TaskStoreService;
- `schema.sql`: its own schema, ``substrate_sim``.

It owns its connection to its own schema (it stands in for an external system), and never uses
sessionq's stores.
"""

from sessionq.runtime.simulator.substrate import (
    FAULT_KINDS,
    LIST_METHODS,
    PROTOCOL_METHODS,
    WORKLOAD_TOKEN_ENV,
    SimulatedSubstrate,
    decode_actor_token,
    encode_actor_token,
    install_schema,
    worker_identity,
)

__all__ = [
    "FAULT_KINDS",
    "LIST_METHODS",
    "PROTOCOL_METHODS",
    "WORKLOAD_TOKEN_ENV",
    "SimulatedSubstrate",
    "decode_actor_token",
    "encode_actor_token",
    "install_schema",
    "worker_identity",
]
