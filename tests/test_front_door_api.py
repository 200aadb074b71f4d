"""The front door, walked: every public call of ``stompy`` and ``stompy.testing``, listed
from their ``__all__`` (so a new call is walked without an edit here), called with a
keyword it does not take and with arguments of the wrong type.

The answer must be a :class:`TypeError` (naming the keyword, for an unknown one) or a
:class:`~stompy.StompError`: never an ``AttributeError`` or another error from inside,
never a hang (every call is bounded), never a silent success. The blocking objects are
walked against a broker in a thread, the async ones on asyncio and on trio (through a
blocking portal, so that hypothesis drives them all from plain tests).

Left out of the wrong-type walk, on purpose: flags (``bool``: any value's truth is
taken, as Python's own flags take it), parameters typed ``Any`` or ``object``, an empty
value where the default is ``None`` (taken as "none"), the constructors of records (a
dataclass or an exception keeps what it is given; the call that takes one checks it)
and of what the library hands out (:data:`HANDED_OUT`). A class with methods needs a way
to make one in :data:`CORE_OBJECTS` or a world's ``instance()``, and a required parameter
a valid value in :data:`VALID`: the walk fails, saying which, when one is missing.
Defects not fixed yet are strict xfails (:data:`DEFECTS`); none is left.

A parameter that takes a container (``Iterable[Outgoing]``, ``str | Sequence[str]``, a
``Mapping``'s values, a fixed ``tuple[int, int]``) is walked a second time with a
container of the right type holding an item of a wrong one (:func:`items_of`): a plain
tuple in ``send_many``, ``None`` among the URLs. The same answer is asked of it.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import enum
import functools
import inspect
import re
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, is_typeddict

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import stompy
import stompy.protocol
import stompy.testing
from stompy import events
from stompy.errors import StompError

#: Seconds a call may take before it counts as a hang.
HANG = 5.0

#: A keyword no call takes.
BOGUS = "no_such_option"

# Few examples a parameter (there are hundreds), the same ones every run: a known
# defect's xfail is strict, so it must fail each time until fixed.
settings.register_profile(
    "front-door",
    max_examples=6,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.generate],  # no shrinking: the failure's message names the value
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,
    ],
)
WALK = settings.get_profile("front-door")


# -- what is walked -----------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One public call: a function, a class (its constructor) or a method of a class."""

    name: str
    function: Callable[..., Any]
    #: The class of a method (``None`` for a function or a constructor).
    owner: type | None = None

    @property
    def is_async(self) -> bool:
        """Whether it belongs to the async client (walked on asyncio and on trio)."""
        wrapped = getattr(self.function, "__wrapped__", None)
        return (
            self.name.startswith("Async")
            or inspect.iscoroutinefunction(self.function)
            or inspect.isasyncgenfunction(wrapped)
        )

    @property
    def is_bound(self) -> bool:
        """A classmethod or a staticmethod: called on the class, not on an instance."""
        if self.owner is None:
            return False
        raw = inspect.getattr_static(self.owner, self.name.rpartition(".")[2])
        return isinstance(raw, (classmethod, staticmethod))

    @property
    def makes(self) -> str | None:
        """The class a constructor (or a classmethod) makes."""
        if self.owner is None:
            return self.name if inspect.isclass(self.function) else None
        return self.owner.__qualname__ if self.is_bound else None

    def parameters(self) -> list[inspect.Parameter]:
        """Its parameters, ``self`` left out."""
        try:
            signature = inspect.signature(self.function)
        except ValueError:  # an exception class: BaseException's (*args)
            return []
        parameters = list(signature.parameters.values())
        if self.owner is not None and not self.is_bound and parameters:
            parameters = parameters[1:]
        if inspect.isclass(self.function) and dataclasses.is_dataclass(self.function):
            written = source_annotations(self.function)
            parameters = [
                p.replace(annotation=written.get(p.name, p.annotation)) for p in parameters
            ]
        return parameters


