"""The code stays ruff- and mypy-clean and keeps the architecture's import contracts (the commands
of `make lint`); a contract broken on purpose fails."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff():
    result = run("ruff", "check", "src", "jobs", "cli", "tests", "scripts")
    assert result.returncode == 0, result.stdout[-3000:]


@pytest.mark.slow
def test_mypy():
    for target in ("src/sessionq", "jobs", "cli"):  # one run each: jobs/ and cli/ install under sessionq
        result = run("mypy", target)
        assert result.returncode == 0, result.stdout[-3000:]


def lint_imports_module():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import lint_imports
    finally:
        sys.path.pop(0)
    return lint_imports


def test_import_contracts_are_kept():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "lint_imports.py")], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("api/rpc.py", "from sessionq.runtime.simulator import SimulatedSubstrate", "The API never imports"),
        ("db/store.py", "from sessionq.domain import operations", "The db layer imports neither"),
        ("runtime/base.py", "import sessionq.db.store", "The runtime imports neither"),
        ("jobs/deps.py", "import sessionq.app.worker", "Nothing imports the composition root"),
        ("domain/turns.py", "import procrastinate", "Only the jobs package uses procrastinate"),
        ("domain/snapshots.py", "import sessionq.domain.quiescence", "No import cycles"),
        ("console/app.py", "from sessionq.runtime.simulator import SimulatedSubstrate", "The web console uses"),
        ("console/app.py", "import sessionq.jobs.bridge", "The web console uses"),
        ("api/rpc.py", "import sessionq.console.app", "The API never imports"),
        ("runtime/process/invoke.py", "from sessionq.runtime.simulator import turns", "The two stand-in runtimes"),
        ("runtime/simulator/turns.py", "import sessionq.runtime.process.archive", "The two stand-in runtimes"),
        ("runtime/stand_in/rows.py", "import sessionq.runtime.simulator.faults", "The stand-in core knows neither"),
    ],
)
def test_a_broken_contract_fails(tmp_path, module, line, contract):
    lint = lint_imports_module()
    tree = lint.installed_tree(tmp_path)
    target = tree / "sessionq" / module
    target.write_text(target.read_text() + f"\n{line}  # broken on purpose\n")
    result = lint.run_contracts(tree)
    assert result.returncode != 0, result.stdout[-3000:]
    broken = [block for block in result.stdout.split("\n\n") if "BROKEN" in block]
    assert any(contract in " ".join(block.split()) for block in broken), result.stdout[-3000:]
