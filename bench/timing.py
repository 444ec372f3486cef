"""Interleaved latency and throughput measurement of several clients doing the same operation.

Clients take turns in shuffled order, a small batch each, for several rounds, so drift on a shared
machine (other processes, server compaction, CPU frequency) spreads over every client instead of
favouring one. Arguments are prepared outside the timed region.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench.clients import Client

# The sizes of issue 20's targets: a list of 1,000 objects, a list_dir of 200 child prefixes.
LIST_OBJECTS = 1000
LIST_DIR_PREFIXES = 200


@dataclass(frozen=True)
class Measurement:
    """Sequential latencies (seconds) of one client doing one operation on one backend and size."""

    backend: str
    size: str
    op: str
    client: str
    latencies_s: tuple[float, ...]

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    @property
    def mean_s(self) -> float:
        return sum(self.latencies_s) / len(self.latencies_s)

    @property
    def ops_per_s(self) -> float:
        return len(self.latencies_s) / sum(self.latencies_s)


@dataclass(frozen=True)
class Throughput:
    """Operations per second of one client with ``in_flight`` concurrent requests (threads)."""

    backend: str
    op: str
    client: str
    in_flight: int
    ops: int
    wall_s: float

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.wall_s


def unique_body(payload: bytes, i: int) -> bytes:
    """``payload`` with a unique 8-byte head: distinct bodies keep S3 ETags distinct along a CAS chain."""
    return i.to_bytes(8, "big") + payload[8:]


class _Runner:
    """Prepares one client for one operation and hands out ready-to-time calls."""

    def __init__(self, client: Client, op: str, payload: bytes, tag: str) -> None:
        self.client, self.op, self.payload, self.tag = client, op, payload, tag
        self.i = 0
        self.key = f"bench/{tag}/object"
        call = client.ops
        if op == "get":
            call["put"](self.key, payload)
        elif op == "write_if_match":
            self.token = call["put"](self.key, payload)
        elif op == "list":
            for n in range(LIST_OBJECTS):
                call["put"](f"bench/{tag}/list/{n:04d}", payload)
        elif op == "list_dir":
            for n in range(LIST_DIR_PREFIXES):
                call["put"](f"bench/{tag}/dirs/{n:03d}/object", payload)

    def next_call(self) -> Callable[[], None]:
        self.i += 1
        ops = self.client.ops
        if self.op == "get":
            return lambda: ops["get"](self.key)
        if self.op == "put":
            return lambda: ops["put"](self.key, self.payload)
        if self.op == "write_if_absent":
            key = f"bench/{self.tag}/absent-{self.i}"
            return lambda: self._expect(ops["write_if_absent"](key, self.payload) is not None, key)
        if self.op == "write_if_match":
            body = unique_body(self.payload, self.i)
            return lambda: self._advance(ops["write_if_match"](self.key, body, self.token))
        if self.op == "list_dir":
            prefix = f"bench/{self.tag}/dirs"
            return lambda: self._expect(len(ops["list_dir"](prefix)) == LIST_DIR_PREFIXES, prefix)
        prefix = f"bench/{self.tag}/list"
        return lambda: self._expect(len(ops["list"](prefix)) == LIST_OBJECTS, prefix)

    def _expect(self, ok: Any, key: str) -> None:
        if not ok:
            raise RuntimeError(
                f"{self.client.name} {self.op} on {key!r} did not succeed: the bench is broken"
            )

    def _advance(self, token: str | None) -> None:
        self._expect(token is not None, self.key)
        self.token = token


def measure(
    backend: str,
    size: str,
    payload: bytes,
    op: str,
    clients: Sequence[Client],
    rounds: int,
    batch: int,
    rng: random.Random,
) -> list[Measurement]:
    """Latencies of every client that supports ``op``, interleaved round by round."""
    runners = {c.name: _Runner(c, op, payload, f"{op}-{size}") for c in clients if c.supports(op)}
    latencies: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        order = list(runners)
        rng.shuffle(order)
        for name in order:
            for _ in range(batch):
                call = runners[name].next_call()
                started = time.perf_counter()
                call()
                latencies[name].append(time.perf_counter() - started)
    return [Measurement(backend, size, op, name, tuple(values)) for name, values in latencies.items()]


def measure_concurrency(
    backend: str,
    payload: bytes,
    clients: Sequence[Client],
    levels: Sequence[int],
    ops_per_level: int,
    rng: random.Random,
) -> list[Throughput]:
    """Throughput of 1 KiB gets with ``level`` requests in flight (a thread pool), clients interleaved."""
    results = []
    clients = [client for client in clients if client.supports("get")]
    for client in clients:
        client.ops["put"]("bench/concurrency/object", payload)
    for level in levels:
        order = list(clients)
        rng.shuffle(order)
        for client in order:
            get = client.ops["get"]
            total = max(ops_per_level, 2 * level)
            with ThreadPoolExecutor(max_workers=level) as pool:
                list(pool.map(lambda _: None, range(level)))  # start the threads outside the timed region
                started = time.perf_counter()
                list(pool.map(get, ["bench/concurrency/object"] * total))
                wall = time.perf_counter() - started
            results.append(Throughput(backend, "get", client.name, level, total, wall))
    return results


ASYNC_CLIENT, THREADS_CLIENT = "adapter-async (one event loop)", "adapter (thread pool)"


def measure_async_gets(
    backend: str, payload: bytes, client: Client, total: int, threads: int, rounds: int
) -> list[Throughput]:
    """``total`` concurrent 1 KiB gets of one object, ``rounds`` times each way, interleaved: all from one
    event loop through the async twin (``async_get``), against the sync adapter (``get``) on ``threads``
    threads. Each side's connections are opened outside the timed region (the pool's threads by
    ``threads`` gets, the twin's by one untimed round), and each round's loop is started before timing."""
    key = "bench/async/object"
    client.ops["put"](key, payload)
    get, async_get = client.ops["get"], client.ops["async_get"]

    async def gather_gets() -> float:
        await async_get(key)  # the twin's first request sets up its connections, as the pool's threads'
        started = time.perf_counter()
        bodies = await asyncio.gather(*(async_get(key) for _ in range(total)))
        wall = time.perf_counter() - started
        assert all(len(b) == len(payload) for b in bodies)
        return wall

    async def open_connections() -> None:
        await asyncio.gather(*(async_get(key) for _ in range(total)))

    results = []
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(get, [key] * threads))  # start the threads and their connections
        # As many connections as ``total`` concurrent gets need (the threads' ``threads`` are open): the
        # first round would otherwise time the twin's connection setup, which the threads did untimed.
        asyncio.run(open_connections())
        for _ in range(rounds):
            started = time.perf_counter()
            list(pool.map(get, [key] * total))
            results.append(
                Throughput(backend, "get", THREADS_CLIENT, threads, total, time.perf_counter() - started)
            )
            results.append(Throughput(backend, "get", ASYNC_CLIENT, total, total, asyncio.run(gather_gets())))
    return results


def median_ops_per_s(runs: Sequence[Throughput], client: str) -> float | None:
    rates = [t.ops_per_s for t in runs if t.client == client]
    return statistics.median(rates) if rates else None
