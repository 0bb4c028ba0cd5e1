"""Conformance: actor templates, the egress policy `default`, and the name rule every runtime applies."""

from __future__ import annotations

import uuid

import pytest

from sessionq.runtime.base import Code, EgressRule, InvokeRequest

from .conftest import Subject
from .helpers import NS, OTHER_UID, refused, running

RULES = [
    EgressRule("https", "api.example.com", 443, {"Authorization": "ate-secret://k8s/keys/api"}),
    EgressRule("http", "example.org", 8080),
    EgressRule("tls_passthrough", "db.example.net", 5432),
]


async def test_templates(subject: Subject) -> None:
    rt = subject.runtime
    made = await rt.create_actor_template(NS, "t", "registry.local/agent:1", **subject.template_options)
    assert (made.atespace, made.name, made.image) == (NS, "t", "registry.local/agent:1")
    assert uuid.UUID(made.uid) and made.version >= 1
    got = await rt.get_actor_template(NS, "t")
    assert (got.uid, got.image, got.version) == (made.uid, made.image, made.version)
    await refused(Code.ALREADY_EXISTS, rt.create_actor_template(NS, "t", "registry.local/other:2"))
    assert (await rt.get_actor_template(NS, "t")).image == "registry.local/agent:1"
    await refused(Code.NOT_FOUND, rt.get_actor_template(NS, "ghost"))
    await refused(Code.NOT_FOUND, rt.delete_actor_template(NS, "ghost", made.uid))
    await refused(Code.FAILED_PRECONDITION, rt.delete_actor_template(NS, "t", OTHER_UID))
    await rt.delete_actor_template(NS, "t", made.uid)
    await refused(Code.NOT_FOUND, rt.get_actor_template(NS, "t"))
    await refused(Code.NOT_FOUND, rt.create_actor(NS, "a", f"{NS}/t"))
    again = await rt.create_actor_template(NS, "t", "registry.local/agent:1", **subject.template_options)
    assert again.uid != made.uid


async def test_a_template_keeps_what_its_container_runs(subject: Subject) -> None:
    if not subject.keeps_command:
        pytest.skip(f"{subject.kind}: runs no command (its agent runs in process)")
    rt = subject.runtime
    options = {**subject.template_options, "env": {"GREETING": "hello"}}
    made = await rt.create_actor_template(NS, "t", "registry.local/agent:1", **options)
    got = await rt.get_actor_template(NS, "t")
    for t in (made, got):
        assert list(t.command) == options["command"] and list(t.args) == options["args"]
        assert t.env == {"GREETING": "hello"}


async def test_the_egress_policy_default(subject: Subject) -> None:
    rt = subject.runtime
    made = await rt.create_actor(NS, "a", await subject.template(NS, "t"))
    await refused(Code.NOT_FOUND, rt.get_egress_policy(NS, "a"))
    await refused(Code.NOT_FOUND, rt.update_egress_policy(NS, "a", made.uid, RULES))
    policy = await rt.create_egress_policy(NS, "a", made.uid, RULES)
    assert policy.actor_uid == made.uid and set(policy.rules) == set(RULES) and policy.version >= 1
    got = await rt.get_egress_policy(NS, "a")
    assert got.actor_uid == made.uid and set(got.rules) == set(RULES) and got.version == policy.version
    https = next(r for r in got.rules if r.protocol == "https")
    assert https.credential_headers == {"Authorization": "ate-secret://k8s/keys/api"}
    await refused(Code.ALREADY_EXISTS, rt.create_egress_policy(NS, "a", made.uid, RULES[:1]))
    assert set((await rt.get_egress_policy(NS, "a")).rules) == set(RULES)
    updated = await rt.update_egress_policy(NS, "a", made.uid, RULES[1:2])
    assert list(updated.rules) == RULES[1:2] and updated.version > policy.version
    emptied = await rt.update_egress_policy(NS, "a", made.uid, [])
    assert list(emptied.rules) == [] and emptied.version > updated.version
    got = await rt.get_egress_policy(NS, "a")
    assert list(got.rules) == [] and got.version == emptied.version
    # the policy belongs to the Actor in every state
    await running(rt, made)
    assert (await rt.get_egress_policy(NS, "a")).version == emptied.version
    await refused(Code.INVALID_ARGUMENT, rt.update_egress_policy(
        NS, "a", made.uid, [EgressRule("ftp", "example.org", 21)]))
    assert (await rt.get_egress_policy(NS, "a")).version == emptied.version


# The name rule (docs/runtime.md, "Names"): 1 to 63 characters, no "/", no NUL or other control
# character, and neither "." nor "..". A runtime that is stricter (a real Substrate asks for DNS
# labels) refuses these too.
BAD_NAMES = ["", ".", "..", "a/b", "a\x00b", "a\nb", "a\x7fb", "a" * 64, "a" * 5000]
LONGEST = "a" * 63


