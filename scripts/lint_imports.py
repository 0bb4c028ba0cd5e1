"""Check the architecture's import contracts ([tool.importlinter] in pyproject.toml).

import-linter reads the package from the file system, but sessionq installs from several folders
(`src/sessionq`, and `jobs/`, `cli/`, `schema/` as `sessionq.jobs`, `sessionq.cli`,
`sessionq.schema`: [tool.setuptools] package-dir). This script lays the modules out as they
install, in a temporary directory, and runs `lint-imports` on that tree.

    python scripts/lint_imports.py            # make lint runs this
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def installed_tree(dest: Path) -> Path:
    """Copy the package's Python modules under `dest` as they install; returns `dest`."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    package_dir: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    # parents first, so that a sub-package's folder lands inside its parent's copy
    for package, folder in sorted(package_dir.items(), key=lambda item: item[0].count(".")):
        target = dest.joinpath(*package.split("."))
        shutil.copytree(ROOT / folder, target, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def run_contracts(tree: Path) -> subprocess.CompletedProcess[str]:
    command = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    return subprocess.run(
        [command, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
        timeout=300,
    )


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="sessionq-lint-") as tmp:
        result = run_contracts(installed_tree(Path(tmp)))
    sys.stdout.write(result.stdout[result.stdout.find("Contracts"):] if "Contracts" in result.stdout else result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
