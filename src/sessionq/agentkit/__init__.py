"""sessionq's agent kit: run an agent written with the A2A SDK (a2a-sdk) as a sessionq Actor.

    from sessionq import agentkit
    agentkit.run(MyAgentExecutor())        # instead of building a server and running uvicorn

See `server.py` (the Actor's A2A endpoint, settling turns) and `taskstore.py` (the SDK's task store
backed by kagent's TaskStoreService)."""

from sessionq.agentkit.server import SettlingRequestHandler, data_dir, default_card, run, serve
from sessionq.agentkit.taskstore import KagentTaskStore

__all__ = ["KagentTaskStore", "SettlingRequestHandler", "data_dir", "default_card", "run", "serve"]
