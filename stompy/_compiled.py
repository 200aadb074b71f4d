"""Whether the sans-IO core runs compiled (mypyc) or as pure Python.

A wheel built where a C compiler was found holds the core compiled beside its ``.py``
files: every module of :data:`FOLDERS`, ``stompy/_core/`` (:data:`CORE_MODULES`) and the
test broker's sans-IO core, ``stompy/testing/_core/`` (:data:`TESTING_MODULES`), and the
engine's modules on a round trip's path (:data:`ENGINE`: the calls that wait, the
engine's pump, delivery, inboxes, receipts and requests) and the blocking transport's
(:data:`TRANSPORT`: the I/O thread, the caller's write and read, the watch); the import
system loads the compiled ones. A pure-Python wheel (no compiler, ``STOMPY_NO_EXTENSIONS=1``, not
CPython) and an editable install hold only the ``.py``. The build hook is
``hatch_build.py``; its ``compile`` list in pyproject.toml names the same folders and
modules (a test keeps them equal): a module added to one of the folders is compiled, no
list to keep.

Apart from that, a wheel built where Cython was found holds ``stompy._core.cscan``, the
parser's and the encoder's hot loops in C (the header-block check, the encoder):
:data:`ACCELERATED` tells whether they use it (not with ``STOMPY_NO_EXTENSIONS`` set at
import time, to anything but "" or "0").
"""

from __future__ import annotations

import importlib
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from types import ModuleType
from typing import Final

from stompy._core import accelerator

#: The packages the build compiles whole when it can (``compile`` in pyproject.toml).
FOLDERS: Final = ("stompy._core", "stompy.testing._core")
#: The engine's modules it compiles with them, each named there: those a round trip
#: runs through (docs/performance.md, "The compiled core").
ENGINE: Final = (
    "stompy._engine.calls",
    "stompy._engine.delivery",
    "stompy._engine.engine",
    "stompy._engine.inbox",
    "stompy._engine.receipts",
    "stompy._engine.requests",
    "stompy._engine.state",
)
#: The blocking transport's modules it compiles with them, each named there too: a
#: blocking call runs its steps, writes and reads its answer through them.
TRANSPORT: Final = ("stompy._transports.blocking", "stompy._transports.watch")


def modules_of(package: str) -> tuple[str, ...]:
    """The modules of ``package`` (one of :data:`FOLDERS`) that the build compiles: its
    ``.py`` files but ``__init__.py``, found in the folder, not imported."""
    folder = Path(__file__).parent.joinpath(*package.split(".")[1:])
    names = (path.stem for path in folder.glob("*.py") if path.name != "__init__.py")
    return tuple(f"{package}.{name}" for name in sorted(names))


#: The modules of ``stompy/_core/``, which the build compiles when it can.
CORE_MODULES: Final = tuple(importlib.import_module(n) for n in modules_of(FOLDERS[0]))

#: The modules of ``stompy/testing/_core/``, compiled with them: named, not imported, so
#: that ``import stompy`` does not import the test broker (nor stompy.testing import
#: stompy half-initialised).
TESTING_MODULES: Final = modules_of(FOLDERS[1])


def is_compiled(module: ModuleType) -> bool:
    """True when ``module`` was loaded from an extension module (``.so``, ``.pyd``)."""
    return str(getattr(module, "__file__", "")).endswith(tuple(EXTENSION_SUFFIXES))


#: The modules of :data:`ENGINE` (imported already: the clients are made of them).
ENGINE_MODULES: Final = tuple(importlib.import_module(name) for name in ENGINE)

#: The modules of :data:`TRANSPORT` (imported already: the blocking client is made of them).
TRANSPORT_MODULES: Final = tuple(importlib.import_module(name) for name in TRANSPORT)

#: True when the core modules (and those of :data:`ENGINE` and :data:`TRANSPORT`) are
#: the compiled ones; False when they are pure Python. The build compiles them all or
#: none.
COMPILED: Final[bool] = all(
    is_compiled(module) for module in CORE_MODULES + ENGINE_MODULES + TRANSPORT_MODULES
)

#: True when the parser and the encoder use the Cython accelerator
#: (``stompy._core.cscan``): the parser's header-block check and the encoder.
ACCELERATED: Final[bool] = accelerator.LOADED
