# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The parser's and the encoder's hot loops in C: an optional accelerator, built with Cython.

When this module is importable (a wheel built where Cython and a C compiler were found;
not with ``STOMPY_NO_EXTENSIONS`` set), ``accelerator.py`` loads it:

* ``FrameParser.next_frame`` gives every complete header block to
  :func:`block_escaping`, and otherwise makes the same decision in a few
  ``bytes``/``str`` passes (``translate``, ``replace``, ``in``). This does it in one
  pass over the bytes, with no object made.
* ``encode_frame`` has :func:`encode_frame` write the frame, and otherwise joins,
  counts and replaces ``str`` objects (about ten of them a frame). This escapes and
  copies each header's UTF-8 bytes straight into the frame, the only object made.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_Next
from cpython.ref cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memchr, memcmp, memcpy, memset


cdef extern from "Python.h":
    # Not cpython.unicode's declaration, which raises: a failure here (a lone
    # surrogate) is left to the Python encoder, whose error it is to raise.
    const char* utf8_of "PyUnicode_AsUTF8AndSize"(object text, Py_ssize_t* size)
    void PyErr_Clear()
    Py_ssize_t PySequence_Fast_GET_SIZE(object sequence)
    PyObject* PySequence_Fast_GET_ITEM(object sequence, Py_ssize_t index)


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


# -- encoding ----------------------------------------------------------------------------

#: What each byte of a header name or value becomes: 0 itself, 1 "refused" (the Python
#: encoder raises the error), another byte ``b`` the escape sequence backslash ``b``.
cdef unsigned char ESCAPE_12[256]
cdef unsigned char ESCAPE_11[256]
cdef unsigned char RAW_NAME[256]
cdef unsigned char RAW_VALUE[256]


cdef void fill(unsigned char* table, const char* bytes, const char* becomes):
    memset(table, 0, 256)
    cdef Py_ssize_t i = 0
    while bytes[i]:
        table[<unsigned char> bytes[i]] = <unsigned char> becomes[i]
        i += 1


fill(ESCAPE_12, b"\\\n:\r", b"\\ncr")
fill(ESCAPE_11, b"\\\n:", b"\\nc")  # 1.1 sends a CR as it is
fill(RAW_NAME, b"\n\r:", b"\x01\x01\x01")
fill(RAW_VALUE, b"\n\r", b"\x01\x01")


cdef struct Out:
    char* data
    Py_ssize_t size
    Py_ssize_t capacity
    bint heap  # data was malloc'ed (else it is the caller's stack buffer)


cdef int reserve(Out* out, Py_ssize_t more) except -1:
    """Room for ``more`` bytes after ``out.size``."""
    if out.size + more <= out.capacity:
        return 0
    cdef Py_ssize_t capacity = max(2 * out.capacity, out.size + more)
    cdef char* data
    if out.heap:
        data = <char*> realloc(out.data, <size_t> capacity)
    else:
        data = <char*> malloc(<size_t> capacity)
        if data != NULL:
            memcpy(data, out.data, <size_t> out.size)
    if data == NULL:
        raise MemoryError()
    out.data = data
    out.capacity = capacity
    out.heap = True
    return 0


cdef inline int put(Out* out, const char* text, Py_ssize_t n, const unsigned char* table):
    """Append ``text[:n]`` escaped by ``table``; -1 for a refused byte (room for 2n
    bytes is reserved). The bytes between two that ``table`` changes are copied in one
    ``memcpy``: most names and values have none."""
    cdef char* at = out.data + out.size
    cdef Py_ssize_t i = 0, start
    cdef unsigned char escaped
    while True:
        start = i
        while i < n and table[<unsigned char> text[i]] == 0:
            i += 1
        memcpy(at, text + start, <size_t> (i - start))
        at += i - start
        if i == n:
            break
        escaped = table[<unsigned char> text[i]]
        if escaped == 1:
            return -1
        at[0] = b"\\"
        at[1] = <char> escaped
        at += 2
        i += 1
    out.size = at - out.data
    return 0


