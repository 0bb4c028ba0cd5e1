"""Small helpers of the conformance suite."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import pytest

from sessionq.runtime.base import Actor, Code, Substrate, SubstrateError

NS = "conf"  # the atespace the suite works in
OTHER_NS = "conf-other"
OTHER_UID = "00000000-0000-4000-8000-000000000000"  # a well-formed UID no Actor has


async def refused(code: Code, call: Awaitable[Any]) -> SubstrateError:
    """Await `call` and check that it fails with `code`; returns the error."""
    with pytest.raises(SubstrateError) as e:
        await call
    assert e.value.code == code, f"expected {code.value}, got {e.value.code.value}: {e.value.message}"
    assert e.value.message, "an error says why"
    return e.value


async def running(rt: Substrate, actor: Actor) -> Actor:
    """Resume `actor` and check it RUNNING."""
    resumed, changed = await rt.resume_actor(actor.atespace, actor.name, actor.uid)
    assert changed
    return resumed