@functools.cache
def source_annotations(cls: type) -> dict[str, str]:
    """The field annotations of a dataclass as its source writes them. Compiled by mypyc,
    a dataclass's own say less (``<class 'type'>`` for ``Collection[str] | None``), and
    the walk would count a right value as a wrong one; the wheel ships the ``.py``."""
    # Its __module__ is the public one that re-exports it: look where it is defined.
    homes = [
        module
        for name, module in list(sys.modules.items())
        if name.startswith("stompy") and vars(module).get(cls.__name__) is cls
    ]
    for module in homes:
        source = Path(str(module.__file__)).with_name(f"{module.__name__.rpartition('.')[2]}.py")
        if not source.exists():
            continue
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
                return {
                    item.target.id: ast.unparse(item.annotation)
                    for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                }
    return {}


def _defined_here(value: Any) -> bool:
    module = getattr(value, "__module__", None) or getattr(
        getattr(value, "__objclass__", None), "__module__", ""
    )
    return str(module).startswith("stompy")


def _targets_of(module: types.ModuleType, seen: set[str]) -> Iterator[Target]:
    for name in module.__all__:
        value = getattr(module, name)
        if isinstance(value, types.ModuleType):
            yield from _targets_of(value, seen)
        elif inspect.isclass(value):
            if is_typeddict(value) or value.__qualname__ in seen:
                continue
            seen.add(value.__qualname__)
            yield Target(value.__qualname__, value)
            for attr in dir(value):
                if attr.startswith("_"):
                    continue
                raw = inspect.getattr_static(value, attr)
                function = raw.__func__ if isinstance(raw, (classmethod, staticmethod)) else raw
                if callable(function) and not inspect.isclass(function) and _defined_here(function):
                    yield Target(f"{value.__qualname__}.{attr}", getattr(value, attr), value)
        elif (inspect.isfunction(value) or inspect.isbuiltin(value)) and name not in seen:
            seen.add(name)
            yield Target(name, value)


def public_targets() -> list[Target]:
    """Every public call of stompy (and the module its ``__all__`` names: errors), of
    the sans-IO core (stompy.protocol, stompy.events) and of stompy.testing."""
    seen: set[str] = set()
    modules = (stompy, stompy.protocol, stompy.events, stompy.testing)
    targets = [target for module in modules for target in _targets_of(module, seen)]
    return sorted(targets, key=lambda t: t.name)


TARGETS = public_targets()
TARGETS_BY_NAME = {t.name: t for t in TARGETS}

#: Classes users do not make: the library hands them out (``subscribe()``,
#: ``transaction()``, a received message, ``run_broker()``...). What makes them is
#: walked for an unknown keyword only.
HANDED_OUT = frozenset(
    {
        "AsyncBroker",
        "AsyncFaultProxy",
        "AsyncMessage",
        "AsyncSubscription",
        "AsyncTransaction",
        "Broker",
        "FaultProxy",
        "Message",
        "MessageReceived",
        "Receipt",
        "Subscription",
        "Transaction",
    }
)


def is_record(cls: type) -> bool:
    """A record keeps what it is given, as every dataclass (and every exception) does;
    the call that takes one checks it (``send_many`` each ``Outgoing``, ``encode`` a
    ``Frame``): its constructor is walked for an unknown keyword only."""
    if issubclass(cls, BaseException):
        return True
    return dataclasses.is_dataclass(cls) and not hasattr(cls, "__post_init__")


# -- valid values, and wrong ones --------------------------------------------------------------


def _frame() -> stompy.Frame:
    return stompy.Frame("SEND", (("destination", "/queue/front-door"),), b"x")


