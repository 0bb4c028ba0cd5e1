"""The core of the two PostgreSQL-backed stand-in runtimes, the simulator (`runtime/simulator/`) and
the process runtime (`runtime/process/`): what both implement the same way.

- `names.py`: the name rule for atespaces, Actors, templates and tags, and template references;
- `pages.py`: keyset page tokens, page sizes and the pages of Actors and Workers;
- `egress.py`: the canonical stored form of an egress allow-set;
- `rows.py`: the mappers from their rows (templates, actors, snapshots, tags, workers, egress
  policies) to the records of `runtime/base.py`;
- `reads.py`: the reads both make the same way on their own schema (an Actor with its snapshots, a
  page of Actors, a template, a tag, an egress policy, the checks of an Actor row);
- `database.py`: the install of a runtime's schema (`installing`), the connection pool, the short
  transaction and the one-statement call, with the mapping of PostgreSQL errors (and the schema's
  ``fail`` SQLSTATE) to `SubstrateError`;
- `message.py`: the A2A Message an `InvokeRequest` carries;
- `core.sql`: the functions both schemas define the same way (``fail``, ``lock_actor``), installed
  into each runtime's schema after its schema.sql by `database.installing`.

Each runtime keeps its own schema (``substrate_sim``, ``sessionq_process``); the simulator adds fault
injection and the deterministic agent's turns, the process runtime processes, warm interpreters and
archives.
"""
