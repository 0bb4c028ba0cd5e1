"""The `ateapi` protos (proto/ateapi/ateapi.proto): the Substrate control API a real Substrate
serves, pinned to the wire facts (package, service and method paths, message and field numbers,
enum numbers). A client built from them must talk to kagent-dev/substrate at 447b0ad unchanged."""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor as FD

from sessionq._pb.ateapi import ateapi_pb2 as pb
from sessionq._pb.ateapi import ateapi_pb2_grpc as pb_grpc

STR, BOOL, I32, I64, BYTES = FD.TYPE_STRING, FD.TYPE_BOOL, FD.TYPE_INT32, FD.TYPE_INT64, FD.TYPE_BYTES
MSG, ENUM = FD.TYPE_MESSAGE, FD.TYPE_ENUM
TS = "google.protobuf.Timestamp"

CONTROL_RPCS = [
    "GetActor", "CreateActor", "UpdateActor", "SuspendActor", "PauseActor", "ResumeActor", "RevertActor",
    "DeleteActor", "GetActorEgressPolicy", "CreateActorEgressPolicy", "UpdateActorEgressPolicy",
    "DeleteActorEgressPolicy", "MintActorJWT", "MintActorCertificate", "CreateTag", "GetTag", "ListTags",
    "UpdateTag", "DeleteTag", "ListWorkers", "GetWorker", "CreateWorker", "UpdateWorker", "DeleteWorker",
    "DrainWorker", "ListWorkerActorAssignments", "ListActors", "CreateAtespace", "GetAtespace", "ListAtespaces",
    "DeleteAtespace", "CreateActorTemplate", "GetActorTemplate", "ListActorTemplates", "DeleteActorTemplate",
    "GetGlobalAccessPolicy", "CreateGlobalAccessPolicy", "UpdateGlobalAccessPolicy", "GetAtespaceAccessPolicy",
    "CreateAtespaceAccessPolicy", "UpdateAtespaceAccessPolicy", "DeleteAtespaceAccessPolicy",
]


def fields(name: str) -> dict[int, tuple[Any, ...]]:
    out: dict[int, tuple[Any, ...]] = {}
    for f in pb.DESCRIPTOR.message_types_by_name[name].fields:
        ref = f.message_type.full_name if f.type == MSG else f.enum_type.full_name if f.type == ENUM else None
        out[f.number] = (f.name, f.type, ref, bool(f.is_repeated))
    return out


def test_file_shape() -> None:
    fd = pb.DESCRIPTOR
    assert fd.package == "ateapi"
    assert [d.name for d in fd.dependencies] == ["google/protobuf/timestamp.proto"]
    assert len(fd.message_types_by_name) == 118
    enums = len(fd.enum_types_by_name) + sum(len(m.enum_types) for m in fd.message_types_by_name.values())
    assert enums == 10
    assert sum(len(m.fields) for m in fd.message_types_by_name.values()) == 267
    control = fd.services_by_name["Control"]
    assert [m.name for m in control.methods] == CONTROL_RPCS
    assert [m.name for m in fd.services_by_name["WorkerService"].methods] == [
        "RegisterWorker", "MintAteomActorCertificate", "RequestActorSuspend"]
    for m in control.methods:
        assert not m.client_streaming and not m.server_streaming
    assert control.methods_by_name["DeleteActor"].output_type.full_name == "ateapi.Actor"
    assert control.methods_by_name["ResumeActor"].output_type.full_name == "ateapi.ResumeActorResponse"
    assert hasattr(pb_grpc, "ControlStub") and hasattr(pb_grpc, "add_ControlServicer_to_server")


