"""Durable directories and their snapshots: compressed tar archives written to a temporary name,
flushed and renamed into place, so a crash never leaves a half archive under the real name.

What an agent can make in its own directory survives a snapshot and a restore: files, directories,
FIFOs, hard links between its files, and symbolic links to anywhere (a virtual environment's
``bin/python -> /usr/bin/python3``), kept as links and never followed. The restore is the guard:
it writes only below the fresh directory it fills, never through a link (no member below a symbolic
link, no name twice, no hard link to anything but a regular file it restored itself, no device),
with no owner, set-id or group/other write bits taken from the archive, and it stops once the
members add up to more than the size limit. Long runs of zeros are written as holes, so a sparse
file is restored sparse. What the agent made unreadable to its owner is opened up to be archived.

Sizes are apparent sizes, the same three ways (`directory_size`, the archive's writer, the restore):
a regular file's length once per inode, a symbolic link's target length; a sparse file counts
whole. Snapshot files are the runtime's alone (0600, their directories 0700).
"""

from __future__ import annotations

import copy
import os
import shutil
import stat
import tarfile
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

__all__ = [
    "ArchiveError",
    "DirectoryTooLarge",
    "RestoreRefused",
    "directory_size",
    "link_or_copy",
    "remove_tree",
    "restore_archive",
    "write_archive",
]

PARTIAL = ".partial-"
FILE_MODE = 0o600  # snapshot and tag files: readable by the runtime alone
DIR_MODE = 0o700
# the global PAX header naming the directory an archive was written from: an absolute symbolic
# link into it is pointed into the directory it is restored to (a fork's own directory)
SOURCE_HEADER = "SESSIONQ.source"
HOLE_CHUNK = 64 * 1024  # a run of zeros this long (aligned) is left as a hole
_ZEROS = bytes(HOLE_CHUNK)
_NAME_SHOWN = 120  # at most this much of a member's name in an error
# the members restore_archive hands to extractall are checked already: no filter of tarfile's on
# top (which, from Python 3.14 on, is the "data" filter by default: it refuses absolute links)
_NO_FILTER: dict[str, Any] = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}


class ArchiveError(Exception):
    """A snapshot that cannot be written or restored. Its text names members by their names
    inside the durable directory only (never a path of the runtime's), safe to show the user."""


class DirectoryTooLarge(ArchiveError):
    """The durable directory (or the archive being restored) is over the size limit."""


class RestoreRefused(ArchiveError):
    """The archive holds something a restore never writes, or cannot be read."""


def _shown(name: str) -> str:
    return repr(name if len(name) <= _NAME_SHOWN else name[:_NAME_SHOWN] + "...")


def directory_size(path: Path) -> int:
    """The apparent size of what is below `path`: each regular file's length once per inode (hard
    links count once), each symbolic link's target length (never followed)."""
    total = 0
    inodes: set[tuple[int, int]] = set()
    for root, dirs, files in os.walk(path, followlinks=False):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                if (st.st_dev, st.st_ino) in inodes:
                    continue
                inodes.add((st.st_dev, st.st_ino))
            if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                total += st.st_size
    return total


def _member_size(info: tarfile.TarInfo) -> int:
    """A member's apparent size (see the module docstring); a hard link takes no space of its own."""
    if info.issym():
        return len(info.linkname)
    if info.isreg():
        return info.size
    return 0


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def private_dir(path: Path) -> None:
    """Make `path` (and missing parents) a directory only its owner can enter."""
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    os.chmod(path, DIR_MODE)


