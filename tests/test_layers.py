"""The layers of ``stompy/`` import downwards only, read from the modules' import
statements (every one: at the top, inside functions, under ``if TYPE_CHECKING``).

From the bottom (docs/contributing.md draws it):

* the leaves: ``stompy.errors`` and the helpers every layer may use (``_checks``,
  ``_mypyc``, ``_version``, ``_public``); they import only each other;
* ``stompy._core``: the sans-IO core the wheel compiles; the standard library,
  ``typing_extensions``, the leaves and itself, nothing else (the test broker's core,
  ``stompy.testing._core``, compiled with it, takes the same rule plus the core);
* ``stompy._engine``: the session engine; no transport, no client;
* ``stompy._transports``: the blocking and the anyio I/O; no client;
* ``stompy._client``: what users hold;
* on top, the public modules (``stompy``, ``stompy.engine``, ``stompy.events``,
  ``stompy._compiled``), then ``stompy.testing``, ``stompy.spark`` and the CLI, which
  nothing below imports (the CLI runs the test broker: it is the very top).

A module added to ``stompy/`` must be given its layer here (``layer_of``).
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

import pytest

import stompy

PACKAGE = Path(stompy.__file__).parent

#: The layers from the bottom; a module may import its own layer and those below.
LAYERS = ("leaves", "core", "engine", "transports", "client", "surface", "extras", "cli")

LEAVES = {"stompy.errors", "stompy._checks", "stompy._mypyc", "stompy._version", "stompy._public"}
SURFACE = {"stompy", "stompy.engine", "stompy.events", "stompy.protocol", "stompy._compiled"}

#: What the core may import besides the standard library and stompy's leaves.
CORE_THIRD_PARTY = {"typing_extensions"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(name: str) -> str:
    """The layer of stompy's module ``name``; a module no rule places fails the test."""
    if name in LEAVES:
        return "leaves"
    if name in SURFACE:
        return "surface"
    for prefix, layer in [
        ("stompy._core", "core"),
        ("stompy.testing._core", "core"),
        ("stompy._engine", "engine"),
        ("stompy._transports", "transports"),
        ("stompy._client", "client"),
        ("stompy.testing", "extras"),
        ("stompy.spark", "extras"),
        ("stompy.cli", "cli"),
        ("stompy.__main__", "cli"),
    ]:
        if name == prefix or name.startswith(f"{prefix}."):
            return layer
    raise AssertionError(f"{name}: no layer; give it one in tests/test_layers.py")


def imports_of(name: str) -> set[str]:
    """Every module ``name`` imports (``from a import b`` gives ``a.b`` when that is a
    module of stompy, else ``a``)."""
    path = modules()[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            submodules = {f"{base}.{alias.name}" for alias in node.names} & set(modules())
            found.update(submodules)
            if len(submodules) < len(node.names):
                found.add(base)  # names of the module itself
    return found


def stompy_imports(name: str) -> set[str]:
    """The modules of stompy that ``name`` imports."""
    return {m for m in imports_of(name) if m == "stompy" or m.startswith("stompy.")}


def test_the_layers_are_folders() -> None:
    for folder in ("_core", "_engine", "_transports", "_client", "testing/_core"):
        assert (PACKAGE / folder / "__init__.py").is_file(), folder


def test_every_module_has_a_layer() -> None:
    assert {layer_of(name) for name in modules()} <= set(LAYERS)


@pytest.mark.parametrize("name", sorted(modules()))
def test_a_module_imports_nothing_above_its_layer(name: str) -> None:
    rank = LAYERS.index(layer_of(name))
    above = {m: layer_of(m) for m in stompy_imports(name) if LAYERS.index(layer_of(m)) > rank}
    assert above == {}, f"{name} ({layer_of(name)}) imports from above it"


@pytest.mark.parametrize("name", sorted(n for n in modules() if layer_of(n) == "core"))
def test_the_core_imports_only_the_standard_library_and_itself(name: str) -> None:
    outside = {
        m
        for m in imports_of(name)
        if m.split(".")[0] != "stompy"
        and m.split(".")[0] not in sys.stdlib_module_names
        and m.split(".")[0] not in CORE_THIRD_PARTY
        and m != "__future__"
    }
    assert outside == set()
    if name.startswith("stompy._core"):
        # Not even the test broker's core, compiled with it.
        assert not any(m.startswith("stompy.testing") for m in stompy_imports(name))


def test_nothing_below_imports_testing_spark_or_the_cli() -> None:
    def top(module: str) -> str | None:
        if module == "stompy.__main__":
            return "stompy.cli"
        for extra in ("stompy.testing", "stompy.spark", "stompy.cli"):
            if module == extra or module.startswith(f"{extra}."):
                return extra
        return None

    wrong = {
        (name, m)
        for name in modules()
        for m in stompy_imports(name)
        if top(m) is not None and top(m) != top(name) and top(name) != "stompy.cli"
    }
    assert wrong == set()


def test_the_map_in_contributing_names_every_package() -> None:
    """docs/contributing.md opens with the map of the layers: it keeps up with the tree."""
    page = PACKAGE.parent / "docs" / "contributing.md"
    if not page.is_file():
        pytest.skip("not a checkout")
    text = page.read_text()
    layers = text[: text.index("## The docs")]
    folders = sorted(p.parent.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("__init__.py"))
    missing = [f"{f}/" for f in folders if f != "." and f"{f}/" not in layers]
    assert missing == []


#: The modules below the public surface that the CLI imports, each for a reason given
#: where it is imported; the rest of the CLI is written against the public API.
CLI_PRIVATE_IMPORTS = {"stompy._engine.urls", "stompy._core.frames", "stompy._checks"}
PUBLIC_MODULES = {"stompy", "stompy.errors", "stompy.events", "stompy.engine", "stompy.testing"}


def test_the_cli_uses_the_public_api() -> None:
    used = {
        m
        for name in modules()
        if layer_of(name) == "cli"
        for m in stompy_imports(name)
        if layer_of(m) != "cli" and m not in PUBLIC_MODULES
    }
    assert used == CLI_PRIVATE_IMPORTS
