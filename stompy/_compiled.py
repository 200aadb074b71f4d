"""Whether the sans-IO core runs compiled (mypyc) or as pure Python.

A wheel built where a C compiler was found holds the core modules compiled beside
their ``.py`` files (the test broker's sans-IO core too: :data:`TESTING_MODULES`), and
the import system loads the compiled ones; a pure-Python wheel (no compiler,
``STOMPY_NO_EXTENSIONS=1``, not CPython) and an editable install hold only the ``.py``.
The build hook is ``hatch_build.py``; its ``compile`` list in pyproject.toml is
:data:`CORE_MODULES` and :data:`TESTING_MODULES` (a test keeps them equal).

Apart from that, a wheel built where Cython was found holds ``stompy._core.cscan``, the
codec's hot loops in C (the parser's header-block check, the encoder):
:data:`ACCELERATED` tells whether the codec uses it (not with ``STOMPY_NO_EXTENSIONS``
set at import time, to anything but "" or "0").
"""

from __future__ import annotations

from importlib.machinery import EXTENSION_SUFFIXES
from types import ModuleType
from typing import Final

from stompy._core import codec as _codec
from stompy._core import events as _events
from stompy._core import frames as _frames
from stompy._core import heartbeat as _heartbeat
from stompy._core import protocol as _protocol

#: The modules the build compiles when it can.
CORE_MODULES: Final = (_frames, _codec, _heartbeat, _events, _protocol)

#: The modules of ``stompy.testing`` compiled with them: named, not imported, so that
#: ``import stompy`` does not import the test servers (nor stompy.testing import stompy
#: half-initialised).
TESTING_MODULES: Final = ("stompy.testing._core.broker",)


def is_compiled(module: ModuleType) -> bool:
    """True when ``module`` was loaded from an extension module (``.so``, ``.pyd``)."""
    return str(getattr(module, "__file__", "")).endswith(tuple(EXTENSION_SUFFIXES))


#: True when the core modules are the compiled ones; False when they are pure Python.
COMPILED: Final[bool] = all(is_compiled(module) for module in CORE_MODULES)

#: True when the codec uses the Cython accelerator (``stompy._core.cscan``): the parser's
#: header-block check and the encoder.
ACCELERATED: Final[bool] = _codec._block_escaping is not None
