"""The types of the optional Cython accelerator (``cscan.pyx``; see ``codec.py``)."""

from collections.abc import Mapping, Sequence

def block_escaping(block: bytearray, version: str, raw: bool) -> str: ...
def blank_line(buf: bytearray, start: int) -> int: ...
def encode_frame(
    command: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    raw: bool,
    v12: bool,
    more: Mapping[str, str] | None = None,
) -> bytes | None: ...
