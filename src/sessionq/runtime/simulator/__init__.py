"""The simulated Substrate: a PostgreSQL-backed stand-in for the real runtime.

- `substrate.py`: `SimulatedSubstrate`, the `Substrate` implementation: Actors, templates, tags,
  egress policies, workers, listings, and test hooks (durable directories, crashes, call log);
- `faults.py`: fault injection (delays, blocks, errors before the effect, lost responses);
- `turns.py`: one turn of the agent as an Actor plays it: the deterministic agent
  (`runtime/deterministic_agent.py`) answers, and the turn is reported through the Actor's
  TaskStoreService client (`runtime/taskstore_client.py`);
- `database.py` and `schema.sql`: its schema ``substrate_sim`` (what it adds to the core's tables:
  faults, options, the call log, turn cancels, durable directories in rows, and the functions of its
  hot calls) and worker pool; the core tables and their functions ``fail``, ``lock_actor`` and
  ``release_worker``, the connection pool, the row mappers, page tokens and the name rule are the
  stand-in core's (`runtime/stand_in/`), shared with the process runtime.

It owns its connection to its own schema (it stands in for an external system), and never uses
sessionq's stores.
"""

from sessionq.runtime.simulator.database import install_schema, worker_identity
from sessionq.runtime.simulator.faults import FAULT_KINDS, LIST_METHODS, PROTOCOL_METHODS
from sessionq.runtime.simulator.substrate import WORKLOAD_TOKEN_ENV, SimulatedSubstrate
from sessionq.runtime.stand_in.pages import decode_actor_token, encode_actor_token

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
