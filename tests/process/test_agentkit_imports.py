"""The agent kit's start-up: an Actor's process imports what it needs and not what a2a-sdk's
package initialisers would load because sessionq's control plane installed it (SQLAlchemy for the
SDK's database stores, rich and Pygments for httpx's command line); they stay importable after."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
import sessionq.agentkit.first_agent
loaded = sorted({m.split('.')[0] for m in sys.modules} & {'sqlalchemy', 'rich', 'pygments', 'yaml', 'psycopg'})
import sqlalchemy.orm  # the agent's own code may still use them
from a2a.server.tasks import InMemoryTaskStore
print(json.dumps({"loaded": loaded, "sqlalchemy": 'sqlalchemy.orm' in sys.modules,
                  "hooks": [type(f).__name__ for f in sys.meta_path if type(f).__name__ == '_Hide']}))
"""


def test_the_agent_imports_no_database_or_cli_modules_and_hides_nothing_after() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"loaded": [], "sqlalchemy": True, "hooks": []}, got