#: A valid value for each required parameter, by name (``world`` gives those that need
#: a broker: urls, received messages).
VALID: dict[str, Callable[[World], Any]] = {
    "ack": lambda w: "auto",
    "ack_mode": lambda w: "client-individual",
    "backlog": lambda w: 0,
    "body": lambda w: b"x",
    "buffered": lambda w: 0,
    "bytes_downstream": lambda w: 0,
    "bytes_per_second": lambda w: None,
    "bytes_upstream": lambda w: 0,
    "client": lambda w: "127.0.0.1:1",
    "code": lambda w: 1000,
    "command": lambda w: "SEND",
    "data": lambda w: b"",
    "destination": lambda w: "/queue/front-door",
    "encoding": lambda w: "utf-8",
    "end": lambda w: 1,
    "ended": lambda w: False,
    "expected": lambda w: True,
    "frame": lambda w: _frame(),
    "headers": lambda w: (),
    "heartbeats": lambda w: (0, 0),
    "host": lambda w: "127.0.0.1",
    "id": lambda w: "front-door-1",
    "last_id": lambda w: 0,
    "login": lambda w: None,
    "max_messages": lambda w: 1,
    "message": lambda w: w.instance(w.message_class),
    "message_id": lambda w: "front-door-1",
    "messages": lambda w: [],
    "name": lambda w: "destination",
    "now": lambda w: 0.0,
    "paused": lambda w: False,
    "peer": lambda w: "127.0.0.1:1",
    "port": lambda w: 0,
    "predicate": lambda w: lambda: True,
    "prefetch": lambda w: 1,
    "reason": lambda w: "reason",
    "receipt_id": lambda w: "front-door-1",
    "scheme": lambda w: "stomp",
    "seconds": lambda w: 0.01,
    "server": lambda w: None,
    "session": lambda w: w.session_id(),
    "silence": lambda w: 1.0,
    "start": lambda w: 0,
    "state": lambda w: "CONNECTED",
    "stream": lambda w: Unusual(),
    "subscription": lambda w: "front-door-1",
    "subscriptions": lambda w: (),
    "target": lambda w: w.url,
    "transaction": lambda w: "front-door-tx",
    "transactions": lambda w: 0,
    "unacked": lambda w: 0,
    "url": lambda w: w.url,
    "url_or_urls": lambda w: w.url,
    "version": lambda w: "1.2",
    # for one call's parameter
    "State:value": lambda w: next(iter(stompy.State)).value,
}

#: Optional parameters always given (when not the one walked): they bound the waits.
BOUNDS: dict[str, Any] = {"timeout": 0.05, "connect_timeout": 2.0, "receipt_timeout": 2.0}

#: The servers whose methods may stall, refuse or pause: the world undoes it after each.
SERVERS = frozenset({"AsyncBroker", "AsyncFaultProxy", "Broker", "FaultProxy"})

#: Made without a broker, for their methods.
CORE_OBJECTS: dict[str, Callable[[], Any]] = {
    "BrokerConfig": lambda: stompy.testing.BrokerConfig(),
    "ClientProtocol": lambda: stompy.ClientProtocol(),
    "Frame": _frame,
    "FrameParser": lambda: stompy.FrameParser("1.2"),
    "MessageReceived": lambda: events.MessageReceived(_frame(), "1", "auto"),
    "ProxyStats": lambda: stompy.testing.ProxyStats(),
    "Reconnect": lambda: stompy.Reconnect(),
}


class Unusual:
    """A value of no type any annotation names."""

    def __repr__(self) -> str:
        return "Unusual()"


#: Values of every kind; each parameter draws those its annotation does not take.
ANY_VALUE = st.one_of(
    st.just(Unusual()),
    st.none(),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.integers(),
    st.floats(allow_nan=False),
    st.lists(st.just(Unusual()), min_size=1, max_size=2),
    st.tuples(st.just(Unusual())),
    st.dictionaries(st.text(max_size=2), st.just(Unusual()), min_size=1, max_size=1),
)

_CONTAINERS = (list, tuple, dict, set, str, bytes)

#: What each name in an annotation takes (of the values drawn; any other name: none of them).
ACCEPTS: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "bytes": (bytes,),
    "int": (int,),
    "float": (int, float),
    "None": (type(None),),
    "Mapping": (dict,),
    "dict": (dict,),
    "HeaderInput": (dict, list, tuple, type(None)),
    "Headers": (tuple, list),
    "Sequence": (list, tuple, str),
    "Iterable": _CONTAINERS,
    "Collection": _CONTAINERS,
    "tuple": (tuple,),
    "list": (list,),
    # Literal aliases: strings (a wrong string is a wrong value, not a wrong type)
    "AckMode": (str,),
    "Overflow": (str,),
    "Direction": (str,),
    "RefuseMode": (str,),
}