async def test_an_invalid_name_is_invalid_argument_and_makes_nothing(subject: Subject) -> None:
    rt = subject.runtime
    template = await subject.template(NS, "t")
    made = await rt.create_actor(NS, "a", template)
    await running(rt, made)
    await rt.suspend_actor(NS, "a", made.uid)
    for bad in BAD_NAMES:
        for what, call in (
            ("actor name", rt.create_actor(NS, bad, template)),
            ("atespace", rt.create_actor(bad, "b", template)),
            ("template name", rt.create_actor_template(NS, bad, "registry.local/agent:1", **subject.template_options)),
            ("template atespace",
             rt.create_actor_template(bad, "t2", "registry.local/agent:1", **subject.template_options)),
            ("tag name", rt.create_tag(NS, bad, "a", made.uid)),
        ):
            error = await refused(Code.INVALID_ARGUMENT, call)
            assert len(error.message) < 300, f"{what} {bad[:10]!r}: the message does not echo a huge name"
    assert [(a.atespace, a.name) for a in (await rt.list_actors(None, 100, "")).items] == [(NS, "a")]
    await refused(Code.NOT_FOUND, rt.get_actor_template(NS, "t2"))


async def test_the_longest_name_is_accepted(subject: Subject) -> None:
    rt = subject.runtime
    template = await subject.template(LONGEST, LONGEST)
    made = await rt.create_actor(LONGEST, LONGEST, template)
    assert (made.atespace, made.name) == (LONGEST, LONGEST)
    await running(rt, made)
    await rt.suspend_actor(LONGEST, LONGEST, made.uid)
    tag = await rt.create_tag(LONGEST, LONGEST, LONGEST, made.uid)
    assert tag.name == LONGEST
    assert (await rt.get_actor(LONGEST, LONGEST)).uid == made.uid


async def test_a_lookup_of_an_invalid_name_is_invalid_argument(subject: Subject) -> None:
    """Every method that names an Actor, a template or a tag refuses a name the rule refuses with
    INVALID_ARGUMENT and a short message, as a real Substrate refuses a name that is no DNS label
    (never INTERNAL: PostgreSQL text cannot hold a NUL), and touches nothing."""
    rt = subject.runtime
    template = await subject.template(NS, "t")
    made = await rt.create_actor(NS, "a", template)
    await rt.create_egress_policy(NS, "a", made.uid, [])
    await running(rt, made)
    await rt.suspend_actor(NS, "a", made.uid)
    before = await rt.get_actor(NS, "a")
    request = InvokeRequest("session", "dispatch", {"parts": [{"text": "hello"}]})
    for bad in BAD_NAMES:
        for atespace, name in ((NS, bad), (bad, "a")):
            for what, call in (
                ("get_actor", rt.get_actor(atespace, name)),
                ("resume_actor", rt.resume_actor(atespace, name, made.uid)),
                ("suspend_actor", rt.suspend_actor(atespace, name, made.uid)),
                ("pause_actor", rt.pause_actor(atespace, name, made.uid)),
                ("delete_actor", rt.delete_actor(atespace, name, made.uid, any_state=True)),
                ("get_actor_template", rt.get_actor_template(atespace, name)),
                ("delete_actor_template", rt.delete_actor_template(atespace, name, made.uid)),
                ("create_actor from a template", rt.create_actor(NS, "b", f"{atespace}/{name}")),
                ("create_egress_policy", rt.create_egress_policy(atespace, name, made.uid, [])),
                ("get_egress_policy", rt.get_egress_policy(atespace, name)),
                ("update_egress_policy", rt.update_egress_policy(atespace, name, made.uid, [])),
                ("create_tag of an actor", rt.create_tag(atespace, "tag", name, made.uid)),
                ("get_tag", rt.get_tag(atespace, name)),
                ("delete_tag", rt.delete_tag(atespace, name)),
                ("invoke", rt.invoke(atespace, name, made.uid, request)),
                ("cancel_turn", rt.cancel_turn(atespace, name, made.uid, "session", "task")),
                # (an empty tag name is no tag on the wire: the create would go ahead)
                *([("create_actor from a tag", rt.create_actor(atespace, "b", template, from_tag=name))] if name else []),
            ):
                error = await refused(Code.INVALID_ARGUMENT, call)
                assert len(error.message) < 300, f"{what} {bad[:10]!r}: the message does not echo a huge name"
        if bad:  # an empty atespace lists every atespace
            await refused(Code.INVALID_ARGUMENT, rt.list_actors(bad, 10, ""))
    after = await rt.get_actor(NS, "a")
    assert (after.uid, after.state, after.version) == (made.uid, before.state, before.version)
    assert [(a.atespace, a.name) for a in (await rt.list_actors(None, 100, "")).items] == [(NS, "a")]
