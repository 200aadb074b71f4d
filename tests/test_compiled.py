"""``stompy.COMPILED`` tells which core runs; the build's list and the check's agree.

Run by ``nox -s tests`` on the editable install (pure Python) and by ``nox -s wheel``
on the installed wheel (compiled, STOMPY_COMPILED=1).
"""

from __future__ import annotations

import importlib
import os
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader
from pathlib import Path
from typing import Any

import pytest

import stompy
import stompy._core.parser
from stompy import _compiled
from stompy._core.frames import Frame
from stompy._engine.calls import Running, Sends, Steps
from stompy._engine.message import MessageBase
from stompy._engine.outgoing import Outgoing

#: Where stompy was imported from, and the checkout it sits in if it is one.
PACKAGE = Path(stompy.__file__).parent
CHECKOUT = PACKAGE.parent if (PACKAGE.parent / "hatch_build.py").is_file() else None


def test_compiled_says_whether_the_parser_is_an_extension_module() -> None:
    loader = stompy._core.parser.__spec__.loader
    assert stompy.COMPILED is isinstance(loader, ExtensionFileLoader)
    assert isinstance(stompy.COMPILED, bool)


def test_the_core_is_compiled_whole_or_not_at_all() -> None:
    flavours = {_compiled.is_compiled(module) for module in _compiled.CORE_MODULES}
    assert flavours == {stompy.COMPILED}


def test_the_engines_round_trip_modules_are_compiled_with_the_core() -> None:
    """The calls that wait, the pump, delivery, inboxes, receipts and requests: what
    every round trip runs through (stompy.COMPILED says they are compiled too)."""
    assert [module.__name__ for module in _compiled.ENGINE_MODULES] == list(_compiled.ENGINE)
    flavours = {_compiled.is_compiled(module) for module in _compiled.ENGINE_MODULES}
    assert flavours == {stompy.COMPILED}


def test_the_blocking_transport_is_compiled_with_the_core() -> None:
    """The I/O thread, the caller's write-through and read-through, the watch: every
    blocking round trip runs through them."""
    assert [module.__name__ for module in _compiled.TRANSPORT_MODULES] == list(_compiled.TRANSPORT)
    flavours = {_compiled.is_compiled(module) for module in _compiled.TRANSPORT_MODULES}
    assert flavours == {stompy.COMPILED}


def test_a_call_takes_subclasses_that_are_not_compiled() -> None:
    """A call's sends are written once for the plain call and its traced twin, a
    subclass in a module that is not compiled (mypyc refuses to make one unless the
    compiled class allows it); what the class checks, it checks compiled or not."""
    sent: list[tuple[str, bool]] = []

    class Recording(Sends[MessageBase]):
        def send_one(
            self,
            message: Outgoing,
            transaction: str | None,
            receipt: bool,
            parent: Frame | None = None,
        ) -> Steps[None]:
            sent.append((message.destination, receipt))
            yield from ()

    Running(Recording().send("/queue/a", b"x", None, None, None, True)).resume()
    assert sent == [("/queue/a", True)]
    loose: Any = Recording()
    with pytest.raises(TypeError, match="receipt: expected True or False, got 1"):
        Running(loose.send("/queue/a", b"x", None, None, None, 1)).resume()
    assert sent == [("/queue/a", True)]


def test_the_test_broker_core_is_compiled_with_the_core() -> None:
    modules = [importlib.import_module(name) for name in _compiled.TESTING_MODULES]
    assert {_compiled.is_compiled(module) for module in modules} == {stompy.COMPILED}


def test_the_session_that_asks_for_the_compiled_core_gets_it() -> None:
    if os.environ.get("STOMPY_COMPILED") != "1":
        pytest.skip("only nox -s wheel asks for the compiled core (STOMPY_COMPILED=1)")
    assert stompy.COMPILED


def test_the_build_compiles_the_folders_and_modules_compiled_checks() -> None:
    tomllib = pytest.importorskip("tomllib")
    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    if not pyproject.is_file():
        pytest.skip(f"no {pyproject}")
    hook = tomllib.loads(pyproject.read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    folders = [package.replace(".", "/") for package in _compiled.FOLDERS]
    files = [name.replace(".", "/") + ".py" for name in _compiled.ENGINE + _compiled.TRANSPORT]
    assert hook["hooks"]["custom"]["compile"] == folders + files


def test_every_module_of_the_compiled_folders_is_checked() -> None:
    """A module added to stompy/_core/ (or the test broker's core) is compiled by the
    build and checked by stompy.COMPILED, with no list to keep."""
    for package, names in [
        ("_core", [module.__name__ for module in _compiled.CORE_MODULES]),
        ("testing/_core", list(_compiled.TESTING_MODULES)),
    ]:
        files = sorted(p.stem for p in (PACKAGE / package).glob("*.py") if p.stem != "__init__")
        assert files
        prefix = f"stompy.{package.replace('/', '.')}."
        assert names == [prefix + stem for stem in files]


@pytest.mark.skipif(CHECKOUT is None, reason="stompy is installed, not a checkout")
def test_a_checkout_holds_no_compiled_module() -> None:
    """An editable install runs the checkout's .py files: a compiled module left beside
    one (by a build in place) would shadow every edit of it. The build compiles a copy."""
    assert CHECKOUT is not None
    left = [
        p
        for p in CHECKOUT.joinpath("stompy").rglob("*")
        if p.name.endswith(tuple(EXTENSION_SUFFIXES))
    ]
    assert left == [], "delete these: they shadow the .py files beside them"
    assert not stompy.COMPILED


def test_accelerated_says_whether_the_parser_uses_the_cython_check() -> None:
    assert isinstance(_compiled.ACCELERATED, bool)
    assert _compiled.ACCELERATED is (stompy._core.accelerator.block_escaping is not None)
    if _compiled.ACCELERATED:
        assert _compiled.is_compiled(importlib.import_module("stompy._core.cscan"))


def test_the_build_builds_the_accelerator_with_cython_at_build_time_only() -> None:
    tomllib = pytest.importorskip("tomllib")
    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    if not pyproject.is_file():
        pytest.skip(f"no {pyproject}")
    project = tomllib.loads(pyproject.read_text())
    hook = project["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["custom"]
    assert any(r.lower().startswith("cython") for r in hook["requires"])
    assert not any("cython" in d.lower() for d in project["project"]["dependencies"])
    # The source goes into the sdist (and the wheel) beside the stub that types it.
    assert (PACKAGE / "_core" / "cscan.pyx").is_file()
    assert (PACKAGE / "_core" / "cscan.pyi").is_file()
