from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

# CI runs on a noisy 2-core machine: no per-example deadline, a fixed budget.
settings.register_profile(
    "ci", deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None, max_examples=100)
# The wheel's session runs the same properties against the compiled build, which the
# pure run has walked with "ci" already: half the examples find where they part.
settings.register_profile(
    "wheel", deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run every ``@pytest.mark.anyio`` test under asyncio and under trio."""
    backend: str = request.param
    return backend


def pytest_configure(config: pytest.Config) -> None:
    """``nox -s wheel`` sets STOMPY_COMPILED=1: then the core must be the compiled one,
    or the session would test pure Python and say nothing about mypyc's build."""
    if os.environ.get("STOMPY_COMPILED") == "1":
        import stompy._core.parser
        import stompy._core.protocol

        for module in (stompy._core.parser, stompy._core.protocol):
            if str(module.__file__).endswith(".py"):
                raise pytest.UsageError(f"STOMPY_COMPILED=1 but {module.__file__} is pure Python")
