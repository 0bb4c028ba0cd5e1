#!/usr/bin/env python
"""Regenerate the Python protobuf/gRPC modules from proto/ into src/sessionq/_pb.

Usage (from anywhere; paths are resolved from this file):

    python scripts/gen_proto.py          # regenerate in place
    python scripts/gen_proto.py --check  # regenerate into a temp dir; exit 1 if src/ differs

How it works:

* The A2A types (package ``lf.a2a.v1``) come from the ``a2a-sdk``, whose module
  ``a2a.types.a2a_pb2`` registers the file ``a2a.proto``. We dump that file and its
  transitive dependencies into a FileDescriptorSet and hand it to protoc with
  ``--descriptor_set_in`` so ``import "a2a.proto";`` resolves without a copy of the source.
* buf's ``buf/validate/validate.proto`` (the ``buf.validate`` rule annotations our protos declare)
  comes the same way from the ``protovalidate`` package, which ships its descriptor: it goes into
  the same FileDescriptorSet, and its Python module is generated with ours as
  ``sessionq._pb.buf.validate.validate_pb2`` (the protovalidate engine reads the rules from the
  descriptors; the module only registers the file so that ours can be built).
* protoc emits ``import a2a_pb2 as a2a__pb2``; we rewrite every such import to
  ``from a2a.types import a2a_pb2 ...`` so the SDK's module (and its single registration of
  ``a2a.proto`` in the default descriptor pool) is reused.
* Our protos keep upstream's file names and paths (``proto/kagent/api/v1alpha1/sessions.proto``
  is registered, and described by reflection, as ``kagent/api/v1alpha1/sessions.proto``, the file a
  kagent client was built from; sessionq's own services are in ``proto/sessionq/v1``). protoc
  would make those top-level Python modules (``kagent.api.v1alpha1.sessions_pb2``); we generate
  into a scratch directory, move every module below ``sessionq._pb`` (``sessionq._pb.kagent.api.
  v1alpha1.sessions_pb2``, ``sessionq._pb.sessionq.v1.inventory_pb2``) and rewrite the imports
  and module names accordingly, so nothing is installed as a top-level ``kagent`` module.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import re
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO / "proto"
SRC_ROOT = REPO / "src"
# Folders of our protos below PROTO_ROOT (their proto paths); each becomes the package
# sessionq._pb.<folder> below SRC_ROOT.
PROTO_DIRS = [Path("kagent/api/v1alpha1"), Path("sessionq/v1"), Path("ateapi")]
# files generated from a descriptor a dependency ships (no source of ours)
VALIDATE_PROTO = "buf/validate/validate.proto"
GENERATED_DIRS = [*PROTO_DIRS, Path(VALIDATE_PROTO).parent]
GEN_ROOT = Path("sessionq/_pb")
PKG_DIRS = [GEN_ROOT / d for d in GENERATED_DIRS]
# Package directories (below SRC_ROOT) that get an __init__.py.
INIT_DIRS = sorted(
    {GEN_ROOT, *(GEN_ROOT / Path(*d.parts[:i]) for d in GENERATED_DIRS for i in range(1, len(d.parts) + 1))}
)
# the top-level Python packages protoc derives from our proto paths, moved below sessionq._pb
_OUR_PACKAGES = "|".join(re.escape(".".join(d.parts)) for d in GENERATED_DIRS)
_MODULE_REWRITE = re.compile(r"(?<![.\w])(" + _OUR_PACKAGES + r")\.(\w+_pb2)\b")
INIT_TEXT = '"""Generated code; run scripts/gen_proto.py"""\n'
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")

# protoc writes imports of a2a.proto as a top-level module `a2a_pb2`; the SDK has it at a2a.types.
_A2A_REWRITES = [
    (re.compile(r"^(\s*)import a2a_pb2 as (\w+)\s*$", re.M), r"\1from a2a.types import a2a_pb2 as \2"),
    (re.compile(r"^(\s*)import a2a_pb2\s*$", re.M), r"\1from a2a.types import a2a_pb2"),
    (re.compile(r"^(\s*)from a2a_pb2 import ", re.M), r"\1from a2a.types.a2a_pb2 import "),
]
_BARE_A2A_IMPORT = re.compile(r"^\s*(import a2a_pb2\b|from a2a_pb2\b)", re.M)


def _proto_files() -> list[str]:
    """Our .proto files, as protoc import paths, in a stable order."""
    files = sorted(f for d in PROTO_DIRS for f in (PROTO_ROOT / d).glob("*.proto"))
    if not files:
        raise SystemExit(f"no .proto files under {PROTO_ROOT}")
    return [f.relative_to(PROTO_ROOT).as_posix() for f in files]


def validate_descriptor() -> bytes:
    """buf/validate/validate.proto as the protovalidate package ships it (a serialized
    FileDescriptorProto): the rules its engine enforces are the ones this file declares."""
    from protovalidate._gen.buf.validate import validate_pb

    data: bytes = validate_pb._DESC.proto.to_binary()
    return data


def _write_descriptor_set(path: Path) -> None:
    """Dump a2a.proto (as registered by a2a-sdk) and buf/validate/validate.proto (as protovalidate
    ships it) with their transitive deps, dependencies first."""
    from a2a.types import a2a_pb2
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.descriptor import FileDescriptor

    fds = descriptor_pb2.FileDescriptorSet()
    seen: set[str] = set()

    def add(fd: FileDescriptor) -> None:
        if fd.name in seen:
            return
        seen.add(fd.name)
        for dep in fd.dependencies:
            add(dep)
        proto = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(proto)
        fds.file.append(proto)

    add(a2a_pb2.DESCRIPTOR)
    validate = descriptor_pb2.FileDescriptorProto.FromString(validate_descriptor())
    for dep in validate.dependency:  # the well-known types, as google.protobuf registers them
        importlib.import_module("google.protobuf." + Path(dep).stem + "_pb2")
        add(descriptor_pool.Default().FindFileByName(dep))
    fds.file.append(validate)
    path.write_bytes(fds.SerializeToString(deterministic=True))


def _a2a_proto_name() -> str:
    from a2a.types import a2a_pb2

    return str(a2a_pb2.DESCRIPTOR.name)


def _run_protoc(out_dir: Path, descriptor_set: Path, *, image: Path | None = None) -> None:
    import grpc_tools
    from grpc_tools import protoc

    well_known = Path(grpc_tools.__file__).resolve().parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--descriptor_set_in={descriptor_set}",
        *(
            [f"--descriptor_set_out={image}", "--include_imports", "--include_source_info"]
            if image is not None
            else [f"--python_out={out_dir}", f"--pyi_out={out_dir}", f"--grpc_python_out={out_dir}", VALIDATE_PROTO]
        ),
        *_proto_files(),
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise SystemExit(f"protoc failed with exit code {rc}")


def _postprocess(pkg_dir: Path) -> None:
    """Rewrite a2a imports and our module paths (below sessionq._pb); verify the sibling imports
    are absolute."""
    for f in sorted(pkg_dir.iterdir()):
        if not f.name.endswith(GENERATED_SUFFIXES):
            continue
        text = f.read_text()
        for pattern, repl in _A2A_REWRITES:
            text = pattern.sub(repl, text)
        # `from kagent.api.v1alpha1 import x_pb2`, and the module name given to the builder
        text = re.sub(
            r"^(\s*)from (" + _OUR_PACKAGES + r") import ",
            lambda m: f"{m.group(1)}from sessionq._pb.{m.group(2)} import ",
            text,
            flags=re.M,
        )
        text = _MODULE_REWRITE.sub(lambda m: f"sessionq._pb.{m.group(1)}.{m.group(2)}", text)
        if _BARE_A2A_IMPORT.search(text):
            raise SystemExit(f"{f.name}: unrewritten a2a_pb2 import left")
        # Sibling modules must be imported by their full package path (never `import x_pb2`).
        for m in re.finditer(r"^\s*(?:from (\S+) )?import (\w+_pb2)\b", text, re.M):
            module, name = m.group(1), m.group(2)
            if module is None:
                raise SystemExit(f"{f.name}: relative/top-level import of {name}")
        f.write_text(text)


def _generate(out_root: Path) -> None:
    """Generate everything below out_root (mirroring src/)."""
    a2a_name = _a2a_proto_name()
    if a2a_name != "a2a.proto":
        raise SystemExit(f"a2a-sdk registers {a2a_name!r}, but task_store.proto imports 'a2a.proto'")
    with tempfile.TemporaryDirectory(prefix="sessionq-proto-") as tmp:
        descriptor_set = Path(tmp) / "deps.fds"
        raw = Path(tmp) / "raw"
        raw.mkdir()
        _write_descriptor_set(descriptor_set)
        _run_protoc(raw, descriptor_set)
        for d in GENERATED_DIRS:
            shutil.copytree(raw / d, out_root / GEN_ROOT / d, dirs_exist_ok=True)
    for rel in INIT_DIRS:
        (out_root / rel).mkdir(parents=True, exist_ok=True)
        (out_root / rel / "__init__.py").write_text(INIT_TEXT)
    for pkg_dir in PKG_DIRS:
        _postprocess(out_root / pkg_dir)


def write_image(path: Path) -> None:
    """Our protos and everything they import, with source info, as a FileDescriptorSet: what
    `buf lint` reads (tests/test_buf_lint.py), since buf's validate.proto has no source here."""
    with tempfile.TemporaryDirectory(prefix="sessionq-proto-") as tmp:
        descriptor_set = Path(tmp) / "deps.fds"
        _write_descriptor_set(descriptor_set)
        _run_protoc(Path(tmp), descriptor_set, image=path)


