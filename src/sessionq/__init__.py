"""sessionq: a PostgreSQL-centric control plane for agent Sessions."""

import os as _os

# The process runtime starts Actors' processes (fork, then exec) from a process whose gRPC threads
# are busy; gRPC's fork handlers then crash the forked child now and then (SIGSEGV before its exec).
# sessionq never uses gRPC in a forked child, so it turns them off, before anything imports grpc
# (grpc reads this once, when it is imported). Set GRPC_ENABLE_FORK_SUPPORT to override.
_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

__version__ = "0.1.0"
