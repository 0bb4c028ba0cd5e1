import asyncio
from hypothesis import given, settings, HealthCheck, strategies as st
import pytest

@pytest.fixture
async def thing():
    return {"loop": asyncio.get_running_loop(), "n": 0}

@settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(x=st.integers())
async def test_probe(thing, x):
    assert asyncio.get_running_loop() is thing["loop"]
    thing["n"] += 1
    await asyncio.sleep(0)