def _managed_files(root: Path) -> dict[str, Path]:
    """Files this script owns below root (relative path -> path)."""
    found: dict[str, Path] = {}
    for rel in INIT_DIRS:
        init = root / rel / "__init__.py"
        if init.exists():
            found[(rel / "__init__.py").as_posix()] = init
    for rel in PKG_DIRS:
        pkg_dir = root / rel
        if pkg_dir.is_dir():
            for f in sorted(pkg_dir.iterdir()):
                if f.is_file() and f.name.endswith(GENERATED_SUFFIXES):
                    found[(rel / f.name).as_posix()] = f
    # packages generated before the move to upstream's file names: their modules are stale
    legacy = root / GEN_ROOT
    if legacy.is_dir():
        for f in sorted(legacy.rglob("*")):
            rel = f.relative_to(root)
            if f.is_file() and f.name.endswith(GENERATED_SUFFIXES) and rel.parent not in PKG_DIRS:
                found[rel.as_posix()] = f
    return found


def _diff(expected_root: Path, actual_root: Path) -> list[str]:
    expected = _managed_files(expected_root)
    actual = _managed_files(actual_root)
    problems: list[str] = []
    for rel in sorted(expected.keys() | actual.keys()):
        if rel not in actual:
            problems.append(f"missing: src/{rel}")
        elif rel not in expected:
            problems.append(f"stale (no longer generated): src/{rel}")
        else:
            want, have = expected[rel].read_text(), actual[rel].read_text()
            if want != have:
                diff = difflib.unified_diff(
                    have.splitlines(keepends=True),
                    want.splitlines(keepends=True),
                    f"src/{rel} (committed)",
                    f"src/{rel} (regenerated)",
                    n=1,
                )
                problems.append(f"differs: src/{rel}\n" + "".join(list(diff)[:40]))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="regenerate into a temp dir and exit 1 if the committed files differ",
    )
    parser.add_argument("--image", type=Path, help="write a FileDescriptorSet (source info, imports) for buf and exit")
    args = parser.parse_args(argv)
    if args.image:
        write_image(args.image)
        return 0

    with tempfile.TemporaryDirectory(prefix="sessionq-gen-") as tmp:
        out_root = Path(tmp)
        _generate(out_root)
        if args.check:
            problems = _diff(out_root, SRC_ROOT)
            if problems:
                print("generated protobuf code is out of date; run scripts/gen_proto.py", file=sys.stderr)
                for p in problems:
                    print(p, file=sys.stderr)
                return 1
            print("generated protobuf code is up to date")
            return 0
        # Sync: drop stale generated files, then copy the fresh ones over.
        fresh = _managed_files(out_root)
        for rel, path in _managed_files(SRC_ROOT).items():
            if rel not in fresh:
                path.unlink()
                print(f"removed stale src/{rel}")
        for rel, path in fresh.items():
            dest = SRC_ROOT / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not dest.exists() or dest.read_bytes() != path.read_bytes():
                shutil.copyfile(path, dest)
                print(f"wrote src/{rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
