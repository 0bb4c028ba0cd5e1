"""The process runtime: a `Substrate` whose Actors are OS processes on this machine.

- `substrate.py`: `ProcessSubstrate` (Actors, templates, tags, slots, egress policies, listings);
- `children.py`: starting, stopping and finding the Actors' processes;
- `warm.py`: warm interpreters (sessionq.agentkit.warm) handed the Actors whose command they can run;
- `archive.py`: durable directories and their compressed snapshots;
- `invoke.py`: a turn delivered to the Actor's private A2A endpoint;
- `database.py` and `schema.sql`: its schema ``sessionq_process`` (what it adds to the core's tables:
  processes, crashes, archives, and its transitions) and process slots; the core tables and their
  functions ``fail``, ``lock_actor`` and ``release_worker``, the connection pool, the row mappers,
  page tokens and the name rule are the stand-in core's (`runtime/stand_in/`), shared with the
  simulator.

It isolates nothing: egress policies are stored and returned, never enforced.
"""

from sessionq.runtime.process.database import install_schema
from sessionq.runtime.process.substrate import DATA_DIR_ENV, ProcessConfig, ProcessSubstrate

__all__ = ["DATA_DIR_ENV", "ProcessConfig", "ProcessSubstrate", "install_schema"]
