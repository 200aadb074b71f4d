"""The blocking transport's I/O: the socket, the thread that serves it, and the lock.

One I/O thread per connection serves the socket. It waits in its watch
(:mod:`stompy._transports.watch`: ``epoll`` or ``kqueue`` where there is one, no limit
on descriptor numbers) for bytes from the broker, for bytes to write, for a wake-up
from a user thread, or for the core's next heart-beat deadline, whichever comes first.
A call runs its steps on the engine under the lock (:meth:`IOThread.run`; a send that
waits for nothing, :meth:`IOThread.send_now`), which appends the encoded bytes to
the outgoing buffer. Before the caller waits, or when the connection is at rest, the caller's
thread writes that buffer to a plain socket itself, under the lock, if nobody is
writing (:meth:`IOThread.push`: a round trip then costs no hand-off); otherwise, and
for whatever the socket does not take at once, it wakes the I/O thread, which writes
whatever has accumulated in one go (many frames, one ``send``). Every byte leaves
from the start of the one buffer, by one writer at a time, so frames can never
interleave. A caller that waits (a receipt, a reply, a message) reads the socket
itself meanwhile (:meth:`IOThread.wait`, the read-through): the answer then costs no
hand-off back either. Where the I/O thread's watch can be changed from another thread
(``epoll``), the I/O thread stands aside meanwhile, so that an answer wakes one thread,
and stays aside after the caller returned until it looks again (20 ms, longer while
callers keep reading through; at once when another thread waits on the condition), so a
run of round trips changes its watch not at all; elsewhere both may read. Both read and
route under the lock, so the bytes are routed in the order they came; only the I/O
thread judges a failed socket.

While the engine keeps a backlog (a subscription's inbox is full) the thread stops
reading the socket, so TCP pushes back on the broker instead of memory growing; it
still sends heart-beats, and bytes waiting in the socket count as a sign of life, so a
slow consumer is not mistaken for a dead broker (:func:`bytes_waiting` looks, for the
engine's :meth:`~stompy._engine.engine.Engine.tick`). Every decision (reconnecting, routing,
receipts, the goodbye) is the engine's; this module moves bytes, waits and wakes.
"""

from __future__ import annotations

import contextlib
import functools
import math
import select
import socket
import ssl as _ssl
import threading
import time
from collections.abc import Callable, Mapping
from typing import Final, Generic, TypeVar

from stompy._engine import lifecycle
from stompy._engine.callbacks import call_hook, call_plainly, hooks_over
from stompy._engine.calls import Call, Running, Steps, Waiting
from stompy._engine.engine import MAX_OUTGOING, Engine, log
from stompy._engine.failures import transport_failed
from stompy._engine.inbox import Inbox
from stompy._engine.message import MessageBase
from stompy._engine.state import CLOSED, CLOSING, CONNECTED, PROTOCOL_CLOSED, Status
from stompy._transports.watch import READ, WRITE, Watch, watch_for
from stompy.errors import ConnectionLost, StompError

__all__ = ("IOThread", "bytes_waiting")

M = TypeVar("M", bound=MessageBase)
T = TypeVar("T")