cdef int put_header(Out* out, object key, object text, const unsigned char* names,
                    const unsigned char* values) except -2:
    """Append the header line ``key:text``, escaped by ``names`` and ``values`` (nothing
    for ``content-length``: the true one is written after the others). Returns -1 for
    what the Python encoder must deal with: a name or value not a ``str``, an empty
    name, a byte the table refuses, text that is not UTF-8 (a lone surrogate)."""
    if type(key) is not str or type(text) is not str:
        return -1
    cdef Py_ssize_t name_size, value_size
    cdef const char* name = utf8_of(key, &name_size)
    if name == NULL:
        PyErr_Clear()
        return -1
    if name_size == 14 and memcmp(name, b"content-length", 14) == 0:
        return 0
    cdef const char* value = utf8_of(text, &value_size)
    if value == NULL:
        PyErr_Clear()
        return -1
    if name_size == 0:
        return -1
    reserve(out, 2 * (name_size + value_size) + 2)
    if put(out, name, name_size, names) < 0:
        return -1
    out.data[out.size] = b":"
    out.size += 1
    if put(out, value, value_size, values) < 0:
        return -1
    out.data[out.size] = b"\n"
    out.size += 1
    return 0


cdef int put_headers(Out* out, object headers, object more, bint raw, bint v12) except -2:
    """Append the header lines of ``headers`` (a list or tuple of pairs), then those of
    ``more`` (a dict, or None), escaped or (with ``raw``) checked. Returns -1 for what
    the Python encoder must deal with (see :func:`put_header`; an item not a pair)."""
    cdef const unsigned char* names = &ESCAPE_12[0] if v12 else &ESCAPE_11[0]
    cdef const unsigned char* values = names
    if raw:
        names = &RAW_NAME[0]
        values = &RAW_VALUE[0]
    cdef Py_ssize_t i
    cdef object item
    for i in range(PySequence_Fast_GET_SIZE(headers)):
        item = <object> PySequence_Fast_GET_ITEM(headers, i)
        if type(item) is not tuple or PyTuple_GET_SIZE(item) != 2:
            return -1
        if put_header(
            out,
            <object> PyTuple_GET_ITEM(item, 0),
            <object> PyTuple_GET_ITEM(item, 1),
            names,
            values,
        ) < 0:
            return -1
    if more is None:
        return 0
    cdef Py_ssize_t at = 0
    cdef PyObject* key
    cdef PyObject* text
    while PyDict_Next(more, &at, &key, &text):
        if put_header(out, <object> key, <object> text, names, values) < 0:
            return -1
    return 0


def encode_frame(
    str command, object headers, object body, bint raw, bint v12, object more=None
):
    """The frame ``encoder.encode_frame`` would write, or None where the Python encoder
    must do the work (it raises the errors): ``headers`` not a list or tuple of pairs of
    ``str`` or ``more`` (headers after those) neither None nor a dict of ``str``,
    either holding what cannot be written (see :func:`put_header`), a body that is not
    ``bytes``. ``raw``: nothing is escaped (STOMP 1.0; CONNECT, CONNECTED); else the
    escapes of 1.2 if ``v12``, of 1.1 if not. The command, the version and whether the
    command may have a body are the caller's to check."""
    if (
        (type(headers) is not list and type(headers) is not tuple)
        or type(body) is not bytes
        or (more is not None and type(more) is not dict)
    ):
        return None
    cdef char stack[1024]
    cdef Out out
    out.data = stack
    out.size = 0
    out.capacity = sizeof(stack)
    out.heap = False
    cdef Py_ssize_t command_size, length, digits, body_size = PyBytes_GET_SIZE(body)
    cdef const char* name = utf8_of(command, &command_size)
    cdef char* at
    cdef bytes frame
    if name == NULL:
        PyErr_Clear()
        return None
    try:
        reserve(&out, command_size + 1)
        memcpy(out.data, name, <size_t> command_size)
        out.data[command_size] = b"\n"
        out.size = command_size + 1
        if put_headers(&out, headers, more, raw, v12) < 0:
            return None
        reserve(&out, 40)
        if body_size:
            memcpy(out.data + out.size, b"content-length:", 15)
            out.size += 15
            digits = 1
            length = body_size
            while length >= 10:
                length //= 10
                digits += 1
            length = body_size
            at = out.data + out.size + digits
            out.size += digits
            while digits:
                at -= 1
                at[0] = <char> (48 + length % 10)
                length //= 10
                digits -= 1
            out.data[out.size] = b"\n"
            out.size += 1
        out.data[out.size] = b"\n"
        out.size += 1
        frame = PyBytes_FromStringAndSize(NULL, out.size + body_size + 1)
        at = PyBytes_AS_STRING(frame)
        memcpy(at, out.data, <size_t> out.size)
        memcpy(at + out.size, PyBytes_AS_STRING(body), <size_t> body_size)
        at[out.size + body_size] = 0
        return frame
    finally:
        if out.heap:
            free(out.data)
