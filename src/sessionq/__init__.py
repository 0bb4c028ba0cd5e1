"""sessionq: a PostgreSQL-centric control plane for agent Sessions."""

__version__ = "0.1.0"
