"""The wheel's build hook: stompy's sans-IO core compiled with mypyc whenever it can be,
and the codec's hot loops (``stompy/_core/cscan.pyx``: the parser's header-block check, the
encoder) built with Cython.

The way aiohttp, yarl and multidict ship their C cores: a wheel built with a C compiler
at hand (``pip install .``, ``python -m build``, cibuildwheel) holds the modules listed
under ``compile`` in ``[tool.hatch.build.targets.wheel.hooks.custom]`` compiled, beside
their ``.py`` files, and is tagged for this interpreter and platform: every module of
each folder listed (``stompy/_core/``, ``stompy/testing/_core/``; each ``.py`` file but
``__init__.py``), and each module listed by its file (the engine's modules on a round
trip's path: ``stompy/_engine/calls.py``, ``engine.py``...). The wheel is pure Python
(``py3-none-any``), with a warning in the build log and no error, when:

* ``STOMPY_NO_EXTENSIONS`` is set to anything but ``""`` or ``"0"`` (the forced pure build);
* the interpreter is not CPython (mypyc targets CPython's C API);
* mypyc cannot be imported (a build without isolation and without mypy installed);
* the compile fails: no C compiler, no Python headers, or mypyc rejects the code.

The accelerator is built the same way, independently: with Cython importable and a C
compiler, ``stompy/_core/cscan.*.so`` goes into the wheel (``stompy._compiled.ACCELERATED``);
without, a warning, and the codec does the same work in Python (or mypyc's C). Cython
is a build requirement only: nothing imports it at run time.

Editable installs (``pip install -e .``) are always pure Python.

mypyc compiles a copy of the package in a temporary directory and the extension modules
are taken into the wheel from there; nothing is written into the source tree. (In place,
as hatch-mypyc builds, a ``codec.*.so`` left beside ``codec.py`` would shadow every
later edit of the ``.py``: the import system prefers extension modules.) In that copy
every package's ``__init__.py`` is empty, so mypy follows only the imports of the modules
compiled: the core compiles on its own, whatever the transports import. The engine's
modules name the WebSocket framing in annotations, whose module imports anyio and
wsproto, which the build environment does not hold: mypy takes what it cannot find there
as ``Any`` (``MYPY_CONFIG``), which changes nothing compiled. The test broker's sans-IO
core (``stompy/testing/_core/``) is compiled with it, in one group: a broker run from the
wheel (``stompy broker``, ``stompy.testing.serve``) takes a SEND in a little over half the
instructions.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
from importlib.machinery import EXTENSION_SUFFIXES
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

#: Set to anything but "" or "0", the build makes a pure-Python wheel.
NO_EXTENSIONS = "STOMPY_NO_EXTENSIONS"

#: The setup script mypyc's own command line would write, in the copy of the package.
#: ``group_name`` names the shared library of the compiled modules ``stompy__mypyc``
#: (a top-level module of the wheel) rather than after a hash of their names.
SETUP = """\
from setuptools import setup
from mypyc.build import mypycify

setup(name="stompy-core", ext_modules=mypycify({paths!r}, group_name="stompy"))
"""

#: mypy's settings for the compile, in the copy (mypy.ini; mypyc reads it from there):
#: the transports' libraries, which the engine's modules reach through annotations, are
#: not in the build environment. Only modules that are not compiled import them.
MYPY_CONFIG = """\
[mypy]

[mypy-anyio.*,wsproto.*]
ignore_missing_imports = True
"""

#: The Cython accelerator, as its own extension module ``stompy._core.cscan``.
ACCELERATOR = "stompy/_core/cscan.pyx"
CYTHON_SETUP = """\
from Cython.Build import cythonize
from setuptools import Extension, setup

extension = Extension("stompy._core.cscan", [{path!r}])
setup(name="stompy-cscan", ext_modules=cythonize([extension], language_level=3))
"""


#: A C extension of nothing, built first: without a working C compiler (or without
#: Python's headers) the build says so at once, rather than after mypyc has spent most
#: of a minute translating the core into C that nothing can compile.
PROBE = "probe.c"
PROBE_SOURCE = """\
#include <Python.h>
static struct PyModuleDef probe = {PyModuleDef_HEAD_INIT, "stompy_probe", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_stompy_probe(void) { return PyModule_Create(&probe); }
"""
PROBE_SETUP = """\
from setuptools import Extension, setup

setup(name="stompy-probe", ext_modules=[Extension("stompy_probe", [{path!r}])])
"""


def forced_pure() -> bool:
    return os.environ.get(NO_EXTENSIONS, "") not in ("", "0")


class CompileFailed(Exception):
    """mypyc or the C compiler failed; the message holds the end of their output."""


class CompiledCoreHook(BuildHookInterface):  # type: ignore[type-arg]
    """Compile the core into standard (not editable) wheels, or leave the wheel pure."""

    #: The copy of the package mypyc compiles, from initialize() to finalize().
    work: tempfile.TemporaryDirectory[str] | None = None

    def dependencies(self) -> list[str]:
        """What the compile needs (``requires``: mypy, which brings mypyc, setuptools,
        which mypyc drives, and Cython, for the accelerator), installed into the build
        environment only when a compile will be tried: a forced pure build downloads none
        of it."""
        if forced_pure() or platform.python_implementation() != "CPython":
            return []
        return list(self.config.get("requires", []))

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version != "standard":
            return  # the sdist carries sources; an editable install imports them
        if forced_pure():
            self.app.display_info(f"stompy: {NO_EXTENSIONS} is set: a pure-Python wheel")
            return
        if platform.python_implementation() != "CPython":
            self.app.display_info("stompy: not CPython: a pure-Python wheel")
            return
        if find_spec("setuptools") is not None:
            try:
                self.probe()
            except (CompileFailed, OSError) as error:
                self.app.display_warning(
                    f"stompy: no working C compiler, a pure-Python wheel:\n{error}"
                )
                return
        built: dict[str, str] = {}
        if find_spec("mypyc") is None:
            self.app.display_warning("stompy: mypyc is not installed: a pure-Python core")
        else:
            try:
                core = self.compile()
            except (CompileFailed, OSError) as error:
                self.app.display_warning(
                    f"stompy: the core did not compile, a pure-Python core:\n{error}"
                )
            else:
                self.app.display_info(
                    f"stompy: the core compiled with mypyc: {', '.join(core.values())}"
                )
                built.update(core)
        if find_spec("Cython") is None:
            self.app.display_warning("stompy: Cython is not installed: no accelerator")
        else:
            try:
                accelerator = self.accelerate()
            except (CompileFailed, OSError) as error:
                self.app.display_warning(f"stompy: the accelerator did not build:\n{error}")
            else:
                self.app.display_info(
                    f"stompy: the accelerator built with Cython: {', '.join(accelerator.values())}"
                )
                built.update(accelerator)
        if not built:
            return  # a pure-Python wheel
        build_data["pure_python"] = False
        build_data["infer_tag"] = True  # e.g. cp311-cp311-linux_x86_64
        build_data["force_include"].update(built)

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self.work is not None:
            self.work.cleanup()
            self.work = None

    def compile(self) -> dict[str, str]:
        """Compile the modules of the ``compile`` list (folders and files) in a copy of
        the package; return the extension modules built, as force-include entries (path
        built -> path in the wheel).

