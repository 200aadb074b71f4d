"""The one thing the compiled core takes from ``mypy_extensions``, without depending on
it at run time.

mypy (and so mypyc, when the build compiles the core) sees ``mypyc_attr`` from
``mypy_extensions`` and reads the class flags it sets (mypyc applies them itself and
emits no call of it); when the core runs as plain Python, where ``mypy_extensions``
need not be installed, it is a decorator that changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr as mypyc_attr
else:
    _T = TypeVar("_T")

    def mypyc_attr(*_flags: Any, **_attrs: Any) -> Callable[[_T], _T]:
        return lambda cls: cls
