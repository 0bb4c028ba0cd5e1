"""What an agent makes in its durable directory survives a snapshot and a restore (a real virtual
environment, links kept as links, hard links, FIFOs, sparse files kept sparse), while a restore
never writes outside the directory, refuses what its writer never makes, and stops at the size
limit; snapshot files are the runtime's alone."""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from sessionq.runtime.base import ActorState, Code, SubstrateError
from sessionq.runtime.process import ProcessConfig, ProcessSubstrate, archive
from tests.process.conftest import ATESPACE, argv, wait_ready

BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)


async def _running_actor(rt: ProcessSubstrate, name: str = "a1") -> tuple[str, Path]:
    try:
        await rt.get_actor_template(ATESPACE, "t1")
    except SubstrateError:
        cmd = argv("sleep")
        await rt.create_actor_template(ATESPACE, "t1", "local/fixture:1", command=cmd[:1], args=cmd[1:])
    actor = await rt.create_actor(ATESPACE, name, f"{ATESPACE}/t1")
    await rt.resume_actor(ATESPACE, name, actor.uid)
    return actor.uid, await wait_ready(rt, actor.uid)


def _venv_python_prefix(venv: Path) -> str:
    """What the venv's own interpreter says its prefix is (it must run)."""
    done = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; print(sys.prefix)"],
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _archive_of(rt: ProcessSubstrate, uid: str) -> Path:
    snaps = [p for p in (rt.root / "snapshots" / uid).iterdir() if p.name.endswith(".tar.gz")]
    return max(snaps, key=lambda p: int(p.name.split(".")[0]))


@pytest.mark.timeout(180)
def test_an_empty_directory_round_trips(tmp_path: Path) -> None:
    """An Actor that wrote nothing is snapshotted and restored: the archive of an empty directory
    reads back (a PAX global header followed by no member would not)."""
    (tmp_path / "empty").mkdir()
    archive.write_archive(tmp_path / "empty", tmp_path / "snap" / "1.tar.gz")
    archive.restore_archive(tmp_path / "snap" / "1.tar.gz", tmp_path / "restored")
    assert (tmp_path / "restored").is_dir() and not any((tmp_path / "restored").iterdir())


async def test_a_venv_and_links_survive_suspend_resume_and_fork(runtime: ProcessSubstrate) -> None:
    uid, data = await _running_actor(runtime)
    # what the agent would run in its directory (here from the test: the same files result)
    subprocess.run([BASE_PYTHON, "-m", "venv", "--without-pip", str(data / "venv")], check=True, timeout=120)  # noqa: ASYNC221
    assert (data / "venv" / "bin" / "python").is_symlink()
    assert os.path.isabs(os.readlink(data / "venv" / "bin" / "python")) or os.path.isabs(
        os.readlink(data / "venv" / "bin" / os.readlink(data / "venv" / "bin" / "python"))
    ), "a venv's interpreter is an absolute link out of the directory"
    (data / "notes").mkdir()
    (data / "notes" / "a.txt").write_text("first")
    os.symlink("notes/a.txt", data / "relative")  # a relative link inside
    os.symlink(str(data / "notes"), data / "absolute")  # an absolute link into the directory itself
    os.symlink("/etc", data / "etc-link")  # a link out of it: kept as a link
    os.link(data / "notes" / "a.txt", data / "hard")
    os.mkfifo(data / "fifo")
    await runtime.suspend_actor(ATESPACE, "a1", uid)

    await runtime.resume_actor(ATESPACE, "a1", uid)
    data = await wait_ready(runtime, uid)
    assert _venv_python_prefix(data / "venv") == str(data / "venv")
    assert os.readlink(data / "relative") == "notes/a.txt" and (data / "relative").read_text() == "first"
    assert os.readlink(data / "absolute") == str(data / "notes")
    assert os.readlink(data / "etc-link") == "/etc"
    assert os.stat(data / "hard").st_ino == os.stat(data / "notes" / "a.txt").st_ino
    assert stat.S_ISFIFO(os.lstat(data / "fifo").st_mode)
    await runtime.suspend_actor(ATESPACE, "a1", uid)

    # a fork starts from the tag's copy in its own directory: its absolute link points into it
    await runtime.create_tag(ATESPACE, "tag1", "a1", uid)
    fork = await runtime.create_actor(ATESPACE, "fork1", f"{ATESPACE}/t1", from_tag="tag1")
    await runtime.resume_actor(ATESPACE, "fork1", fork.uid)
    forked = await wait_ready(runtime, fork.uid)
    assert forked != data
    assert _venv_python_prefix(forked / "venv") == str(forked / "venv")
    assert os.readlink(forked / "absolute") == str(forked / "notes")
    assert (forked / "relative").read_text() == "first"


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]], source: str | None = None) -> bytes:
    buf = io.BytesIO()
    headers = {archive.SOURCE_HEADER: source} if source else {}
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT, pax_headers=headers) as tar:
        for info, content in members:
            tar.addfile(info, io.BytesIO(content) if content is not None else None)
    return buf.getvalue()