def write_archive(
    source: Path,
    dest: Path,
    *,
    level: int = 6,
    limit: int = 0,
    before_rename: Callable[[Path], None] | None = None,
) -> int:
    """Archive the directory `source` (its contents, relative names) to `dest` as tar.gz (mode
    0600): written to `<dest>.partial-<random>`, flushed, renamed to `dest`, the directory flushed.
    Returns the archive's size. DirectoryTooLarge once the members add up to more than `limit`
    bytes (0: no limit). `before_rename` (tests) runs between the write and the rename."""
    private_dir(dest.parent)
    tmp = dest.with_name(f"{dest.name}{PARTIAL}{uuid.uuid4().hex[:8]}")
    total = 0

    def count(info: tarfile.TarInfo) -> tarfile.TarInfo:
        nonlocal total
        total += _member_size(info)
        if limit and total > limit:
            raise DirectoryTooLarge(f"the durable directory holds more than {limit} bytes")
        # what the agent made unreadable to its owner is still its own: the runtime opens it up to
        # read it (the archive keeps the mode it had); tarfile reads a file, or lists a directory,
        # after this filter
        needed = 0o400 if info.isreg() else 0o500 if info.isdir() else 0
        if info.mode & needed != needed:
            os.chmod(source / info.name, (info.mode | needed) & 0o7777)
        return info

    try:
        entries = sorted(os.listdir(source))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
        with open(fd, "wb") as raw:
            with tarfile.open(
                fileobj=raw,
                mode="w:gz",
                compresslevel=level,
                format=tarfile.PAX_FORMAT,
                # an empty archive gets no global header: tarfile cannot read one followed by nothing
                pax_headers={SOURCE_HEADER: str(source)} if entries else None,
            ) as tar:
                for entry in entries:
                    tar.add(source / entry, arcname=entry, recursive=True, filter=count)
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