        Raises CompileFailed when mypyc or the C compiler fails, or when a module listed
        (or of a folder listed) has no extension module afterwards."""
        paths = modules(Path(self.root), self.config.get("compile", []))
        work = self.copy("mypyc")
        (work / "mypy.ini").write_text(MYPY_CONFIG)
        self.build(work, SETUP.format(paths=paths))
        built = {str(p): p.relative_to(work).as_posix() for p in extensions(work)}
        for path in map(Path, paths):
            found = [p for p in extensions(work / path.parent) if p.name.split(".")[0] == path.stem]
            if not found:
                raise CompileFailed(f"mypyc built no extension module for {path}")
            built[str(found[0])] = (path.parent / found[0].name).as_posix()
        return built

    def probe(self) -> None:
        """Build an empty C extension; raises CompileFailed as :meth:`compile` does."""
        if self.work is None:
            self.work = tempfile.TemporaryDirectory(prefix="stompy-build-")
        work = Path(self.work.name) / "probe"
        work.mkdir()
        (work / PROBE).write_text(PROBE_SOURCE)
        self.build(work, PROBE_SETUP.format(path=PROBE))

    def accelerate(self) -> dict[str, str]:
        """Build the Cython accelerator in a copy of the package; return its extension
        module as a force-include entry. Raises CompileFailed as :meth:`compile` does."""
        work = self.copy("cython")
        self.build(work, CYTHON_SETUP.format(path=ACCELERATOR))
        source = Path(ACCELERATOR)
        for path in extensions(work / source.parent):
            if path.name.split(".")[0] == source.stem:
                return {str(path): (source.parent / path.name).as_posix()}
        raise CompileFailed(f"Cython built no extension module for {ACCELERATOR}")

    def copy(self, name: str) -> Path:
        """A fresh copy of the package (every ``__init__.py`` empty, no extension module)
        in a folder ``name`` of the temporary directory, deleted by :meth:`finalize`.

        With the packages empty, mypy follows only the imports of the modules compiled
        (``stompy.testing``'s servers import anyio, which the build environment does not
        hold)."""
        if self.work is None:
            self.work = tempfile.TemporaryDirectory(prefix="stompy-build-")
        work = Path(self.work.name) / name
        skip = shutil.ignore_patterns("__pycache__", *(f"*{s}" for s in EXTENSION_SUFFIXES))
        shutil.copytree(Path(self.root) / "stompy", work / "stompy", ignore=skip)
        for init in (work / "stompy").rglob("__init__.py"):
            init.write_text("")
        return work

    @staticmethod
    def build(work: Path, setup: str) -> None:
        """Run ``setup`` as ``setup.py build_ext --inplace`` in ``work``."""
        (work / "setup.py").write_text(setup)
        process = subprocess.run(
            [sys.executable, "setup.py", "build_ext", "--inplace"],
            cwd=work,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        if process.returncode != 0:
            raise CompileFailed("\n".join(process.stdout.splitlines()[-20:]))


def modules(root: Path, entries: list[str]) -> list[str]:
    """The modules the build compiles, as paths relative to ``root``: each entry of
    ``entries`` (relative to ``root``) that is a ``.py`` file, and every ``.py`` file but
    ``__init__.py`` of each that is a folder. Raises CompileFailed for a file that is not
    there, or a folder that holds no module."""
    paths: list[str] = []
    for entry in entries:
        path = root / entry
        if entry.endswith(".py"):
            if not path.is_file():
                raise CompileFailed(f"no module {entry} to compile")
            found = [path]
        else:
            found = sorted(p for p in path.glob("*.py") if p.name != "__init__.py")
            if not found:
                raise CompileFailed(f"no module to compile in {entry}")
        paths += [p.relative_to(root).as_posix() for p in found]
    return paths


def extensions(folder: Path) -> list[Path]:
    """The extension modules (``.so``, ``.pyd``) in ``folder``."""
    return [p for p in folder.iterdir() if p.name.endswith(tuple(EXTENSION_SUFFIXES))]
