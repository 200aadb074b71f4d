"""One flavour x broker run, and the whole soak over the chosen flavours and brokers."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Final
from urllib.parse import urlsplit

import stompy
from stompy.errors import StompError
from stompy.testing import Broker, run_broker, run_fault_proxy

from . import _anyio, _blocking
from ._core import Faulter, Result, Settings, Tally, refused, resources, settled, skipped

#: The brokers the soak knows, and where the real ones listen (``ci/brokers``).
BROKERS: Final = ("stompy", "rabbitmq", "activemq")
DEFAULT_URLS: Final = {
    "rabbitmq": "stomp://guest:guest@127.0.0.1:61613/%2F",
    "activemq": "stomp://guest:guest@127.0.0.1:61614/",
}


def where(url: str) -> str:
    """``host:port`` of a URL, without its credentials (for messages)."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}"


def probe(url: str, timeout: float) -> str | None:
    """Why the broker at ``url`` cannot be used, or ``None`` when it answers CONNECT."""
    try:
        with stompy.Connection(url, connect_timeout=timeout, receipt_timeout=timeout):
            return None
    except StompError as exc:
        return f"no STOMP answer at {where(url)} ({type(exc).__name__}: {exc})"


def soak_one(
    flavour: str, broker: str, target: str, settings: Settings, in_process: Broker | None = None
) -> Result:
    """Soak one flavour against one broker (``target``: its URL), through a fault proxy.

    Resources are taken before the proxy starts and after it stopped, with every
    connection closed: what the clients (and the proxy) leave behind is a leak.
    ``in_process``: the in-process broker behind ``target``, whose ERROR frames other
    than heart-beat timeouts fail the run (:func:`refused`).
    """
    tally = Tally(settings.bounds(), send_timeout=settings.send_timeout)
    destination = f"/queue/stompy-soak-{flavour}-{uuid.uuid4().hex[:12]}"
    # Persistent on the real brokers: a broker that drops a non-persistent message
    # (ActiveMQ may, when a consumer goes away) is no client bug.
    headers = {} if broker == "stompy" else {"persistent": "true"}
    # Not the flavour: the three clients meet the same faults, so that a difference
    # between their rows is theirs (the faults' timing still varies with the load).
    seed = f"{settings.seed}-{broker}"
    before = resources()
    broker_before = in_process.stats if in_process is not None else None
    tasks: tuple[int | None, int | None] = (None, None)
    started = time.monotonic()
    backend = "trio" if flavour == "trio" else "asyncio"
    with run_fault_proxy(
        target, backend=backend, connect_timeout=settings.connect_timeout
    ) as proxy:
        faulter = Faulter(proxy, settings, seed)
        try:
            if flavour == "blocking":
                _blocking.run(proxy.url, destination, headers, settings, tally, faulter)
            else:
                tasks = _anyio.run(
                    flavour, proxy.url, destination, headers, settings, tally, faulter
                )
        except Exception as exc:
            tally.problem(f"the run raised {exc!r}")
        finally:
            faulter.stop()
            faulter.join(10.0)
        tally.problems.extend(faulter.problems)
        stats = proxy.stats
    seconds = time.monotonic() - started
    if in_process is not None and broker_before is not None:
        wrong = refused(broker_before, in_process.stats)
        if wrong:
            tally.problem(wrong)
    after = settled(before, settings.settle_timeout)
    return Result(
        flavour,
        broker,
        tally,
        faulter.injected,
        replace(before, tasks=tasks[0]),
        replace(after, tasks=tasks[1]),
        seconds,
        proxy_cuts=stats.connections_cut,
        proxy_connections=stats.connections_accepted,
    )


@contextlib.contextmanager
def targets(
    brokers: Sequence[str], settings: Settings, urls: dict[str, str]
) -> Iterator[tuple[dict[str, str], Broker | None]]:
    """Each broker's URL, or the reason it is skipped (``"skip: ..."``), and the
    in-process broker, which this runs (outside the measured runs, as a real broker
    would be) when ``brokers`` name it."""
    found: dict[str, str] = {}
    in_process: Broker | None = None
    with contextlib.ExitStack() as stack:
        for name in brokers:
            if name == "stompy":
                in_process = stack.enter_context(run_broker(heartbeats=settings.heartbeats))
                found[name] = in_process.url
                continue
            url = urls[name]
            reason = probe(url, settings.connect_timeout)
            found[name] = url if reason is None else f"skip: {reason}"
        yield found, in_process


def soak(
    settings: Settings,
    flavours: Sequence[str],
    brokers: Sequence[str],
    urls: dict[str, str] | None = None,
    *,
    echo: bool = True,
) -> list[Result]:
    """Every flavour against every broker, one after another; the results in order."""
    results: list[Result] = []
    with targets(brokers, settings, {**DEFAULT_URLS, **(urls or {})}) as (found, in_process):
        for broker in brokers:
            for flavour in flavours:
                target = found[broker]
                if target.startswith("skip: "):
                    result = skipped(flavour, broker, target.removeprefix("skip: "))
                else:
                    if echo:
                        print(
                            f"soak: {flavour} x {broker} for {settings.duration:g} s ...",
                            flush=True,
                        )
                    ours = in_process if broker == "stompy" else None
                    result = soak_one(flavour, broker, target, settings, ours)
                if echo:
                    verdict = "SKIP" if result.skipped else "ok" if result.ok else "FAIL"
                    print(f"soak: {flavour} x {broker}: {verdict}", flush=True)
                results.append(result)
    return results