class _Restore:
    """The checks of one restore: each member against those before it (see the module docstring),
    returned without owner, set-id or group/other write bits. Not a tarfile extraction filter,
    which tarfile may apply to a member more than once and which older Pythons lack: the members
    are handed to extractall checked, with no filter of its own ("fully_trusted")."""

    def __init__(self, dest: Path, source: str | None, limit: int) -> None:
        self.dest = str(dest)
        self.source = source.rstrip("/") if source else None
        self.limit = limit
        self.total = 0
        self.seen: set[str] = set()
        self.leaves: set[str] = set()  # members that are no directory: nothing may be below them
        self.parents: set[str] = set()  # directories members are below, listed or not
        self.files: set[str] = set()  # regular files restored: what a hard link may name

    @staticmethod
    def _normal(name: str, member: tarfile.TarInfo, what: str = "member") -> str:
        if name.startswith("/"):
            raise RestoreRefused(f"the {what} {_shown(name)} is an absolute path")
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise RestoreRefused(f"the {what} {_shown(name)} leaves the directory")
        if not parts or "\x00" in name:
            raise RestoreRefused(f"the archive holds a member without a usable name ({_shown(member.name)})")
        return "/".join(parts)

    def members(self, tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
        """The archive's members, each checked just before it is extracted."""
        for member in tar:
            yield self.check(member)

    def check(self, member: tarfile.TarInfo) -> tarfile.TarInfo:
        name = self._normal(member.name, member)
        if name in self.seen:
            raise RestoreRefused(f"the member {_shown(name)} is in the archive twice")
        parts = name.split("/")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            if prefix in self.leaves:
                raise RestoreRefused(f"the member {_shown(name)} is below {_shown(prefix)}, which is no directory")
        if not member.isdir() and name in self.parents:
            raise RestoreRefused(f"the member {_shown(name)} is no directory, yet members are below it")
        # owned by the runtime's user, whatever the archive says (a runtime running as root chowns)
        changes: dict[str, Any] = {"name": name, "uid": os.geteuid(), "gid": os.getegid(), "uname": "", "gname": ""}
        mode = member.mode & 0o755  # no set-id, sticky, group or other write bits
        if member.issym():
            linkname = member.linkname
            if self.source and (linkname == self.source or linkname.startswith(self.source + "/")):
                linkname = self.dest + linkname[len(self.source):]  # into the directory it is restored to
            changes["linkname"] = linkname
            changes["mode"] = None
        elif member.islnk():
            target = self._normal(member.linkname, member, "hard link's target")
            if target not in self.files:
                raise RestoreRefused(f"the hard link {_shown(name)} names {_shown(target)}, no file restored before it")
            changes["linkname"] = target
            changes["mode"] = mode | 0o600
        elif member.isreg():
            changes["mode"] = mode | 0o600  # the owner can read it back at the next snapshot
        elif member.isdir():
            changes["mode"] = mode | 0o700  # the owner can list, fill and remove it
        elif member.isfifo():
            changes["mode"] = mode | 0o600
        else:
            raise RestoreRefused(f"the member {_shown(name)} is a device or of an unknown type")
        self.total += _member_size(member)  # as the writer counted it
        if self.limit and self.total > self.limit:
            raise DirectoryTooLarge(
                f"the snapshot holds more than {self.limit} bytes (runtime.process.maxDirectoryBytes)"
            )
        self.seen.add(name)
        self.parents.update("/".join(parts[:i]) for i in range(1, len(parts)))
        if not member.isdir():
            self.leaves.add(name)
        if member.isreg():
            self.files.add(name)
        checked = copy.copy(member)  # TarInfo.replace is Python 3.11.4+
        for attribute, value in changes.items():
            setattr(checked, attribute, value)
        return checked


class _RestoringTarFile(tarfile.TarFile):
    """A TarFile whose regular files are created new (never through an existing name) and keep
    their holes: runs of zeros are skipped, not written."""

    def makefile(self, tarinfo: tarfile.TarInfo, targetpath: Any) -> None:
        source: Any = self.fileobj
        source.seek(tarinfo.offset_data)
        sparse: Any = tarinfo.sparse  # GNU sparse members: [(offset, size), ...] of their data
        fd = os.open(targetpath, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
        with open(fd, "wb") as target:
            for offset, size in sparse or [(0, tarinfo.size)]:
                target.seek(offset)
                _copy_keeping_holes(source, target, size)
            target.truncate(tarinfo.size)


def _copy_keeping_holes(source: IO[bytes], target: IO[bytes], length: int) -> None:
    remaining = length
    while remaining > 0:
        want = min(HOLE_CHUNK, remaining)
        chunk = source.read(want)
        if len(chunk) < want:
            raise tarfile.ReadError("unexpected end of data")
        if chunk == _ZEROS[:want]:
            target.seek(want, os.SEEK_CUR)
        else:
            target.write(chunk)
        remaining -= want


def restore_archive(archive: Path | None, dest: Path, *, limit: int = 0) -> None:
    """Make `dest` a fresh directory holding the archive's files (empty without an archive), as
    the module docstring says; `limit`: the most bytes the members may add up to (0: no limit).
    ArchiveError when it cannot: nothing of it stays, and nothing was written outside `dest`."""
    try:
        remove_tree(dest)
        private_dir(dest.parent)
        dest.mkdir(mode=DIR_MODE)
        if archive is None:
            return
        with _RestoringTarFile.open(archive, mode="r:gz") as tar:
            tar.errorlevel = 2  # every error stops the restore
            checks = _Restore(dest, tar.pax_headers.get(SOURCE_HEADER), limit)
            tar.extractall(dest, members=checks.members(tar), **_NO_FILTER)
    except ArchiveError:
        remove_tree(dest)
        raise
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        remove_tree(dest)
        raise RestoreRefused(f"the archive is damaged ({type(exc).__name__}: {str(exc)[:200]})") from exc
    except OSError as exc:
        remove_tree(dest)
        # the OS's reason only: its text would name the runtime's paths
        raise RestoreRefused(exc.strerror or type(exc).__name__) from exc


def link_or_copy(source: Path, dest: Path) -> None:
    """Give `dest` the content of the immutable archive `source`: a hard link when the file system
    allows it, else a copy (to a temporary name, mode 0600, then renamed)."""
    private_dir(dest.parent)
    tmp = dest.with_name(f"{dest.name}{PARTIAL}{uuid.uuid4().hex[:8]}")
    try:
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)
            os.chmod(tmp, FILE_MODE)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove_tree(path: Path) -> None:
    """Remove a file, link or directory tree. Directories its owner made unreadable or unwritable
    are opened up first when a plain removal fails, so an agent's read-only directory never blocks
    the next restore."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
        return
    if not path.exists():
        return
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        os.chmod(path, DIR_MODE)
        for root, dirs, _files in os.walk(path):  # top-down: each directory opened before it is entered
            for name in dirs:
                child = os.path.join(root, name)
                if not os.path.islink(child):
                    os.chmod(child, DIR_MODE)
        shutil.rmtree(path, ignore_errors=True)
