"""Fixtures of the conformance checks."""

import pytest

from conformance.engines import EnginePool


@pytest.fixture(scope="module")
def pool():
    """The engines of one test module (conformance/engines.py), shut down when it ends."""
    engines = EnginePool()
    yield engines
    engines.close()
