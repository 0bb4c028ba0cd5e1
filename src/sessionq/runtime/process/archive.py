"""Durable directories and their snapshots: compressed tar archives written to a temporary name,
flushed and renamed into place, so a crash never leaves a half archive under the real name."""

from __future__ import annotations

import os
import shutil
import tarfile
import uuid
from collections.abc import Callable
from pathlib import Path

__all__ = ["directory_size", "link_or_copy", "remove_tree", "restore_archive", "write_archive"]

PARTIAL = ".partial-"


def directory_size(path: Path) -> int:
    """Bytes of every file below `path` (symbolic links count as themselves, never followed)."""
    total = 0
    for root, dirs, files in os.walk(path, followlinks=False):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                continue
    return total


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_archive(
    source: Path,
    dest: Path,
    *,
    level: int = 6,
    before_rename: Callable[[Path], None] | None = None,
) -> int:
    """Archive the directory `source` (its contents, relative names) to `dest` as tar.gz: written
    to `<dest>.partial-<random>`, flushed, renamed to `dest`, the directory flushed. Returns the
    archive's size. `before_rename` (tests) runs between the write and the rename."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}{PARTIAL}{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as raw:
            with tarfile.open(fileobj=raw, mode="w:gz", compresslevel=level) as tar:
                for entry in sorted(os.listdir(source)):
                    tar.add(source / entry, arcname=entry, recursive=True)
            raw.flush()
            os.fsync(raw.fileno())
        if before_rename is not None:
            before_rename(tmp)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(dest.parent)
    return dest.stat().st_size


def restore_archive(archive: Path | None, dest: Path) -> None:
    """Make `dest` a fresh directory holding the archive's files (empty without an archive)."""
    remove_tree(dest)
    dest.mkdir(parents=True)
    if archive is None:
        return
    with tarfile.open(archive, mode="r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # pragma: no cover - Python without extraction filters; the archives are our own
            tar.extractall(dest)


def link_or_copy(source: Path, dest: Path) -> None:
    """Give `dest` the content of the immutable archive `source`: a hard link when the file system
    allows it, else a copy (to a temporary name, then renamed)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}{PARTIAL}{uuid.uuid4().hex[:8]}")
    try:
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove_tree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)