def _info(name: str, kind: bytes = tarfile.REGTYPE, *, size: int = 0, link: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname, info.mode = kind, size, link, mode
    return info


def _crafted(outside: Path) -> dict[str, list[tuple[tarfile.TarInfo, bytes | None]]]:
    payload = b"written through a link"
    return {
        "through a link out": [
            (_info("lnk", tarfile.SYMTYPE, link=str(outside)), None),
            (_info("lnk/pwned", size=len(payload)), payload),
        ],
        "through a relative link out": [
            (_info("up", tarfile.SYMTYPE, link="../../" + outside.name), None),
            (_info("up/pwned", size=len(payload)), payload),
        ],
        "a link then a directory of that name": [
            (_info("lnk", tarfile.SYMTYPE, link=str(outside)), None),
            (_info("lnk", tarfile.DIRTYPE, mode=0o777), None),
        ],
        "a hard link out": [(_info("hard", tarfile.LNKTYPE, link="../../" + outside.name + "/victim"), None)],
        "a hard link to a link": [
            (_info("lnk", tarfile.SYMTYPE, link=str(outside / "victim")), None),
            (_info("hard", tarfile.LNKTYPE, link="lnk"), None),
        ],
        "a parent reference": [(_info("../pwned", size=len(payload)), payload)],
        "an absolute name": [(_info(str(outside / "pwned"), size=len(payload)), payload)],
        "a device": [(_info("dev", tarfile.CHRTYPE), None)],
    }


@pytest.mark.parametrize("case", list(_crafted(Path("/x"))))
def test_a_crafted_archive_is_refused_and_writes_nothing_outside(tmp_path: Path, case: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("untouched")
    snapshot = tmp_path / "snap.tar.gz"
    snapshot.write_bytes(_tar(_crafted(outside)[case]))
    dest = tmp_path / "actors" / "uid" / "data"
    with pytest.raises(archive.RestoreRefused):
        archive.restore_archive(snapshot, dest)
    assert sorted(p.name for p in outside.iterdir()) == ["victim"] and (outside / "victim").read_text() == "untouched"
    assert os.stat(outside / "victim").st_nlink == 1
    assert not (tmp_path / "actors" / "pwned").exists() and not (tmp_path / "pwned").exists()
    assert not dest.exists(), "nothing of a refused restore stays"


async def test_a_crafted_snapshot_fails_the_resume_with_data_loss_and_why(runtime: ProcessSubstrate, tmp_path: Path) -> None:
    uid, data = await _running_actor(runtime)
    await runtime.suspend_actor(ATESPACE, "a1", uid)
    outside = tmp_path / "outside"
    outside.mkdir()
    _archive_of(runtime, uid).write_bytes(_tar(_crafted(outside)["through a link out"]))
    with pytest.raises(SubstrateError) as refused:
        await runtime.resume_actor(ATESPACE, "a1", uid)
    assert refused.value.code == Code.DATA_LOSS
    assert refused.value.message.startswith("the snapshot could not be restored: the member 'lnk/pwned' is below 'lnk'")
    assert str(runtime.root) not in refused.value.message, "no path of the runtime's is shown"
    actor = await runtime.get_actor(ATESPACE, "a1")
    assert actor.state == ActorState.CRASHED and actor.crash_message == refused.value.message
    assert list(outside.iterdir()) == [] and not data.exists()


async def test_a_sparse_file_is_restored_sparse(runtime: ProcessSubstrate) -> None:
    uid, data = await _running_actor(runtime)
    apparent = 256 << 20
    with open(data / "sparse.db", "wb") as f:  # noqa: ASYNC230
        f.truncate(apparent)
        f.seek(apparent - 5)
        f.write(b"tail!")
    await runtime.suspend_actor(ATESPACE, "a1", uid)
    assert _archive_of(runtime, uid).stat().st_size < 4 << 20
    await runtime.resume_actor(ATESPACE, "a1", uid)
    data = await wait_ready(runtime, uid)
    st = os.stat(data / "sparse.db")
    assert st.st_size == apparent
    assert st.st_blocks * 512 < 1 << 20, f"{st.st_blocks * 512} bytes of disk for a sparse file"
    with open(data / "sparse.db", "rb") as f:  # noqa: ASYNC230
        f.seek(apparent - 5)
        assert f.read() == b"tail!"


async def test_a_sparse_file_over_the_limit_is_not_snapshotted(database_url: str, tmp_path: Path) -> None:
    rt = ProcessSubstrate(database_url, ProcessConfig(root=tmp_path / "rt", slots=2, stop_grace=2.0,
                                                      warm_interpreters=0, max_directory_bytes=8 << 20))
    await rt.open()
    try:
        uid, data = await _running_actor(rt)
        with open(data / "bomb", "wb") as f:  # noqa: ASYNC230
            f.truncate(4 << 30)  # 4 GiB apparent, no disk
        with pytest.raises(SubstrateError) as refused:
            await rt.suspend_actor(ATESPACE, "a1", uid)
        assert refused.value.code == Code.FAILED_PRECONDITION
        assert "durable directory is 42949673" in refused.value.message  # the files' apparent sizes
        assert "over the limit of 8388608 bytes" in refused.value.message
        assert not list((rt.root / "snapshots").glob("*/*.tar.gz")), "no archive written"
    finally:
        await rt.close()


def test_the_limit_holds_at_restore_before_anything_is_written(tmp_path: Path) -> None:
    """An archive over the limit (written under another limit, or not by the runtime) is refused
    member by member, before the member that passes the limit is written."""
    snapshot = tmp_path / "snap.tar.gz"
    snapshot.write_bytes(_tar([(_info("small", size=4), b"abcd"), (_info("big", size=2 << 20), bytes(2 << 20))]))
    dest = tmp_path / "data"
    with pytest.raises(archive.DirectoryTooLarge, match="more than 1048576 bytes"):
        archive.restore_archive(snapshot, dest, limit=1 << 20)
    assert not dest.exists()
    archive.restore_archive(snapshot, dest, limit=4 << 20)
    assert (dest / "big").stat().st_size == 2 << 20 and (dest / "big").stat().st_blocks == 0


def test_the_writer_stops_at_the_limit(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "a").write_bytes(b"x" * 1000)
    (source / "b").write_bytes(b"y" * 1000)
    os.link(source / "a", source / "a-again")  # a hard link takes no space of its own
    assert archive.directory_size(source) == 2000
    dest = tmp_path / "out" / "1.tar.gz"
    with pytest.raises(archive.DirectoryTooLarge):
        archive.write_archive(source, dest, limit=1999)
    assert not dest.exists() and not list(dest.parent.iterdir())
    archive.write_archive(source, dest, limit=2000)
    assert dest.exists()


async def test_snapshots_tags_and_logs_are_the_runtimes_alone(runtime: ProcessSubstrate) -> None:
    uid, _ = await _running_actor(runtime)
    await runtime.suspend_actor(ATESPACE, "a1", uid)
    await runtime.create_tag(ATESPACE, "tag1", "a1", uid)
    snapshot = _archive_of(runtime, uid)
    [tag] = list((runtime.root / "tags" / ATESPACE).iterdir())

    def mode(p: Path) -> int:
        return stat.S_IMODE(os.stat(p).st_mode)

    assert mode(snapshot) == 0o600 and mode(tag) == 0o600
    assert mode(runtime.root / "logs" / f"{uid}.stderr") == 0o600
    assert mode(runtime.root / "logs" / f"{uid}.stdout") == 0o600
    for d in (runtime.root, snapshot.parent, tag.parent, runtime.root / "snapshots", runtime.root / "tags",
              runtime.root / "actors", runtime.root / "logs"):
        assert mode(d) == 0o700, d



def test_a_damaged_archive_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    whole = _tar([(_info("a", size=300_000), os.urandom(300_000)), (_info("b", size=4), b"abcd")])
    snapshot = tmp_path / "snap.tar.gz"
    snapshot.write_bytes(whole[: len(whole) // 2])
    dest = tmp_path / "data"
    with pytest.raises(archive.RestoreRefused, match="the archive is damaged"):
        archive.restore_archive(snapshot, dest)
    assert not dest.exists()


def test_what_the_agent_made_unreadable_is_still_snapshotted_and_restored(tmp_path: Path) -> None:
    """A file or directory whose owner took away its own read (or list) permission: the runtime,
    not root, still archives it and restores it with its owner's access back, and removes a
    directory its owner cannot write. Run as nobody when the tests run as root (root may do all)."""
    base = Path(tempfile.mkdtemp(prefix="sessionq-unreadable-"))
    try:
        shutil.copy(Path(archive.__file__), base / "archive_under_test.py")
        src = base / "src"
        (src / "closed").mkdir(parents=True)
        (src / "closed" / "inside").write_text("in a closed directory")
        (src / "secret").write_text("unreadable to its owner")
        script = base / "run.py"
        script.write_text(
            "import sys\n"
            "from pathlib import Path\n"
            "sys.path.insert(0, sys.argv[1])\n"
            "import archive_under_test as a\n"
            "base = Path(sys.argv[1])\n"
            "a.write_archive(base / 'src', base / 'snap' / '1.tar.gz')\n"
            "a.restore_archive(base / 'snap' / '1.tar.gz', base / 'dst')\n"
            "print((base / 'dst' / 'secret').read_text(), '|', (base / 'dst' / 'closed' / 'inside').read_text())\n"
            "(base / 'dst' / 'closed').chmod(0o500)\n"  # a directory its owner cannot empty
            "a.remove_tree(base / 'dst')\n"
            "print((base / 'dst').exists())\n"
        )
        command = ["/usr/bin/python3" if os.geteuid() == 0 else sys.executable, str(script), str(base)]
        if os.geteuid() == 0:
            if shutil.which("setpriv") is None or not Path("/usr/bin/python3").exists():
                pytest.skip("running as root without setpriv or /usr/bin/python3 to run as another user")
            for root, dirs, files in os.walk(base):
                for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                    os.chown(name, 65534, 65534)
            os.chmod(base, 0o755)
            command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
        os.chmod(src / "secret", 0o000)
        os.chmod(src / "closed", 0o000)
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split("\n")[:2] == ["unreadable to its owner | in a closed directory", "False"]
    finally:
        for root, dirs, _files in os.walk(base):
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o700)
        shutil.rmtree(base, ignore_errors=True)
