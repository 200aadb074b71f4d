"""Developer tasks. ``nox`` with no argument runs everything CI runs."""

from __future__ import annotations

import nox

nox.needs_version = ">=2024.4.15"
nox.options.default_venv_backend = "venv"
nox.options.sessions = ["lint", "typecheck", "tests"]

PYPROJECT = nox.project.load_toml("pyproject.toml")


def group(name: str) -> list[str]:
    return list(nox.project.dependency_groups(PYPROJECT, name))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.install(*group("lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package and the tests."""
    session.install("-e", ".", *group("typecheck"))
    session.run("mypy", "--strict", "stompy", "tests")


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite with coverage; fails under 90% line coverage of stompy/."""
    session.install("-e", ".", *group("test"))
    session.run(
        "pytest",
        "--cov=stompy",
        "--cov-report=term",
        "--cov-fail-under=90",
        *session.posargs,
        env={"HYPOTHESIS_PROFILE": "ci"},
    )


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks against the peers (stomp.py, stompman); prints ratios."""
    session.install("-e", ".", *group("bench"))
    session.run("python", "-m", "benchmarks", *session.posargs)
