"""The blocking transport's I/O: the socket, the thread that serves it, and the lock.

One I/O thread per connection serves the socket. It waits in a selector (``epoll`` or
``kqueue`` where there is one: no limit on descriptor numbers) for bytes from
the broker, for bytes to write, for a wake-up from a user thread, or for the core's
next heart-beat deadline, whichever comes first. A call runs its steps on the session
engine under the lock (:meth:`IOThread.run`; a send that waits for nothing,
:meth:`IOThread.queue_output`), which appends the encoded bytes to the outgoing
buffer. Before the caller waits, or when the connection is at rest, the caller's
thread writes that buffer to a plain socket itself, under the lock, if nobody is
writing (:meth:`IOThread.push`: a round trip then costs no hand-off); otherwise, and
for whatever the socket does not take at once, it wakes the I/O thread, which writes
whatever has accumulated in one go (many frames, one ``send``). Every byte leaves
from the start of the one buffer, by one writer at a time, so frames can never
interleave. Only the I/O thread reads, and only it judges a failed socket.

While the session keeps a backlog (a subscription's inbox is full) the thread stops
reading the socket, so TCP pushes back on the broker instead of memory growing; it
still sends heart-beats, and bytes waiting in the socket count as a sign of life, so a
slow consumer is not mistaken for a dead broker (:func:`bytes_waiting` looks, for the
engine's :meth:`~stompy._engine.session.Session.tick`). Every decision (reconnecting, routing,
receipts, the goodbye) is the engine's; this module moves bytes, waits and wakes.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import select
import selectors
import socket
import ssl as _ssl
import threading
import time
from typing import Final, Generic, TypeVar

from stompy._engine.callbacks import report_callback_error
from stompy._engine.calls import Call, Running, Steps
from stompy._engine.connecting import Attempts, Handshake
from stompy._engine.message import MessageBase
from stompy._engine.session import (
    MAX_OUTGOING,
    Session,
    failure_reason,
    log,
    transport_failed,
    while_writing,
)
from stompy._engine.state import CLOSED, CLOSING, NEW, PROTOCOL_CLOSED, RECONNECTING, Status
from stompy._engine.urls import Endpoint
from stompy.errors import ConnectFailed, ConnectionLost, StompError

__all__ = ("IOThread", "bytes_waiting")

M = TypeVar("M", bound=MessageBase)
T = TypeVar("T")

_RECV_SIZE: Final = 256 * 1024
#: At most this much is read after a failed write, for the ERROR that says why.
_LAST_WORDS: Final = 1024 * 1024
_SEND_CHUNK: Final = 1024 * 1024
_TLS_RETRY: Final = (BlockingIOError, _ssl.SSLWantReadError, _ssl.SSLWantWriteError)


def bytes_waiting(sock: socket.socket | None) -> bool | None:
    """Whether bytes (or the end of the stream) wait unread in ``sock``, looked at
    without reading them; ``None`` when it cannot tell (no socket, a closed one)."""
    if sock is None:
        return None
    try:
        if isinstance(sock, _ssl.SSLSocket) and sock.pending():
            return True  # decrypted already, inside the TLS object
        fd = sock.fileno()
        if fd < 0:
            return None
        if hasattr(select, "poll"):  # not select(): it cannot watch descriptors >= 1024
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            return bool(poller.poll(0))
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return None


class IOThread(Generic[M]):
    """Serves one session: establishes its connections and runs the I/O thread.

    :attr:`cond` (over :attr:`lock`) guards the session; it is notified whenever
    something a waiting call may be waiting for happened.
    """

    def __init__(self, session: Session[M]) -> None:
        self.session = session
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.thread: threading.Thread | None = None
        self._hooks: threading.Thread | None = None  # runs the lifecycle hooks
        self._sock: socket.socket | None = None
        # Made at start(): a user thread writes a byte to wake the I/O thread.
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self.wake_sent = False
        #: The socket a user thread may write to itself (see :meth:`push`): the current
        #: one when it is plain TCP; ``None`` for TLS, whose object must not be read
        #: and written by two threads at once, and between connections.
        self._direct: socket.socket | None = None
        #: The I/O thread holds bytes taken from the outgoing buffer and not yet written.
        self._writing = False
        #: Nothing was written through since a caller last waited or bytes last came:
        #: the next send may write through (see :meth:`push`).
        self.at_rest = True
        self._abandoned = False

    # -- for user threads ----------------------------------------------------------------

    def run(self, steps: Steps[T]) -> T:
        """Run a call's steps under the lock, waiting as they ask."""
        cond = self.cond
        running = Running(steps)
        with cond:
            try:
                wait = running.resume()
                while wait is not None:
                    self.push(waiting=True)
                    cond.wait(max(0.0, wait.deadline - time.monotonic()))
                    wait = running.resume(time.monotonic())
            finally:
                running.close()  # an interrupted wait: the call forgets its receipt
                self.push()  # what was queued before an error goes out too
        return running.result

    def queue_output(self) -> None:
        """After a send queued under the lock (a client's fast path,
        :meth:`Session.send_now`): written now (:meth:`push`); past
        :data:`MAX_OUTGOING`, wait for room as a call's steps do."""
        if not self.wake_sent:
            self.push()
        session = self.session
        if len(session.outgoing) > MAX_OUTGOING and threading.current_thread() is not self.thread:
            self.run(Call(session, time.monotonic()).flush())

    def push(self, *, waiting: bool = False) -> None:
        """Under the lock, after something was queued: write the outgoing buffer from
        the caller's thread (the write-through) when nobody writes now, and wake the
        I/O thread for what the socket does not take. ``waiting``: the caller waits
        next (for a receipt, a reply, a message).

        The frames stay in order: every byte goes through :attr:`Session.outgoing`,
        from its start, under the lock, and only when the I/O thread has none of it in
        hand (:attr:`_writing`) and was not woken to write it. What the socket would
        not take at once (it would block), or refused (an error), stays queued for the
        I/O thread, which waits for the socket and judges a failure as it always did.

        A send that waits for nothing writes through only when the connection is at
        rest (:attr:`at_rest`): the first of a burst goes at once, and the I/O thread
        writes the rest in one go, as a system call per frame would halve a
        publisher's rate. So a connection at rest costs a send no hand-off to the I/O
        thread (two thread switches and four system calls more)."""
        session = self.session
        out = session.outgoing
        if waiting:
            self.at_rest = True
        if not out:
            return
        sock = self._direct
        if sock is not None and self.at_rest and not self._writing and not self.wake_sent:
            self.at_rest = waiting
            try:
                sent = sock.send(out)
            except OSError:  # would block (BlockingIOError), or the socket failed
                sent = 0
            if sent:
                del out[:sent]
                session.wrote(time.monotonic())
                if not out:
                    return
        self.wake()

    def kick(self) -> None:
        """Wake the I/O thread if there is something to write and it does not know."""
        if self.session.outgoing and not self.wake_sent:
            self.wake()

    def wake(self) -> None:
        if not self.wake_sent and self._wake_w is not None:
            self.wake_sent = True
            with contextlib.suppress(OSError):
                self._wake_w.send(b"\0")

    def connect(self) -> None:
        """Establish the first connection (raises why not) and start the I/O thread."""
        established = self._attempt(self.session.connect_attempts())
        if isinstance(established, Attempts):
            raise established.error()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._install(*established)
        thread = threading.Thread(target=self._main, name=f"stompy-io-{id(self):x}", daemon=True)
        self.thread = thread
        thread.start()
        if self.session.options.hooked:
            hooks = threading.Thread(
                target=self._run_hooks, name=f"stompy-hooks-{id(self):x}", daemon=True
            )
            self._hooks = hooks
            hooks.start()

    def stop(self, timeout: float) -> None:
        """After the session closed: let the thread end, close the sockets."""
        with self.cond:
            self.cond.notify_all()
            self.wake()
        for thread in (self.thread, self._hooks):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout)
        with self.cond:
            self._release()

    def abandon(self) -> None:
        """The connection was never closed and is gone (collected): end the session
        without a goodbye and without waiting; the thread closes the sockets as it ends.
        Safe from any thread, the I/O thread included."""
        with self.cond:
            self._abandoned = True
            self.session.closed()
            self.cond.notify_all()
            self.wake()
            thread = self.thread
            if thread is None or not thread.is_alive():
                self._release()

    def _run_hooks(self) -> None:
        """The hooks thread: make the session's hook calls in order, outside the lock,
        until the session is over and every call was made."""
        session, cond = self.session, self.cond
        while True:
            with cond:
                while not session.notices:
                    if session.status is CLOSED and not session.serving:
                        return
                    cond.wait()
                notice = session.notices.popleft()
            try:
                result = notice.hook(notice.argument)
                if inspect.isawaitable(result):
                    if inspect.iscoroutine(result):
                        result.close()
                    log.warning(
                        "%s is a coroutine function: Connection calls plain ones", notice.what
                    )
            except Exception as exc:  # logged and printed to stderr, as on_message's
                report_callback_error(exc, f"the {notice.what} hook", notice.argument)

    def _release(self) -> None:
        """Close the socket and the wake-up pair (under the lock)."""
        self._close_socket()
        for wake in (self._wake_r, self._wake_w):
            if wake is not None:
                wake.close()

    # -- establishing --------------------------------------------------------------------

    def _attempt(self, attempts: Attempts) -> tuple[socket.socket, Handshake] | Attempts:
        """Go through ``attempts``; the first connection established, or the attempts
        when none was (or the session stopped wanting one)."""
        session = self.session
        for delay, endpoint in attempts:
            with self.cond:
                if delay:
                    self.cond.wait(delay)  # close() cuts it short
                if session.status not in (NEW, RECONNECTING):
                    return attempts
            try:
                return self._establish(endpoint)
            except StompError as exc:
                attempts.failed(endpoint, exc)
        return attempts

    def _establish(self, endpoint: Endpoint) -> tuple[socket.socket, Handshake]:
        options = self.session.options
        deadline = time.monotonic() + options.connect_timeout
        try:
            context = options.ssl_context(endpoint)
        except ValueError as exc:
            raise ConnectFailed(str(exc)) from None
        handshake = self.session.handshake(endpoint)
        sock: socket.socket | None = None
        try:
            sock = socket.create_connection(
                (endpoint.host, endpoint.port), timeout=options.connect_timeout
            )
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if context is not None:
                sock = context.wrap_socket(sock, server_hostname=endpoint.host)
            sock.sendall(handshake.first)
            while handshake.connected is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ConnectFailed(f"no CONNECTED from {endpoint} within the connect timeout")
                sock.settimeout(remaining)
                reply = handshake.receive(sock.recv(_RECV_SIZE), time.monotonic())
                if reply:
                    sock.sendall(reply)
            sock.setblocking(False)
            return sock, handshake
        except (OSError, _ssl.SSLError) as exc:
            if sock is not None:
                sock.close()
            raise ConnectFailed(f"cannot connect to {endpoint}: {failure_reason(exc)}") from exc
        except BaseException:
            if sock is not None:
                sock.close()
            raise

    def _install(self, sock: socket.socket, handshake: Handshake) -> None:
        with self.cond:
            self._sock = sock
            self._direct = None if isinstance(sock, _ssl.SSLSocket) else sock
            self.session.install(handshake, time.monotonic())
            self.kick()
            self.cond.notify_all()

    def _close_socket(self) -> None:
        sock = self._sock
        self._sock = None
        self._direct = None
        if sock is not None:
            ws = self.session.ws
            if ws is not None and not self.session.outgoing:
                # Say goodbye the WebSocket way; best effort, the socket is closing.
                with contextlib.suppress(OSError):
                    sock.send(ws.close())
            with contextlib.suppress(OSError):
                sock.close()

    # -- the I/O thread --------------------------------------------------------------------

    def _main(self) -> None:
        session = self.session
        try:
            while True:
                lost = self._serve()
                if lost is None or not self._reconnect(lost):
                    return
        except BaseException:  # a bug: never leave waiters hanging
            log.exception("stompy I/O thread failed")
            with self.cond:
                session.fail(ConnectionLost("the I/O thread failed"))
                self._close_socket()
            raise
        finally:
            with self.cond:
                session.serving = False
                self.cond.notify_all()
                if self._abandoned:
                    self._release()

    def _serve(self) -> StompError | None:
        """Pump one socket until it ends; return why it ended (``None``: closed by us)."""
        with selectors.DefaultSelector() as selector:
            return self._pump(selector)

    def _pump(self, selector: selectors.BaseSelector) -> StompError | None:
        session = self.session
        wake_r = self._wake_r
        assert wake_r is not None
        selector.register(wake_r, selectors.EVENT_READ)
        watched = 0  # the events the selector watches on the socket
        while True:
            with self.cond:
                if session.status is CLOSED:
                    return None
                if session.ending is not None:  # a call found the broker not reading
                    return session.ending
                sock, proto = self._sock, session.proto
                assert sock is not None
                assert proto is not None
                # Room a consumer made since the last pump: its wake-up may have been
                # folded into one that was already read, so look now, under the lock.
                if session.drain_backlog(time.monotonic()):
                    self.cond.notify_all()
                paused = session.paused
                want_write = bool(session.outgoing)
                deadline = session.next_deadline(time.monotonic())
                self.wake_sent = False
            # At most an hour: a deadline weeks away (a long heart-beat times its
            # tolerance) would overflow the selector; the loop looks again.
            timeout = (
                None if deadline is None else min(3600.0, max(0.0, deadline - time.monotonic()))
            )
            pending_tls = isinstance(sock, _ssl.SSLSocket) and not paused and sock.pending() > 0
            wanted = (0 if paused else selectors.EVENT_READ) | (
                selectors.EVENT_WRITE if want_write else 0
            )
            data: bytes | None = None
            try:
                if wanted != watched:
                    if not watched:
                        selector.register(sock, wanted)
                    elif not wanted:
                        selector.unregister(sock)
                    else:
                        selector.modify(sock, wanted)
                    watched = wanted
                ready = 0
                if pending_tls:
                    ready = wanted
                else:
                    for key, events in selector.select(timeout):
                        if key.fileobj is sock:
                            ready = events
                        else:
                            with contextlib.suppress(OSError):
                                wake_r.recv(4096)
                if ready & selectors.EVENT_READ:
                    data = self._recv(sock)
                if ready & selectors.EVENT_WRITE:
                    self._send(sock)
            except (OSError, _ssl.SSLError) as exc:
                # A broker that refuses a frame (one too large, say) sends an ERROR and
                # closes while the frame is still being written: the write fails first,
                # and the ERROR, which says why, is still to be read.
                last_words = (data or b"") + self._last_words(sock)  # data: read just now
                with self.cond:
                    if session.status in (CLOSING, CLOSED):
                        return None
                    error = self._heard(last_words) or transport_failed(
                        session.endpoint, exc, len(session.outgoing)
                    )
                    session.saw_end(error)
                    return error
            now = time.monotonic()
            with self.cond:
                status: Status = session.status  # a local: another thread changes it
                if status is CLOSED:
                    return None
                ended = None
                if data is not None:
                    ended = session.receive(data, now)
                    self.at_rest = True  # an answer came: the next send may write through
                if deadline is not None and now >= deadline:
                    pumped = session.tick(now, functools.partial(bytes_waiting, sock))
                else:
                    pumped = session.pump(now)
                if pumped.woke:
                    self.cond.notify_all()
                failure = pumped.failure
                if failure is None and ended is not None:
                    # Frames that came before the close were handled; answer it.
                    with contextlib.suppress(OSError):
                        self._send(sock)
                    failure = ended
                if failure is None and proto.state is PROTOCOL_CLOSED and not session.outgoing:
                    failure = ConnectionLost("closed")
                if failure is not None:
                    if session.status is CLOSING:
                        return None
                    if isinstance(failure, ConnectionLost):
                        failure = while_writing(failure, len(session.outgoing))
                    session.saw_end(failure)
                    return failure

    @staticmethod
    def _last_words(sock: socket.socket) -> bytes:
        """What the peer sent before the connection failed, read without waiting (the
        socket is non-blocking), at most ``_LAST_WORDS`` bytes."""
        chunks: list[bytes] = []
        size = 0
        with contextlib.suppress(OSError, _ssl.SSLError):
            while size < _LAST_WORDS:
                chunk = sock.recv(_RECV_SIZE)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        return b"".join(chunks)

    def _heard(self, data: bytes) -> StompError | None:
        """The failure the frames in ``data`` stand for (a broker's ERROR), if any; the
        frames before it are routed as usual. Under the lock."""
        if not data:
            return None
        session = self.session
        now = time.monotonic()
        try:
            session.receive(data, now)
            pumped = session.pump(now)
        except StompError as exc:  # what came was no frame: the failure stays the write's
            log.debug("after a failed write, the peer's last bytes were unusable: %s", exc)
            return None
        if pumped.woke:
            self.cond.notify_all()
        return pumped.failure

    def _recv(self, sock: socket.socket) -> bytes | None:
        try:
            return sock.recv(_RECV_SIZE)
        except _TLS_RETRY:
            return None

    def _send(self, sock: socket.socket) -> None:
        with self.cond:
            out = self.session.outgoing
            # One copy, not two (a slice, then its bytes) when all of it fits.
            chunk = bytes(out) if len(out) <= _SEND_CHUNK else bytes(out[:_SEND_CHUNK])
            self._writing = True  # no write-through until this chunk is out
        try:
            sent = sock.send(chunk)
        except _TLS_RETRY:
            sent = 0
        except BaseException:
            with self.cond:
                self._writing = False  # the socket failed: the pump ends its connection
            raise
        with self.cond:
            self._writing = False  # in the same turn as the delete: nothing goes twice
            out = self.session.outgoing
            del out[:sent]
            if sent:
                self.session.wrote(time.monotonic())
            if len(out) <= MAX_OUTGOING:
                self.cond.notify_all()

    def _reconnect(self, lost: StompError) -> bool:
        """After a loss: reconnect if the policy says so; return whether to go on."""
        session = self.session
        with self.cond:
            self._close_socket()
            attempts = session.lost(lost)
            self.cond.notify_all()
            if attempts is None:
                return False
        established = self._attempt(attempts)
        with self.cond:
            status: Status = session.status  # a local: another thread changes it
            if isinstance(established, Attempts):
                if status is RECONNECTING:
                    session.give_up(established)
                    self._close_socket()
                    self.cond.notify_all()
                return False
            if status is not RECONNECTING:  # close() came meanwhile
                established[0].close()
                return False
        self._install(*established)
        return True
