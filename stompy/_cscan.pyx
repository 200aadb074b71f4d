# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The parser's header-block check in C: an optional accelerator, built with Cython.

``_codec.FrameParser.next_frame`` gives every complete header block to
:func:`block_escaping` when this module is importable (a wheel built where Cython and a
C compiler were found; not with ``STOMPY_NO_EXTENSIONS`` set), and otherwise makes the
same decision in a few ``bytes``/``str`` passes (``translate``, ``replace``, ``in``).
This does it in one pass over the bytes, with no object made.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from libc.string cimport memchr


cdef inline Py_ssize_t find(const char* p, char byte, Py_ssize_t start, Py_ssize_t n):
    """The index of the first ``byte`` in ``p[start:n]``, or ``n``."""
    if start >= n:
        return n
    cdef const char* at = <const char*> memchr(p + start, byte, <size_t> (n - start))
    return n if at == NULL else at - p


def block_escaping(bytearray block, str version, bint raw):
    """The escaping of a header block the fast path can take, or ``""`` if it cannot.

    ``block`` is the command line and the header lines, without the blank line. The
    fast path takes a block with no CR, no colon on the command line, exactly one colon
    on every header line and never at its start, and, unless ``raw`` (CONNECT, STOMP,
    CONNECTED) or ``version`` is "1.0", only the escape sequences ``version`` defines
    (an escaped backslash is left to the slow path). Returns "1.0" for ``raw`` (nothing
    is unescaped), else ``version``.

    memchr (vectorised in the C library) finds each LF, colon and backslash: a header
    line costs two calls, whatever its length.
    """
    cdef const char* p = PyByteArray_AS_STRING(block)
    cdef Py_ssize_t n = PyByteArray_GET_SIZE(block)
    cdef Py_ssize_t newline = find(p, b"\n", 0, n)
    cdef Py_ssize_t colon = find(p, b":", 0, n)
    cdef Py_ssize_t start, end, at
    cdef char after
    if colon < newline or find(p, b"\r", 0, n) < n:
        return ""  # a colon in the command line, or a CR somewhere
    # The separators alternate: each line's one colon comes after its start (the name
    # is not empty) and before its end, and the next colon after that end.
    while newline < n:
        start = newline + 1
        end = find(p, b"\n", start, n)
        if colon == start or colon >= end:
            return ""
        colon = find(p, b":", colon + 1, n)
        if colon < end:
            return ""
        newline = end
    if raw or version == "1.0":
        return "1.0" if raw else version
    at = find(p, b"\\", 0, n)
    while at < n:
        after = p[at + 1] if at + 1 < n else 0
        if not (after == b"c" or after == b"n" or (after == b"r" and version == "1.2")):
            return ""
        at = find(p, b"\\", at + 2, n)
    return version


def blank_line(bytearray buf, Py_ssize_t start):
    """``buf.find(b"\\n\\n", start)``: where the blank line that ends
    a header block begins, or -1. One memchr per line instead of a two-byte search."""
    cdef const char* p = PyByteArray_AS_STRING(buf)
    cdef Py_ssize_t n = PyByteArray_GET_SIZE(buf)
    if start < 0:  # from the end, as find() counts it
        start = max(n + start, 0)
    cdef Py_ssize_t at = find(p, b"\n", start, n)
    while at + 1 < n:
        if p[at + 1] == b"\n":
            return at
        at = find(p, b"\n", at + 1, n)
    return -1
