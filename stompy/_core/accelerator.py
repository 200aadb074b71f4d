"""The optional Cython accelerator of the parser and the encoder (``cscan.pyx``), loaded.

A wheel built where Cython was found holds ``stompy._core.cscan``: the parser's
header-block check and blank-line search, and the encoder, in C. Each is ``None`` here
when the accelerator was not built, or when ``STOMPY_NO_EXTENSIONS`` is set (to
anything but "" or "0") at import time; the parser and the encoder then do the same work
in Python, and write the same bytes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Final

__all__ = ("LOADED", "blank_line", "block_escaping", "encode_frame")


def _load() -> tuple[
    Callable[[bytearray, str, bool], str] | None,
    Callable[[bytearray, int], int] | None,
    Callable[
        [str, Sequence[tuple[str, str]], bytes, bool, bool, Mapping[str, str] | None],
        bytes | None,
    ]
    | None,
]:
    """The accelerator's three functions, or Nones."""
    if os.environ.get("STOMPY_NO_EXTENSIONS", "") not in ("", "0"):
        return None, None, None
    try:
        # The module, not its functions: compiled by mypyc, a function's ``from ...
        # import`` binds the module's global of that name, which the names below are.
        from stompy._core import cscan
    except ImportError:
        return None, None, None
    return cscan.block_escaping, cscan.blank_line, cscan.encode_frame


_FUNCTIONS: Final = _load()
#: ``block_escaping(block, version, raw)``: the escaping with which the parser's fast
#: path takes a header block, or "" when the block needs the line-by-line path.
block_escaping: Final = _FUNCTIONS[0]
#: ``blank_line(buf, start)``: ``buf.find(b"\n\n", start)``.
blank_line: Final = _FUNCTIONS[1]
#: ``encode_frame(command, headers, body, raw, v12, more)``: the frame, or None when
#: the Python code must write it (or raise its error).
encode_frame: Final = _FUNCTIONS[2]
#: Whether the accelerator is in use.
LOADED: Final = block_escaping is not None
