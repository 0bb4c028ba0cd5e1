"""The code stays ruff- and mypy-clean (the commands of `make lint`)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff():
    result = run("ruff", "check", "src", "jobs", "cli", "tests", "scripts")
    assert result.returncode == 0, result.stdout[-3000:]


def test_mypy():
    for target in ("src/sessionq", "jobs", "cli"):  # one run each: jobs/ and cli/ install under sessionq
        result = run("mypy", target)
        assert result.returncode == 0, result.stdout[-3000:]