#: Under glibc's mmap threshold: see :data:`stompy._transports.rawsocket.RECV_SIZE`.
_RECV_SIZE: Final = 64 * 1024
#: At most this much is read after a failed write, for the ERROR that says why.
_LAST_WORDS: Final = 1024 * 1024
_SEND_CHUNK: Final = 1024 * 1024
#: The least time an establishing step is given (its deadline is checked before it).
_SOON: Final = 0.001
_TLS_RETRY: Final = (BlockingIOError, _ssl.SSLWantReadError, _ssl.SSLWantWriteError)
#: A caller may read the socket while it waits (see IOThread.wait): not on Windows.
_READ_THROUGH: Final = hasattr(select, "poll")
#: The waits for what comes from the socket, which a caller may read itself.
_RECEIPT: Final = Waiting.RECEIPT
_REPLY: Final = Waiting.REPLY
#: While a caller reads through, or did since its last look, the I/O thread standing
#: aside looks this soon whether the reading is still a caller's; the same caller
#: still reading, it looks half as often each time, down to once per :data:`_LOOK_LAST`.
_LOOK_FIRST: Final = 0.02
_LOOK_LAST: Final = 0.5
#: A read that brought bytes less than this many seconds (and the gather) before the
#: socket turned readable again means a stream flows: only then does
#: :attr:`IOThread.gather` wait.
_FLOWING: Final = 0.01


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
    """Serves one engine: establishes its connections and runs the I/O thread.

    :attr:`cond` (over :attr:`lock`) guards the engine; it is notified, with
    :meth:`notify_all`, whenever something a waiting call may be waiting for happened.
    A call waits with :meth:`wait`, which may read the socket itself. The lock is
    taken as ``with self.lock``, the same as ``with self.cond`` but without the two
    Python calls of ``Condition.__enter__`` and ``__exit__``.
    """

    def __init__(self, engine: Engine[M]) -> None:
        self.engine = engine
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.thread: threading.Thread | None = None
        self._ident: int | None = None  # the I/O thread's, once it runs
        self._hooks: threading.Thread | None = None  # runs the lifecycle hooks
        #: What the hooks thread waits on (over :attr:`lock`), not :attr:`cond`: a
        #: waiter there would be woken by every answer, and would make a reading
        #: caller give the reading back to the I/O thread (see :meth:`wait`).
        self._hooks_cond = threading.Condition(self.lock)
        self._sock: socket.socket | None = None
        #: The socket being established (made by the lifecycle's ``Open`` step).
        self._pending: socket.socket | None = None
        #: Set by :meth:`_cut_short`: no connection is wanted any more.
        self._cut = False
        # Made at start(): a user thread writes a byte to wake the I/O thread.
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self.wake_sent = False
        #: The socket a user thread may write to itself (see :meth:`push`): the current
        #: one when it is plain TCP; ``None`` for TLS, whose object must not be read
        #: and written by two threads at once, and between connections.
        self._direct: socket.socket | None = None
        #: The socket a caller may read itself while it waits (see :meth:`wait`): the
        #: current one when it is plain TCP carrying no WebSocket, where ``poll`` is;
        #: else ``None``. Set with :attr:`_direct`, as what it depends on changes
        #: only with the connection.
        self._through: socket.socket | None = None
        #: The I/O thread holds bytes taken from the outgoing buffer and not yet written.
        self._writing = False
        #: Nothing was written through since a caller last waited or bytes last came:
        #: the next send may write through (see :meth:`push`).
        self.at_rest = True
        #: A caller waits in :meth:`wait` for the socket, the lock released: a notify
        #: wakes it through :attr:`_poke_w`.
        self.reading = False
        #: The reading caller was woken through :attr:`_poke_w` (a notify).
        self.poked = False
        # Made at start(): a notify wakes the reading caller through it.
        self._poke_r: socket.socket | None = None
        self._poke_w: socket.socket | None = None
        self._poller: select.poll | None = None
        self._polled: socket.socket | None = None  # the socket :attr:`_poller` watches
        self._polled_fd = -1  # its descriptor
        #: What a caller read and leaves to the I/O thread to judge: the end of the
        #: stream (``b""``) or the socket's error.
        self._handed: bytes | OSError | None = None
        self._abandoned = False
        #: The I/O thread's watch over the current socket, while it serves one.
        self._watch: Watch | None = None
        #: The I/O thread stands aside (does not watch for reading) while a caller
        #: reads in :meth:`wait`, and after, until it looks again (see :meth:`wait`);
        #: only with a :attr:`Watch.shared` watch.
        self._aside = False
        #: How many read-throughs began (the I/O thread tells a new one from a long one).
        self._reads = 0
        #: The I/O thread may sleep longer than :data:`_LOOK_LAST`: a caller standing it
        #: aside wakes it, so that it looks again in time.
        self._unbounded = True
        #: Seconds the I/O thread lets bytes gather in the socket before it reads them,
        #: once it turned readable while a stream flows (:data:`_FLOWING`); 0, the
        #: default, reads at once. Internal, asked for by the Spark source's
        #: connections only (``Connection._gather_reads``): under a steady stream
        #: a broker's bytes come a few frames at a time (RabbitMQ's about 3 KB), and
        #: each read costs a wake-up and a turn of the lock whatever it brings. No
        #: frame waits longer than this for it (a heart-beat, a receipt, an ERROR
        #: included), and the first bytes after a pause (longer than the gather and
        #: :data:`_FLOWING`) do not wait at all.
        self.gather = 0.0
        #: When the I/O thread last read bytes (``time.monotonic()``).
        self._read_at = -math.inf

    # -- for user threads ----------------------------------------------------------------

    def run(self, steps: Steps[T] | Running[T]) -> T:
        """Run a call's steps (or a call already made a :class:`Running`, such as a
        request's :class:`Asking`) under the lock, waiting as they ask."""
        running = steps if isinstance(steps, Running) else Running(steps)
        with self.lock:  # the condition's lock, entered at C speed
            try:
                wait = running.resume()
                while wait is not None:
                    self.push(waiting=True)
                    timeout = wait.deadline - time.monotonic()
                    what = wait.what
                    if what is _RECEIPT or what is _REPLY:  # what the socket brings
                        self.wait(timeout if timeout > 0.0 else 0.0)
                    else:  # room, a change: the I/O thread's doing, not the socket's
                        self.cond.wait(timeout if timeout > 0.0 else 0.0)
                    wait = running.resume(time.monotonic())
            except BaseException:
                # An interrupted wait: the call forgets its receipt. Only then: closing
                # steps that ended costs a compiled generator a GeneratorExit thrown in.
                running.close()
                raise
            finally:
                if self.engine.outgoing:  # push()'s first look, without the call
                    self.push()  # what was queued before an error goes out too
        return running.result

    def wait(self, timeout: float | None) -> None:
        """Under the lock, as ``cond.wait(timeout)``: wait until notified or ``timeout``
        seconds passed, but read the socket meanwhile when this caller can (the
        read-through), so that an answer costs no hand-off from the I/O thread.

        It can when the connection is up on a plain socket (TLS stays on the I/O
        thread), no other caller reads and no backlog holds reading. It then waits
        for the socket, or a notify (:meth:`notify_all` pokes it while
        :attr:`reading`), with the lock released; once the socket is readable, it
        reads and routes what came under the lock. Meanwhile the I/O thread stands
        aside: the caller takes the reading out of its watch, without a wake-up (but
        of an I/O thread asleep with no bound), and leaves it out as it returns, so
        that a caller that waits again soon (a loop of round trips) changes nothing:
        the I/O thread takes the reading back itself once it finds no caller reading,
        every :data:`_LOOK_FIRST` seconds or so while callers read through (less often
        while one caller waits long), and the caller puts it back at once when other
        threads wait on the condition, for what the I/O thread reads. Meanwhile a
        peer's end of stream or a hang-up still wakes the I/O thread at once; bytes
        nobody waits for are read up to a look later. Where the watch cannot be
        changed so (no ``epoll``), the I/O thread, woken by the same bytes, reads
        under the lock too: whichever comes first reads and routes, the other finds
        nothing. Either way the bytes are routed in the order they came.
        Heart-beats, writes and back-pressure stay the I/O thread's. Only it judges
        a failed socket: an end of stream or an error read here is handed to it
        (:attr:`_handed`), and a failure the routing found ends the connection
        through it."""
        sock = self._through
        engine = self.engine
        if (
            sock is None
            or self.reading
            or self._handed is not None
            or engine.status is not CONNECTED
            or engine.ending is not None
            or engine.delivery.backlog  # (Engine.paused, without the call)
            or threading.get_ident() == self._ident
        ):
            self.cond.wait(timeout)
            return
        if self._polled is not sock:
            self._poll_on(sock)
        poller = self._poller
        assert poller is not None
        lock = self.lock
        self.reading = True
        self._reads += 1
        if not self._aside:
            self._stand_aside()
        try:
            saved = lock._release_save()  # type: ignore[attr-defined]  # as Condition.wait
            try:
                ready = poller.poll(-1 if timeout is None else math.ceil(timeout * 1000))
            finally:
                lock._acquire_restore(saved)  # type: ignore[attr-defined]
                self.reading = False
            if self.poked:
                self.poked = False
                with contextlib.suppress(OSError):
                    self._poke_r.recv(4096)  # type: ignore[union-attr]
            if ready and self._through is sock:
                fd = self._polled_fd
                for each, _ in ready:
                    if each == fd:
                        self._read_here(sock)
                        break
        finally:
            if self._aside and self.cond._waiters:  # type: ignore[attr-defined]
                # Others wait for what the I/O thread reads: it reads again at once.
                # After the read, not before: bytes still unread wake it then.
                self._aside = False
                watch = self._watch  # (None once the I/O thread is done with the socket)
                if watch is not None:
                    try:
                        watch.stand_aside(False)
                    except (OSError, ValueError):
                        self.wake()  # to make its own change, or judge the socket

    def _poll_on(self, sock: socket.socket) -> None:
        """Make the poller a reading caller waits in: for ``sock`` and the poke."""
        assert self._poke_r is not None
        poller = self._poller = select.poll()
        poller.register(sock, select.POLLIN)
        poller.register(self._poke_r, select.POLLIN)
        self._polled = sock
        self._polled_fd = sock.fileno()

    def _stand_aside(self) -> None:
        """A caller begins to read through (under the lock): the I/O thread stops
        watching for reading, where its watch can be changed from here (see :meth:`wait`)."""
        watch = self._watch
        if watch is None or not watch.shared:
            return
        self._aside = True
        try:
            watch.stand_aside(True)
        except (OSError, ValueError):
            self._aside = False
            self.wake()
        else:
            if self._unbounded:
                self.wake()  # to look again in time: this caller may leave it aside

    def _read_here(self, sock: socket.socket) -> None:
        """The read-through, under the lock: read what came and route it."""
        engine = self.engine
        if engine.status is not CONNECTED or engine.ending is not None or engine.delivery.backlog:
            return  # changed while the lock was released: the I/O thread's to read
        try:
            data = sock.recv(_RECV_SIZE)
        except BlockingIOError:
            return
        except OSError as exc:
            self._hand_over(exc)
            return
        if not data:
            self._hand_over(data)
            return
        now = time.monotonic()
        proto = engine.proto
        assert proto is not None  # connected
        # Engine.receive's work: no WebSocket here (see wait), so no close to report.
        proto.receive_data(data, now)
        pumped = engine.pump(now)
        self.at_rest = True
        if pumped.woke:
            self.notify_all()
        failure = pumped.failure
        if failure is not None or proto.state is PROTOCOL_CLOSED:
            failure = lifecycle.why_ended(engine, failure, len(engine.outgoing))
        if failure is not None:
            engine.saw_end(failure)  # the I/O thread ends the connection with it
            self.wake()
        elif engine.outgoing and not self.wake_sent:
            self.wake()  # for an answer the pump queued (a heart-beat's, say)

    def _hand_over(self, ended: bytes | OSError) -> None:
        """What :meth:`_read_here` read ends the connection: the I/O thread judges it,
        as it always did."""
        self._handed = ended
        self.wake()

    def notify_all(self) -> None:
        """Under the lock: wake every thread waiting on :attr:`cond`, and the caller
        reading in :meth:`wait` (through :attr:`_poke_w`), which waits on the socket
        instead. Always this, never ``cond.notify_all()`` alone, which would miss it."""
        cond = self.cond
        if cond._waiters:  # type: ignore[attr-defined]  # Condition's: nobody, mostly
            cond.notify_all()
        if self.reading and not self.poked:
            self.poke_reader()
        hooks = self._hooks_cond
        if hooks._waiters:  # type: ignore[attr-defined]  # the hooks thread, idle
            engine = self.engine
            if engine.notices or engine.status is CLOSED:  # a hook to call, or the end
                hooks.notify()

    def poke_reader(self) -> None:
        """Wake the caller reading in :meth:`wait` (a notify came; under the lock)."""
        self.poked = True
        if self._poke_w is not None:
            with contextlib.suppress(OSError):
                self._poke_w.send(b"\0")

    def send_now(
        self,
        destination: object,
        body: object,
        headers: Mapping[str, str] | None,
        content_type: object,
    ) -> bool:
        """A client's send that waits for nothing, if the engine takes it at once
        (:meth:`Engine.send_now`, under the lock): queued, then written now
        (:meth:`push`) unless the I/O thread was woken already (in a burst) and
        writes it; past :data:`MAX_OUTGOING`, wait for room as a call's steps do.
        ``False``: nothing was queued, the client takes the long way (a call). Here,
        not in the client, so that it is compiled with the rest of this module."""
        with self.lock:  # the condition's lock, entered at C speed
            engine = self.engine
            if not engine.send_now(destination, body, headers, content_type, time.monotonic):
                return False
            if not self.wake_sent:
                self.push()
            if (
                len(engine.outgoing) > MAX_OUTGOING
                and threading.current_thread() is not self.thread
            ):
                self.run(Call(engine, time.monotonic()).flush())
            return True

    def take(self, inbox: Inbox[M], timeout: float | None, ended: Callable[[], bool]) -> M | None:
        """The next message of ``inbox``, waiting up to ``timeout`` seconds (``None``:
        no limit) under the lock (:meth:`wait`: the caller reads the socket itself
        meanwhile); ``None`` on timeout, or once ``ended()`` (asked under the lock,
        the inbox empty, before each wait; it may raise) says no more will come. A
        subscription's ``get()``; here, not in the client, so that it is compiled with
        the rest of this module."""
        with self.lock:
            message = inbox.take()  # (another thread's get() may take it first)
            if message is None:
                engine = self.engine
                deadline = None if timeout is None else time.monotonic() + timeout
                remaining = timeout  # the first wait's: the clock was just read
                while message is None:
                    if ended():
                        return None
                    if remaining is not None and remaining <= 0.0:
                        return None
                    if engine.outgoing:  # what this thread sent goes out before it sleeps
                        self.push(waiting=True)
                    else:
                        self.at_rest = True  # push(waiting=True)'s work, without the call
                    self.wait(remaining)
                    message = inbox.take()
                    if message is None and deadline is not None:
                        remaining = deadline - time.monotonic()
            return message

    def push(self, *, waiting: bool = False) -> None:
        """Under the lock, after something was queued: write the outgoing buffer from
        the caller's thread (the write-through) when nobody writes now, and wake the
        I/O thread for what the socket does not take. ``waiting``: the caller waits
        next (for a receipt, a reply, a message).

        The frames stay in order: every byte goes through :attr:`Engine.outgoing`,
        from its start, under the lock, and only when the I/O thread has none of it in
        hand (:attr:`_writing`) and was not woken to write it. What the socket would
        not take at once (it would block), or refused (an error), stays queued for the
        I/O thread, which waits for the socket and judges a failure as it always did.

        A send that waits for nothing writes through only when the connection is at
        rest (:attr:`at_rest`): the first of a burst goes at once, and the I/O thread
        writes the rest in one go, as a system call per frame would halve a
        publisher's rate. So a connection at rest costs a send no hand-off to the I/O
        thread (two thread switches and four system calls more)."""
        engine = self.engine
        out = engine.outgoing
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
                engine.wrote(time.monotonic())
                if not out:
                    return
        self.wake()

    def kick(self) -> None:
        """Wake the I/O thread if there is something to write and it does not know."""
        if self.engine.outgoing and not self.wake_sent:
            self.wake()

    def wake(self) -> None:
        if not self.wake_sent and self._wake_w is not None:
            self.wake_sent = True
            with contextlib.suppress(OSError):
                self._wake_w.send(b"\0")

    def connect(self) -> None:
        """Establish the first connection (raises why not) and start the I/O thread."""
        self._wake_r, self._wake_w = socket.socketpair()
        self._poke_r, self._poke_w = socket.socketpair()
        for each in (self._wake_r, self._wake_w, self._poke_r, self._poke_w):
            each.setblocking(False)
        life = lifecycle.Lifecycle(self.engine)
        try:
            serve = self._run_steps(life)
        except BaseException:
            with self.lock:
                self._release()
            raise
        assert serve is not None  # the first connection's life ends only by raising
        thread = threading.Thread(
            target=self._main, args=(life,), name=f"stompy-io-{id(self):x}", daemon=True
        )
        self.thread = thread
        thread.start()
        if self.engine.options.hooked:
            hooks = threading.Thread(
                target=self._run_hooks, name=f"stompy-hooks-{id(self):x}", daemon=True
            )
            self._hooks = hooks
            hooks.start()

    def stop(self, timeout: float) -> None:
        """After the engine closed: let the thread end, close the sockets."""
        with self.lock:
            self.notify_all()
            self.wake()
        self._cut_short()
        for thread in (self.thread, self._hooks):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout)
        with self.lock:
            self._release()

    def abandon(self) -> None:
        """The connection was never closed and is gone (collected): end the engine
        without a goodbye and without waiting; the thread closes the sockets as it ends.
        Safe from any thread, the I/O thread included."""
        with self.lock:
            self._abandoned = True
            self.engine.closed()
            self.notify_all()
            self.wake()
            self._cut_short()
            thread = self.thread
            if thread is None or not thread.is_alive():
                self._release()

    def _run_hooks(self) -> None:
        """The hooks thread: make the engine's hook calls in order, outside the lock,
        until the engine is over and every call was made."""
        engine, cond = self.engine, self._hooks_cond
        while True:
            with cond:
                while not engine.notices:
                    if hooks_over(engine):
                        return
                    cond.wait()
                notice = engine.notices.popleft()
            call_plainly(call_hook(notice), notice.what, notice.argument)

    def _release(self) -> None:
        """Close the socket and the wake-up pair (under the lock)."""
        self._close_socket()
        for wake in (self._wake_r, self._wake_w, self._poke_r, self._poke_w):
            if wake is not None:
                wake.close()

    # -- the lifecycle's steps -----------------------------------------------------------

    def _run_steps(
        self, life: lifecycle.Lifecycle[M], result: object = None
    ) -> lifecycle.Serve | None:
        """Resume ``life`` with ``result`` and run its steps, each I/O outside the lock,
        until it asks to serve a connection (returned, installed) or is over (``None``)."""
        step = self._next_step(life, result)
        try:
            while step is not None and not isinstance(step, lifecycle.Serve):
                try:
                    result = self._step(step)
                except OSError as exc:  # ssl.SSLError and socket.timeout are too
                    step = self._next_step(life, failed=lifecycle.link_error(exc))
                else:
                    step = self._next_step(life, result)
        except BaseException:
            self._drop()
            raise
        if step is not None:
            self._install()
        return step

    def _next_step(
        self,
        life: lifecycle.Lifecycle[M],
        result: object = None,
        failed: lifecycle.LinkError | None = None,
    ) -> lifecycle.Step | None:
        """The step after one that gave ``result`` (or ``failed``), the engine's turn
        under the lock; a pause is waited out in that same turn, so that the notify of a
        close() that comes meanwhile cannot be missed."""
        cond = self.cond
        with cond:
            now = time.monotonic()
            step = life.resume(now, result) if failed is None else life.failed(now, failed)
            while isinstance(step, lifecycle.Pause):
                cond.wait(step.deadline - now)
                now = time.monotonic()
                step = life.resume(now)
            return step

    def _step(self, step: lifecycle.Step) -> object:
        """Run one of the lifecycle's I/O steps; what it gave."""
        sock = self._pending
        if isinstance(step, lifecycle.Read):
            assert sock is not None
            sock.settimeout(max(_SOON, step.deadline - time.monotonic()))
            return sock.recv(_RECV_SIZE)
        if isinstance(step, lifecycle.Write):
            assert sock is not None
            sock.settimeout(max(_SOON, step.deadline - time.monotonic()))
            sock.sendall(step.data)
        elif isinstance(step, lifecycle.Open):
            self._open(step)
        elif step is lifecycle.DROP:
            self._drop()
        else:
            with self.lock:
                if step is lifecycle.HANG_UP:
                    self._close_socket()
                self.notify_all()  # CHANGED, and the hang-up changed the socket
        return None

    def _open(self, step: lifecycle.Open) -> None:
        endpoint = step.endpoint
        sock = self._connect_tcp(endpoint.host, endpoint.port, step.deadline)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if step.tls is not None:
            self._pending = step.tls.wrap_socket(sock, server_hostname=endpoint.host)

    def _connect_tcp(self, host: str, port: int, deadline: float) -> socket.socket:
        """:func:`socket.create_connection`'s work (each address in turn, all by
        ``deadline``, the last error raised), each socket :attr:`_pending` while it
        connects: a close() then cuts a connect that hangs short (:meth:`_cut_short`),
        as the rest of the establishing, rather than leave it to the connect timeout."""
        errors: list[OSError] = []
        for family, kind, proto, _, address in socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM
        ):
            sock = self._pending = socket.socket(family, kind, proto)
            try:
                if self._cut:  # after the assignment: see _cut_short
                    raise OSError("the connection was closed while connecting")
                sock.settimeout(max(_SOON, deadline - time.monotonic()))
                sock.connect(address)
            except OSError as exc:
                self._pending = None
                sock.close()
                errors.append(exc)
                if self._cut:
                    break
            else:
                return sock
        raise errors[-1] if errors else OSError(f"no address found for {host}")

    def _drop(self) -> None:
        """Close the socket being established, if any."""
        sock = self._pending
        self._pending = None
        if sock is not None:
            sock.close()

    def _cut_short(self) -> None:
        """From another thread: end an establishing under way (its socket fails, a TCP
        connect included)."""
        self._cut = True  # before reading _pending, which _connect_tcp sets before reading this
        sock = self._pending
        if sock is not None:
            with contextlib.suppress(OSError):
                # The plain socket's own: a TLS object must not be touched by two threads.
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def _install(self) -> None:
        """The socket just established becomes the current one."""
        with self.lock:
            sock = self._pending
            assert sock is not None
            self._pending = None
            sock.setblocking(False)
            self._sock = sock
            self._direct = None if isinstance(sock, _ssl.SSLSocket) else sock
            # (The engine installed this connection, its WebSocket included, before.)
            plain = _READ_THROUGH and self.engine.ws is None
            self._through = self._direct if plain else None
            self.kick()
            self.notify_all()

    def _close_socket(self) -> None:
        """Close the current socket, saying the engine's farewell first (under the lock)."""
        sock = self._sock
        self._sock = None
        self._direct = self._through = None
        if sock is not None:
            bye = lifecycle.farewell(self.engine)
            if bye:
                with contextlib.suppress(OSError):  # best effort: the socket is closing
                    sock.send(bye)
            with contextlib.suppress(OSError):
                sock.close()

    # -- the I/O thread --------------------------------------------------------------------

    def _main(self, life: lifecycle.Lifecycle[M]) -> None:
        self._ident = threading.get_ident()
        engine = self.engine
        try:
            while self._run_steps(life, self._serve()) is not None:
                pass
        except BaseException:  # a bug: never leave waiters hanging
            log.exception("stompy I/O thread failed")
            with self.lock:
                engine.fail(ConnectionLost("the I/O thread failed"))
                self._close_socket()
            raise
        finally:
            with self.lock:
                engine.serving = False
                self.notify_all()
                if self._abandoned:
                    self._release()

    def _serve(self) -> StompError | None:
        """Pump one socket until it ends; return why it ended (``None``: closed by us)."""
        assert self._wake_r is not None
        assert self._sock is not None
        watch = watch_for(self._wake_r, self._sock)
        try:
            with self.lock:
                self._watch = watch
                self._aside = False
            return self._pump(watch)
        finally:
            with self.lock:
                self._watch = None
                watch.close()

    def _pump(self, watch: Watch) -> StompError | None:
        engine = self.engine
        look = _LOOK_FIRST  # (see wait())
        seen = self._reads
        while True:
            with self.lock:
                if engine.status is CLOSED:
                    return None
                # A local, as below: compiled, a narrowed engine.ending would be taken
                # for None there, where another thread may have set it since.
                found = engine.ending
                if found is not None:  # a call found the broker not reading
                    return found
                sock, proto = self._sock, engine.proto
                assert sock is not None
                assert proto is not None
                # Room a consumer made since the last pump: its wake-up may have been
                # folded into one that was already read, so look now, under the lock.
                if engine.delivery.backlog and engine.drain_backlog(time.monotonic()):
                    self.notify_all()  # (looked at first: a flowing stream has none)
                paused = engine.paused
                deadline = engine.next_deadline(time.monotonic())
                self.wake_sent = False
                wanted = (0 if paused else READ) | (WRITE if engine.outgoing else 0)
                bound: float | None = None
                if watch.shared:
                    if self._aside and not self.reading:
                        self._aside = False  # the caller that stood it aside returned
                    reads = self._reads
                    if reads != seen:  # callers read through: look again soon
                        look, seen, bound = _LOOK_FIRST, reads, _LOOK_FIRST
                    elif self.reading:  # one caller waits long: look less often
                        look = bound = min(2.0 * look, _LOOK_LAST)
                try:
                    watch.watch(wanted)
                    if watch.shared:  # also after a failed change by a caller (see wait)
                        watch.stand_aside(self._aside)
                except (OSError, ValueError) as exc:  # ValueError: the socket was closed
                    return self._broken(sock, OSError(f"cannot watch the socket: {exc}"))
                # At most an hour: a deadline weeks away (a long heart-beat times its
                # tolerance) would overflow the selector; the loop looks again.
                timeout = (
                    None if deadline is None else min(3600.0, max(0.0, deadline - time.monotonic()))
                )
                if bound is not None and (timeout is None or bound < timeout):
                    timeout = bound
                self._unbounded = timeout is None or timeout > _LOOK_LAST
            pending_tls = isinstance(sock, _ssl.SSLSocket) and not paused and sock.pending() > 0
            data: bytes | None = None
            try:
                # A hang-up is reported as both events: only what is wanted is done.
                ready = wanted if pending_tls else watch.wait(timeout) & wanted
                if ready & WRITE:
                    self._send(sock)
            except (OSError, _ssl.SSLError) as exc:
                return self._broken(sock, exc)
            gather = self.gather
            if (
                gather > 0.0
                and ready & READ
                and time.monotonic() - self._read_at < _FLOWING + gather
            ):
                time.sleep(gather)  # the lock released: let more of the stream come
            now = time.monotonic()
            with self.lock:
                status: Status = engine.status  # a local: another thread changes it
                if status is CLOSED:
                    return None
                ending: StompError | None = engine.ending  # a local: a caller sets it
                if ending is not None:  # a reading caller saw the connection end
                    return ending
                # Read under the lock, in the same turn as the routing: a caller that
                # reads (wait()) does too, so the bytes are routed in the order read,
                # by whichever thread came first (the other finds nothing to read).
                if self._handed is not None or ready & READ:
                    try:
                        data = self._read(sock)
                    except (OSError, _ssl.SSLError) as exc:
                        return self._broken(sock, exc)
                ended = None
                if data is not None:
                    if data:
                        self._read_at = now
                    ended = engine.receive(data, now)
                    self.at_rest = True  # an answer came: the next send may write through
                if deadline is not None and now >= deadline:
                    pumped = engine.tick(now, functools.partial(bytes_waiting, sock))
                else:
                    pumped = engine.pump(now)
                if pumped.woke:
                    self.notify_all()
                failure = pumped.failure
                if failure is None and ended is not None:
                    # Frames that came before the close were handled; answer it.
                    with contextlib.suppress(OSError):
                        self._send(sock)
                    failure = ended
                if failure is not None or proto.state is PROTOCOL_CLOSED:  # else it goes on
                    failure = lifecycle.why_ended(engine, failure, len(engine.outgoing))
                if failure is not None:
                    if engine.status is CLOSING:
                        return None
                    engine.saw_end(failure)
                    return failure

    def _broken(self, sock: socket.socket, exc: OSError) -> StompError | None:
        """The socket failed with ``exc``: why the connection ended (``None``: closed
        by us)."""
        engine = self.engine
        with self.lock:
            # A broker that refuses a frame (one too large, say) sends an ERROR and
            # closes while the frame is still being written: the write fails first,
            # and the ERROR, which says why, is still to be read.
            last_words = self._last_words(sock)
            if engine.status in (CLOSING, CLOSED):
                return None
            error = self._heard(last_words) or transport_failed(
                engine.endpoint, exc, len(engine.outgoing)
            )
            engine.saw_end(error)
            return error

    def _read(self, sock: socket.socket) -> bytes | None:
        """What there is to read (under the lock): first what a caller handed over."""
        handed = self._handed
        if handed is None:
            return self._recv(sock)
        self._handed = None
        if isinstance(handed, OSError):
            raise handed
        return handed

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
        engine = self.engine
        now = time.monotonic()
        try:
            engine.receive(data, now)
            pumped = engine.pump(now)
        except StompError as exc:  # what came was no frame: the failure stays the write's
            log.debug("after a failed write, the peer's last bytes were unusable: %s", exc)
            return None
        if pumped.woke:
            self.notify_all()
        return pumped.failure

    def _recv(self, sock: socket.socket) -> bytes | None:
        try:
            return sock.recv(_RECV_SIZE)
        except _TLS_RETRY:
            return None

    def _send(self, sock: socket.socket) -> None:
        with self.lock:
            out = self.engine.outgoing
            # One copy, not two (a slice, then its bytes) when all of it fits.
            chunk = bytes(out) if len(out) <= _SEND_CHUNK else bytes(out[:_SEND_CHUNK])
            self._writing = True  # no write-through until this chunk is out
        try:
            sent = sock.send(chunk)
        except _TLS_RETRY:
            sent = 0
        except BaseException:
            with self.lock:
                self._writing = False  # the socket failed: the pump ends its connection
            raise
        with self.lock:
            self._writing = False  # in the same turn as the delete: nothing goes twice
            out = self.engine.outgoing
            del out[:sent]
            if sent:
                self.engine.wrote(time.monotonic())
            if len(out) <= MAX_OUTGOING:
                self.notify_all()