def test_actor_messages() -> None:
    assert fields("Actor") == {
        1: ("metadata", MSG, "ateapi.ResourceMetadata", False),
        4: ("actor_template", MSG, "ateapi.ObjectRef", False),
        5: ("worker_selector", MSG, "ateapi.Selector", False),
        6: ("source_tag", MSG, "ateapi.ObjectRef", False),
        7: ("status", MSG, "ateapi.ActorStatus", False),
    }
    # the current numbering, not the older vendored one (state=1, worker_assignment=2, ... crash=9)
    assert fields("ActorStatus") == {
        1: ("state", ENUM, "ateapi.ActorState", False),
        2: ("worker_assignment", MSG, "ateapi.WorkerAssignment", False),
        7: ("external_volumes", MSG, "ateapi.ExternalVolume", True),
        9: ("crash", MSG, "ateapi.ActorCrash", False),
        10: ("assigned_node", STR, None, False),
        11: ("snapshots", MSG, "ateapi.Snapshot", True),
        12: ("last_assigned_generation", I32, None, False),
    }
    assert fields("ResourceMetadata") == {
        1: ("atespace", STR, None, False), 2: ("name", STR, None, False), 3: ("uid", STR, None, False),
        4: ("version", I64, None, False), 5: ("create_time", MSG, TS, False), 6: ("update_time", MSG, TS, False),
    }
    assert fields("DeleteActorRequest") == {
        1: ("actor", MSG, "ateapi.ObjectRef", False), 2: ("any_state", BOOL, None, False),
        3: ("options", MSG, "ateapi.DeleteOptions", False),
    }
    assert fields("DeleteOptions") == {1: ("version", I64, None, False), 2: ("uid", STR, None, False)}
    assert fields("ResumeActorResponse") == {
        1: ("actor", MSG, "ateapi.Actor", False), 2: ("resumed", BOOL, None, False)}
    assert fields("WorkerAssignment")[5] == ("worker_pod_ips", STR, None, True)
    assert fields("WorkerAssignment")[6] == ("worker", MSG, "ateapi.ObjectRef", False)
    assert fields("ListActorsRequest") == {
        1: ("atespace", STR, None, False), 2: ("page_size", I32, None, False), 3: ("page_token", STR, None, False)}
    assert fields("ListWorkersRequest") == {1: ("page_size", I32, None, False), 2: ("page_token", STR, None, False)}


def test_snapshot_and_tag_messages() -> None:
    assert fields("Snapshot") == {
        1: ("generation", I32, None, False), 2: ("owner", ENUM, "ateapi.SnapshotOwner", False),
        3: ("actor_template_uid", STR, None, False), 4: ("storage", MSG, "ateapi.SnapshotStorage", True),
    }
    assert fields("SnapshotStorage") == {
        1: ("durability", ENUM, "ateapi.SnapshotDurability", False),
        2: ("status", ENUM, "ateapi.SnapshotStorageStatus", False),
        3: ("fidelity", ENUM, "ateapi.SnapshotFidelity", False),
        4: ("local", MSG, "ateapi.LocalSnapshot", False), 5: ("object", MSG, "ateapi.ObjectSnapshot", False),
    }
    assert fields("Tag") == {
        1: ("metadata", MSG, "ateapi.ResourceMetadata", False), 2: ("status", MSG, "ateapi.TagStatus", False),
        3: ("scope", ENUM, "ateapi.TagScope", False), 4: ("source_actor", MSG, "ateapi.ObjectRef", False),
    }
    assert fields("TagStatus") == {
        1: ("snapshot", MSG, "ateapi.Snapshot", False), 2: ("actor_template_uid", STR, None, False)}


def test_egress_and_credentials_messages() -> None:
    assert fields("EgressRule") == {
        1: ("http", MSG, "ateapi.HTTPRule", False), 2: ("https", MSG, "ateapi.HTTPSRule", False),
        3: ("tls_passthrough", MSG, "ateapi.TLSPassthroughRule", False),
    }
    assert fields("Ports") == {1: ("all", MSG, "ateapi.AllPorts", False), 2: ("numbers", I32, None, True)}
    assert fields("CredentialHeader") == {
        1: ("header", STR, None, False), 2: ("prefix", STR, None, False), 3: ("credential_uri", STR, None, False),
        4: ("actor_jwt", MSG, "ateapi.ActorJWTSource", False),
    }
    # numbers skipped on purpose (declaration order differs from number order)
    assert fields("MintActorJWTRequest") == {
        1: ("audiences", STR, None, True), 5: ("actor", MSG, "ateapi.ObjectRef", False),
        8: ("expiration_seconds", I64, None, False)}
    assert fields("MintActorCertificateRequest") == {
        2: ("certificate_signing_request", BYTES, None, False), 6: ("actor", MSG, "ateapi.ObjectRef", False),
        7: ("actor_uid", STR, None, False)}
    redacted = pb.DESCRIPTOR.message_types_by_name["EnvVar"].fields_by_name["value"].GetOptions()
    assert redacted.debug_redact
    tb = pb.DESCRIPTOR.message_types_by_name["TrustBundleDataSource"]
    assert fields("TrustBundleDataSource") == {2: ("path", STR, None, False), 3: ("names", STR, None, True)}
    from google.protobuf import descriptor_pb2

    proto = descriptor_pb2.DescriptorProto()
    tb.CopyToProto(proto)
    assert [(r.start, r.end) for r in proto.reserved_range] == [(1, 2)] and list(proto.reserved_name) == ["name"]


