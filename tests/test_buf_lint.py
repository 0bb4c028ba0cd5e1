"""`buf lint` (STANDARD rules, proto/buf.yaml) on our protos is clean (issue 20).

buf comes from npm (`@bufbuild/buf`), installed into a cache folder on first use; the test is
skipped, saying so, only when npm is unavailable. buf reads the image scripts/gen_proto.py writes
(our files with source info and their imports: buf's validate.proto and a2a.proto come from
installed packages, not from sources) and lints our files only. A file with a violation is linted
too, so that a buf that checks nothing cannot pass."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BUF_VERSION = "1.75.0"
CACHE = Path(os.environ.get("SESSIONQ_BUF_CACHE", Path.home() / ".cache" / "sessionq-buf")) / BUF_VERSION


def buf() -> Path:
    exe = CACHE / "node_modules" / ".bin" / "buf"
    if exe.exists():
        return exe
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not available: cannot install @bufbuild/buf to run buf lint")
    CACHE.mkdir(parents=True, exist_ok=True)
    result = subprocess.run([npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(CACHE),
                             f"@bufbuild/buf@{BUF_VERSION}"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and exe.exists(), result.stderr
    return exe


def lint(image: Path, *paths: str) -> subprocess.CompletedProcess[str]:
    args = [str(buf()), "lint", str(image), "--config", str(REPO / "proto" / "buf.yaml")]
    for p in paths:
        args += ["--path", p]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def image_of(tmp_path: Path) -> Path:
    image = tmp_path / "image.binpb"
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_proto.py"), "--image", str(image)],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return image


@pytest.mark.timeout(420)
def test_buf_lint_is_clean(tmp_path: Path) -> None:
    image = image_of(tmp_path)
    result = lint(image, "kagent", "sessionq")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


@pytest.mark.timeout(420)
def test_buf_lint_finds_a_violation(tmp_path: Path) -> None:
    src = tmp_path / "proto" / "kagent" / "api" / "v1alpha1"
    src.mkdir(parents=True)
    (src / "bad.proto").write_text('syntax = "proto3";\npackage kagent.api.v1alpha1;\nmessage bad_name { string X = 1; }\n')
    image = tmp_path / "bad.binpb"
    from grpc_tools import protoc

    rc = protoc.main(["protoc", f"-I{tmp_path / 'proto'}", f"--descriptor_set_out={image}", "--include_source_info",
                      "kagent/api/v1alpha1/bad.proto"])
    assert rc == 0
    result = lint(image, "kagent")
    assert result.returncode != 0 and "bad_name" in result.stdout + result.stderr
