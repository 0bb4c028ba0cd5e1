"""sessionq's agent kit: run an agent written with the A2A SDK (a2a-sdk) as a sessionq Actor.

    from sessionq import agentkit          # first: the Actor's process then starts faster (below)
    agentkit.run(MyAgentExecutor())        # instead of building a server and running uvicorn

See `server.py` (the Actor's A2A endpoint, settling turns) and `taskstore.py` (the SDK's task store
backed by kagent's TaskStoreService); `warm.py` is the process runtime's warm interpreter (an
interpreter with this package imported, waiting to become an Actor's process).

Start-up: an Actor's process starts at every turn on a suspended Actor, so its imports are most of
a turn's cost. a2a-sdk's package initialisers import, when they are installed (sessionq's own
dependencies install them), modules an Actor never uses: SQLAlchemy for the SDK's database task and
push-notification stores (half a second or more), and rich and Pygments for httpx's command line.
Importing this package loads the SDK's server with those three hidden, so the SDK takes its
"not installed" path for them (`DatabaseTaskStore` is then the SDK's placeholder, which says how
to get it); they are importable again right after, for the agent's own use. An SDK module that was
imported before this package is left as it is.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType

__all__ = ["KagentTaskStore", "SettlingRequestHandler", "data_dir", "default_card", "run", "serve", "start_turn"]

UNUSED_BY_ACTORS = ("sqlalchemy", "rich", "pygments")


class _Hide(importlib.abc.MetaPathFinder):
    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".", 1)[0] in self.names:
            raise ModuleNotFoundError(f"{fullname} is not loaded by sessionq.agentkit", name=fullname)
        return None


@contextmanager
def hidden(names: Sequence[str] = UNUSED_BY_ACTORS) -> Iterator[None]:
    """Imports of `names` (and their submodules) fail inside the block, unless already loaded."""
    finder = _Hide(names)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


with hidden():
    from sessionq.agentkit.server import SettlingRequestHandler, data_dir, default_card, run, serve, start_turn
    from sessionq.agentkit.taskstore import KagentTaskStore
