"""Fixtures of the conformance checks."""

import pytest


@pytest.fixture(scope="module")
def pool():
    """The engines of one test module (conformance/engines.py), shut down when it ends."""
    from conformance.engines import EnginePool  # imports vLLM: not for sessions that boot no engine

    engines = EnginePool()
    yield engines
    engines.close()