#: Annotations that take any value's truth, or any value: not walked.
UNWALKED = {"bool", "Any", "object", "SslArg"}


def _names(parameter: inspect.Parameter) -> list[str]:
    return re.findall(r"[A-Za-z_][A-Za-z_0-9]*", str(parameter.annotation))


def walked_parameters(target: Target) -> list[inspect.Parameter]:
    """The parameters the wrong-type walk gives a wrong value, one at a time."""
    if target.makes in HANDED_OUT or (
        target.makes is not None and inspect.isclass(target.function) and is_record(target.function)
    ):
        return []
    return [
        p
        for p in target.parameters()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and p.annotation is not p.empty
        and not set(_names(p)) & UNWALKED
    ]


def is_wrong(value: Any, parameter: inspect.Parameter) -> bool:
    """Whether ``value`` is of a type ``parameter`` does not take. An empty value where
    the default is ``None`` (``headers=b""``) is taken as "none", as Python's own
    optional arguments often are: not drawn."""
    if parameter.default is None and not value:
        return False
    names = _names(parameter)
    if "Callable" in names and callable(value):
        return False
    accepted = tuple(t for name in names for t in ACCEPTS.get(name, ()))
    return not isinstance(value, accepted)


def _split_top(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator`` outside brackets (``A | B[C | D]``: two parts)."""
    parts: list[str] = []
    depth = start = 0
    for at, char in enumerate(text):
        depth += char == "["
        depth -= char == "]"
        if depth == 0 and text.startswith(separator, at):
            parts.append(text[start:at].strip())
            start = at + len(separator)
    return [*parts, text[start:].strip()]


_CONTAINER = re.compile(r"(Iterable|Sequence|Collection|list|tuple|Mapping|dict)\[(.*)\]")


@dataclass(frozen=True)
class Items:
    """A container a parameter takes, for the item walk: ``kind`` (``list``, ``tuple``
    or ``dict``), how many items a fixed tuple holds (else 1) and the annotation of an
    item (of a value, in a mapping)."""

    kind: type
    count: int
    item: str

    def wrong(self, item: Any) -> bool:
        """Whether ``item`` is of a type the container's items may not be."""
        names = re.findall(r"[A-Za-z_][A-Za-z_0-9]*", self.item)
        if set(names) & UNWALKED or ("Callable" in names and callable(item)):
            return False
        accepted = tuple(t for name in names for t in ACCEPTS.get(name, ()))
        return not isinstance(item, accepted)

    def holding(self, item: Any) -> Any:
        """The container with ``item`` in it (in each place of a fixed tuple)."""
        if self.kind is dict:
            return {"key": item}
        return self.kind([item] * self.count)


def items_of(parameter: inspect.Parameter) -> Items | None:
    """The container among what ``parameter`` takes (``Iterable[Outgoing]``,
    ``str | Sequence[str]``...), if any: a right container of wrong items is walked too
    (``send_many([("/queue/a", "x")])``, ``Connection([None])``)."""
    for member in _split_top(str(parameter.annotation), " | "):
        match = _CONTAINER.fullmatch(member)
        if match is None:
            continue
        container, inner = match.groups()
        args = _split_top(inner, ",")
        if container in ("Mapping", "dict"):
            return Items(dict, 1, args[-1])
        if container == "tuple":
            fixed = args[-1] != "..."
            return Items(tuple, len(args) if fixed else 1, args[0])
        return Items(list, 1, inner)
    return None


# -- the worlds: where the objects come from and how a call is run -----------------------------


class World:
    """Objects to call methods on, valid values, and a bounded way to call."""

    url: str
    message_class: str = "Message"

    def instance(self, cls: str) -> Any:
        made = CORE_OBJECTS.get(cls)
        if made is None:
            pytest.fail(f"no way to make a {cls} for the walk: add one to CORE_OBJECTS")
        return made()

    def run(self, call: Callable[[], Any]) -> BaseException | None:
        raise NotImplementedError

    def session_id(self) -> str:
        """The broker's id of the world's connection."""
        session = self.instance(self.message_class.replace("Message", "Connection")).session
        assert isinstance(session, str)
        return session

    def arguments(
        self, target: Target, skip: str | None = None
    ) -> tuple[list[Any], dict[str, Any]]:
        """Valid arguments for ``target``'s required parameters (and the bounds), but
        ``skip``."""
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for parameter in target.parameters():
            if parameter.name == skip or parameter.kind in (
                parameter.VAR_POSITIONAL,
                parameter.VAR_KEYWORD,
            ):
                continue
            if parameter.default is not parameter.empty:
                if parameter.name in BOUNDS and parameter.kind is not parameter.POSITIONAL_ONLY:
                    kwargs[parameter.name] = BOUNDS[parameter.name]
                continue
            if target.makes in HANDED_OUT:
                value: Any = Unusual()  # refused for its keyword before it is looked at
            else:
                valid = VALID.get(f"{target.name}:{parameter.name}", VALID.get(parameter.name))
                if valid is None:
                    pytest.fail(
                        f"no valid value for {parameter.name!r} of {target.name}: add one to VALID"
                    )
                value = valid(self)
            if parameter.kind is parameter.POSITIONAL_ONLY:
                args.append(value)
            else:
                kwargs[parameter.name] = value
        return args, kwargs

    def call(self, target: Target, args: list[Any], kwargs: dict[str, Any]) -> BaseException | None:
        function = target.function
        if target.owner is not None and not target.is_bound:
            function = getattr(self.instance(target.owner.__qualname__), function.__name__)
        with warnings.catch_warnings():
            # A former name's DeprecationWarning comes before its value is looked at.
            warnings.simplefilter("ignore", DeprecationWarning)
            outcome = self.run(functools.partial(function, *args, **kwargs))
        if target.owner is not None and target.owner.__qualname__ in SERVERS:
            self.settle()  # undo a fault or a pause it made
        return outcome

    def settle(self) -> None:
        """Undo what a call of the broker's or the proxy's may have changed."""


def _finish_sync(result: Any) -> None:
    """What a call returned, used as a user would: a context manager entered and left."""
    if inspect.iscoroutine(result):
        result.close()
        raise AssertionError("a coroutine from a blocking call")
    if hasattr(result, "__enter__") and hasattr(result, "__exit__"):
        with result:
            pass


class BlockingWorld(World):
    def __init__(self, broker: stompy.testing.Broker, proxy: stompy.testing.FaultProxy) -> None:
        self.broker = broker
        self.proxy = proxy
        self.url = broker.url
        self._conn: stompy.Connection | None = None
        self._queue = 0

    def connection(self) -> stompy.Connection:
        if self._conn is None or not self._conn.connected:
            if self._conn is not None:
                self._conn.close()
            self._conn = stompy.Connection(self.url, receipt_timeout=2.0, connect_timeout=2.0)
            self._conn.connect()
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def instance(self, cls: str) -> Any:
        if cls == "Connection":
            return self.connection()
        if cls == "Subscription":
            self._queue += 1
            return self.connection().subscribe(f"/queue/front-door-{self._queue}")
        if cls == "Transaction":
            return self.connection().transaction()
        if cls == "Message":
            self._queue += 1
            destination = f"/queue/front-door-{self._queue}"
            conn = self.connection()
            conn.send(destination, b"x", headers={"reply-to": "/queue/front-door-replies"})
            sub = conn.subscribe(destination, ack="client-individual")
            message = sub.get(timeout=HANG)
            assert message is not None
            return message
        if cls == "Broker":
            return self.broker
        if cls == "FaultProxy":
            return self.proxy
        return super().instance(cls)

    def run(self, call: Callable[[], Any]) -> BaseException | None:
        outcome: list[BaseException | None] = []

        def bounded() -> None:
            try:
                _finish_sync(call())
            except BaseException as exc:
                outcome.append(exc)
            else:
                outcome.append(None)

        thread = threading.Thread(target=bounded, daemon=True)
        thread.start()
        thread.join(HANG)
        if thread.is_alive():
            self.broker.drop_all_connections()  # wakes a blocked client call
            thread.join(HANG)
            return TimeoutError(f"no answer within {HANG} s")
        return outcome[0]

    def settle(self) -> None:
        self.proxy.reset()
        self.broker.resume()


class AsyncWorld(World):
    message_class = "AsyncMessage"

    def __init__(self, portal: BlockingPortal, stack: contextlib.ExitStack) -> None:
        self.portal = portal
        self.broker: stompy.testing.AsyncBroker = stack.enter_context(
            portal.wrap_async_context_manager(stompy.testing.serve())
        )
        self.proxy: stompy.testing.AsyncFaultProxy = stack.enter_context(
            portal.wrap_async_context_manager(stompy.testing.fault_proxy(self.broker.url))
        )
        self.url = self.broker.url
        self._conn: stompy.AsyncConnection | None = None
        self._opened: contextlib.AbstractContextManager[stompy.AsyncConnection] | None = None
        self._queue = 0

    def connection(self) -> stompy.AsyncConnection:
        if self._conn is None or not self._conn.connected:
            self.close()
            conn = self.portal.call(
                functools.partial(
                    stompy.AsyncConnection, self.url, receipt_timeout=2.0, connect_timeout=2.0
                )
            )
            self._opened = self.portal.wrap_async_context_manager(conn)
            self._conn = self._opened.__enter__()
        return self._conn

    def close(self) -> None:
        if self._opened is not None:
            opened, self._opened = self._opened, None
            opened.__exit__(None, None, None)

    def instance(self, cls: str) -> Any:
        if cls == "AsyncConnection":
            return self.connection()
        conn = self.connection()
        if cls == "AsyncSubscription":
            self._queue += 1
            return self.portal.call(_awaited, conn.subscribe(f"/queue/front-door-{self._queue}"))
        if cls == "AsyncTransaction":
            return self.portal.call(_awaited, conn.transaction())
        if cls == "AsyncMessage":
            self._queue += 1
            return self.portal.call(_received, conn, f"/queue/front-door-{self._queue}")
        if cls == "AsyncBroker":
            return self.broker
        if cls == "AsyncFaultProxy":
            return self.proxy
        return super().instance(cls)

    def run(self, call: Callable[[], Any]) -> BaseException | None:
        outcome: BaseException | None = self.portal.call(_bounded, call)
        return outcome

    def settle(self) -> None:
        self.portal.call(self.proxy.reset)
        self.portal.call(self.broker.resume)


async def _awaited(opening: Any) -> Any:
    return await opening


async def _received(conn: stompy.AsyncConnection, destination: str) -> stompy.AsyncMessage:
    await conn.send(destination, b"x", headers={"reply-to": "/queue/front-door-replies"})
    sub = await conn.subscribe(destination, ack="client-individual")
    message = await sub.get(timeout=HANG)
    assert message is not None
    return message


async def _bounded(call: Callable[[], Any]) -> BaseException | None:
    try:
        with anyio.fail_after(HANG):
            result = call()
            if inspect.isawaitable(result):
                result = await result
            if hasattr(result, "__aenter__"):
                async with result:
                    pass
    except TimeoutError:
        return TimeoutError(f"no answer within {HANG} s")
    except Exception as exc:
        return exc
    return None


@pytest.fixture(scope="module")
def blocking_world() -> Iterator[World]:
    with (
        stompy.testing.run_broker() as broker,
        stompy.testing.run_fault_proxy(broker.url) as proxy,
    ):
        world = BlockingWorld(broker, proxy)
        try:
            yield world
        finally:
            world.close()


@contextlib.contextmanager
def async_world(backend: str) -> Iterator[World]:
    with start_blocking_portal(backend) as portal, contextlib.ExitStack() as stack:
        world = AsyncWorld(portal, stack)
        try:
            yield world
        finally:
            world.close()


@pytest.fixture(scope="module")
def asyncio_world() -> Iterator[World]:
    with async_world("asyncio") as world:
        yield world


@pytest.fixture(scope="module")
def trio_world() -> Iterator[World]:
    with async_world("trio") as world:
        yield world


# -- the walks ---------------------------------------------------------------------------------

#: Defects the walk finds that other work owns, each an ``xfail(strict=True)`` (the fix
#: shows): why, whether it shows in this build, and the cases (``name:parameter``, or
#: ``flavour/name:parameter`` where one flavour only). None is left: a defect found
#: later goes here with its owner until it is fixed.
DEFECTS: list[tuple[str, bool, tuple[str, ...]]] = []

KNOWN: dict[str, tuple[str, bool]] = {
    case: (reason, shows) for reason, shows, cases in DEFECTS for case in cases
}


def _marked(case: str) -> Any:
    """``case``, with its xfail if it, its call or its parameter is in KNOWN."""
    key = case.partition("/")[2]
    name = key.partition(":")[0]
    for known in (case, key, name):
        if known in KNOWN and KNOWN[known][1]:
            mark = pytest.mark.xfail(strict=True, reason=KNOWN[known][0])
            return pytest.param(case, marks=mark)
    return case


def _flavours(target: Target) -> tuple[str, ...]:
    return ("asyncio", "trio") if target.is_async else ("blocking",)


def world_for(case: str, request: pytest.FixtureRequest) -> tuple[Target, World]:
    """The call of a case (``flavour/name`` or ``flavour/name:parameter``), and its world."""
    flavour, _, key = case.partition("/")
    world: World = request.getfixturevalue(f"{flavour}_world")
    return TARGETS_BY_NAME[key.partition(":")[0]], world


COUNTED = r"takes (no keyword arguments|at most \d+ (keyword )?arguments? \(\d+ given\))"

UNKNOWN_KEYWORD_CASES = [f"{f}/{t.name}" for t in TARGETS for f in _flavours(t)]


@pytest.mark.parametrize("case", [_marked(c) for c in UNKNOWN_KEYWORD_CASES])
def test_an_unknown_keyword_is_a_type_error_naming_it(
    case: str, request: pytest.FixtureRequest
) -> None:
    target, world = world_for(case, request)
    args, kwargs = world.arguments(target)
    if target.makes in HANDED_OUT:  # called with placeholders: nothing may look at them
        assert all(p.kind is not p.VAR_KEYWORD for p in target.parameters())
    outcome = world.call(target, args, {**kwargs, BOGUS: 1})
    assert isinstance(outcome, TypeError), f"{case}(..., {BOGUS}=1) gave {outcome!r}"
    # It names the call as the user wrote it (not a private one it passed the keywords
    # to); mypyc's constructors say only "__init__()".
    # A class the library hands out may name its base's constructor, an Enum the
    # standard library's EnumType.__call__().
    called = target.name.rpartition(".")[2]
    if target.makes not in HANDED_OUT and not (
        inspect.isclass(target.function) and issubclass(target.function, enum.Enum)
    ):
        named = rf"\b{called}(\.__init__)?\(|(^|for )__init__\("
        assert re.search(named, str(outcome)), outcome
    if BOGUS not in str(outcome):
        # A call that takes no keyword option may say so instead: Python's own words
        # ("takes no keyword arguments"), or mypyc's for the compiled core ("takes at
        # most 1 keyword argument (2 given)").
        assert re.search(COUNTED, str(outcome)), outcome
        assert not any(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in target.parameters())


WRONG_TYPE_CASES = [
    f"{f}/{t.name}:{p.name}" for t in TARGETS for p in walked_parameters(t) for f in _flavours(t)
]


@pytest.mark.parametrize("case", [_marked(c) for c in WRONG_TYPE_CASES])
@settings(WALK)
@given(data=st.data())
def test_an_argument_of_a_wrong_type_is_refused(
    case: str, request: pytest.FixtureRequest, data: st.DataObject
) -> None:
    target, world = world_for(case, request)
    name = case.rpartition(":")[2]
    parameters = target.parameters()
    (parameter,) = [p for p in parameters if p.name == name]
    value = data.draw(ANY_VALUE.filter(lambda v: is_wrong(v, parameter)), label=name)
    args, kwargs = world.arguments(target, skip=name)
    if parameter.kind is parameter.POSITIONAL_ONLY:
        args.insert(parameters.index(parameter), value)
    else:
        kwargs[name] = value
    outcome = world.call(target, args, kwargs)
    assert isinstance(outcome, (TypeError, StompError)), (
        f"{target.name}({name}={value!r}) gave {outcome!r}"
    )


ITEM_CASES = [
    f"{f}/{t.name}:{p.name}"
    for t in TARGETS
    for p in walked_parameters(t)
    if items_of(p) is not None
    for f in _flavours(t)
]


@pytest.mark.parametrize("case", [_marked(c) for c in ITEM_CASES])
@settings(WALK)
@given(data=st.data())
def test_an_item_of_a_wrong_type_is_refused(
    case: str, request: pytest.FixtureRequest, data: st.DataObject
) -> None:
    """A container of the right type holding an item of a wrong one: a TypeError or a
    StompError too (the item's own AttributeError from deep inside, before)."""
    target, world = world_for(case, request)
    name = case.rpartition(":")[2]
    parameters = target.parameters()
    (parameter,) = [p for p in parameters if p.name == name]
    items = items_of(parameter)
    assert items is not None
    item = data.draw(ANY_VALUE.filter(items.wrong), label=f"an item of {name}")
    value = items.holding(item)
    args, kwargs = world.arguments(target, skip=name)
    if parameter.kind is parameter.POSITIONAL_ONLY:
        args.insert(parameters.index(parameter), value)
    else:
        kwargs[name] = value
    outcome = world.call(target, args, kwargs)
    assert isinstance(outcome, (TypeError, StompError)), (
        f"{target.name}({name}={value!r}) gave {outcome!r}"
    )


def test_the_walk_covers_the_clients_and_the_test_brokers() -> None:
    """The listing finds what users call, in both clients and stompy.testing."""
    for expected in (
        "Connection",
        "Connection.send",
        "Connection.subscribe",
        "Subscription.get",
        "Transaction.send",
        "Message.reply",
        "AsyncConnection.request",
        "AsyncSubscription.get_batch",
        "AsyncMessage.ack",
        "send",
        "send_async",
        "run_broker",
        "serve",
        "Broker.queue_depth",
        "FaultProxy.cut",
        "fault_proxy",
        "run_fault_proxy",
    ):
        assert expected in TARGETS_BY_NAME
    assert "blocking/Connection.send:destination" in WRONG_TYPE_CASES
    assert "trio/AsyncConnection.send:headers" in WRONG_TYPE_CASES
    for items in (
        "blocking/Connection.send_many:messages",
        "asyncio/AsyncConnection.send_many:messages",
        "blocking/Connection:url_or_urls",
        "blocking/BrokerConfig:virtual_hosts",
    ):
        assert items in ITEM_CASES


def test_a_transaction_of_a_wrong_type_is_refused_before_anything_is_sent(
    stomp_broker: stompy.testing.Broker,
) -> None:
    """Not a transaction, nor its id: a TypeError, where it was sent as it was."""
    with stompy.Connection(stomp_broker.url) as conn:
        loose: Any = conn
        with pytest.raises(TypeError, match="'transaction' must be"):
            loose.send("/queue/front-door-tx", b"x", transaction=7)
        with pytest.raises(TypeError, match="'transaction' must be"):
            loose.send_many([stompy.Outgoing("/queue/front-door-tx")], transaction=[1])
        conn.send("/queue/front-door-tx-done", b"x", receipt=True)
    assert stomp_broker.queue_depth("/queue/front-door-tx") == 0


#: stompy.testing as a user without a type checker calls it.
LOOSE: Any = stompy.testing


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: LOOSE.run_broker(port="61613"), "port"),
        (lambda: LOOSE.run_broker(host=None), "host"),
        (lambda: LOOSE.run_broker(backend=None), "backend"),
        (lambda: LOOSE.run_fault_proxy("stomp://127.0.0.1:1", port=1.5), "port"),
    ],
)
def test_a_test_server_refuses_an_address_of_a_wrong_type(
    call: Callable[[], Any], named: str
) -> None:
    """A TypeError naming the argument, not the resolver's or anyio's error from inside."""
    with pytest.raises(TypeError, match=f"{named} must be"), call():
        pass  # pragma: no cover