def test_enums() -> None:
    def values(e: Any) -> dict[str, int]:
        return {v.name: v.number for v in e.values}

    enums = pb.DESCRIPTOR.enum_types_by_name
    assert values(enums["ActorState"]) == {
        "ACTOR_STATE_UNSPECIFIED": 0, "ACTOR_STATE_RESUMING": 1, "ACTOR_STATE_RUNNING": 2,
        "ACTOR_STATE_SUSPENDING": 3, "ACTOR_STATE_SUSPENDED": 4, "ACTOR_STATE_PAUSING": 5, "ACTOR_STATE_PAUSED": 6,
        "ACTOR_STATE_CRASHED": 7, "ACTOR_STATE_DELETING": 8, "ACTOR_STATE_REVERTING": 9,
    }
    assert values(enums["SnapshotFidelity"]) == {
        "SNAPSHOT_FIDELITY_UNSPECIFIED": 0, "SNAPSHOT_FIDELITY_VOLUMES": 1, "SNAPSHOT_FIDELITY_ROOTFS": 2,
        "SNAPSHOT_FIDELITY_MEMORY": 3}
    assert values(enums["SnapshotStorageStatus"]) == {
        "SNAPSHOT_STORAGE_STATUS_UNSPECIFIED": 0, "SNAPSHOT_STORAGE_STATUS_IN_PROGRESS": 1,
        "SNAPSHOT_STORAGE_STATUS_COMPLETED": 2}
    assert values(enums["SnapshotDurability"]) == {
        "SNAPSHOT_DURABILITY_UNSPECIFIED": 0, "SNAPSHOT_DURABILITY_LOCAL": 1, "SNAPSHOT_DURABILITY_DURABLE": 2}
    assert values(enums["TagScope"]) == {"TAG_SCOPE_UNSPECIFIED": 0, "TAG_SCOPE_ATESPACE": 1, "TAG_SCOPE_PUBLISHED": 2}
    assert values(enums["SandboxClass"]) == {
        "SANDBOX_CLASS_UNSPECIFIED": 0, "SANDBOX_CLASS_GVISOR": 1, "SANDBOX_CLASS_MICROVM": 2}
    assert values(enums["WorkerState"]) == {
        "WORKER_STATE_UNSPECIFIED": 0, "WORKER_STATE_ACTIVE": 1, "WORKER_STATE_DRAINING": 2}
    assert values(pb.ExternalVolume.DESCRIPTOR.enum_types_by_name["Status"]) == {
        "STATUS_UNSPECIFIED": 0, "STATUS_PENDING": 1, "STATUS_CREATED": 2, "STATUS_DELETING": 3}
    # the internal enums of runtime/base.py use the wire names
    from sessionq.runtime.base import ActorState, SnapshotFidelity, SnapshotStatus

    assert {s.value for s in ActorState} == set(values(enums["ActorState"]))
    assert {s.value for s in SnapshotFidelity} == set(values(enums["SnapshotFidelity"]))
    assert {s.value for s in SnapshotStatus} == set(values(enums["SnapshotStorageStatus"]))


def test_round_trip_bytes() -> None:
    """Field numbers on the wire: an Actor encoded by hand decodes as expected."""
    # field 1 (metadata) { field 2 (name) = "a" }, field 7 (status) { field 1 (state) = 2 }
    raw = bytes([0x0A, 0x03, 0x12, 0x01, ord("a"), 0x3A, 0x02, 0x08, 0x02])
    actor = pb.Actor.FromString(raw)
    assert actor.metadata.name == "a" and actor.status.state == pb.ACTOR_STATE_RUNNING
