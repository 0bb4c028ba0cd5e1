"""The core of the two PostgreSQL-backed stand-in runtimes, the simulator (`runtime/simulator/`) and
the process runtime (`runtime/process/`): what both implement the same way.

- `names.py`: the name rule for atespaces, Actors, templates and tags, and template references;
- `pages.py`: keyset page tokens, page sizes and the pages of Actors and Workers;
- `egress.py`: the canonical stored form of an egress allow-set;
- `rows.py`: the mappers from their rows (templates, actors, snapshots, tags, workers, egress
  policies) to the records of `runtime/base.py`;
- `reads.py`: the reads both make the same way on their own schema (an Actor with its snapshots, a
  page of Actors, a template, a tag, an egress policy, the checks of an Actor row);
- `database.py`: what makes a runtime's schema (`StandInSchema`) and its install
  (`install_schema`), the connection pool, the short transaction and the one-statement call, with
  the mapping of PostgreSQL errors (and the schema's ``fail`` SQLSTATE) to `SubstrateError`;
- `message.py`: the A2A Message an `InvokeRequest` carries;
- `core.sql`: the tables and functions both schemas define the same way: the core columns of
  templates, workers, actors, snapshots, tags and egress policies, ``fail``, ``lock_actor`` and
  ``release_worker``, installed into each runtime's schema before its schema.sql.

Each runtime keeps its own schema (``substrate_sim``, ``sessionq_process``) and its schema.sql adds
its own columns, tables and functions to the core's: the simulator fault injection, the durable
directory kept in rows and the deterministic agent's turns, the process runtime processes, warm
interpreters and archives.
"""
