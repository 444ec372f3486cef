"""This engine beside delta-rs and Lance on the same storage, side by side in one run (issue 44).

    python -m bench.engine_peers [--quick] [--commits 1000] [--window 50] [--writers 4,8]
                                 [--appends 25] [--backends local,seaweedfs] [--out results/engine_peers]

Every system does the same work on the same storage: ``commits`` appends of 100 rows (int64, string) to
one fresh table, each timed from outside (commit latency p50 over the first ``window`` commits and over
the last ``window``); then a whole-table read and a one-column read of all those rows by a fresh reader
(median of 5); then, on a fresh table per writer count, that many writer processes each making
``appends`` appends at once (commits/s, retries, failed commits, and rows lost: the rows counted at the
end against the appends acknowledged); and, for this engine only, a commit of two tables at once (the
peers have no multi-table commit). Storage: a temporary directory (local) and an embedded SeaweedFS
started here (``storage_adapter.servers.seaweedfs``).

Writes ``engine_peers.md`` (the tables, with what each system promises), ``engine_peers.json`` (one row
per system, backend and measurement) and ``engine_peers.png``. Numbers are reported, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

SPAWN = multiprocessing.get_context("spawn")  # never fork a process whose Tokio runtime is running
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
ROWS_PER_APPEND = 100
ENGINE, ENGINE_FAST, DELTA, LANCE = "engine", "engine (durable=False)", "delta-rs", "lance"
PEERS = (DELTA, LANCE)
COLORS = {ENGINE: "C0", ENGINE_FAST: "C1", DELTA: "C2", LANCE: "C3"}  # one colour per system in every panel

# What each system promises, stated beside the numbers (checked for the versions measured; see
# docs/bench.md, "The engine beside delta-rs and Lance").
PROMISES = {
    ENGINE: "fsyncs every file and directory entry on local before a commit returns; retries lost "
    "publishes itself (jittered backoff, re-basing appends); one manifest CAS publishes any number of "
    "tables atomically; S3: If-None-Match / If-Match",
    ENGINE_FAST: "the same engine with the adapter's documented durable=False (local only): no fsync, as "
    "the peers; a power loss may lose acknowledged commits",
    DELTA: "no fsync on local (object_store LocalFileSystem); a log entry is written put-if-absent; "
    "conflicting commits are retried by delta-rs up to its max_commit_retries (default), then "
    "CommitFailedError; S3 with conditional_put=etag (no unsafe rename); one table per commit",
    LANCE: "no fsync on local (object_store LocalFileSystem); the manifest is written put-if-absent "
    "(V2 manifest paths, the default); conflicting appends are retried inside Lance; one table per commit",
}


def batch(i: int) -> pa.Table:
    """The ``i``-th append: 100 rows of (int64, string)."""
    start = i * ROWS_PER_APPEND
    ids = pa.array(range(start, start + ROWS_PER_APPEND), pa.int64())
    names = pa.array([f"name-{n}" for n in range(start, start + ROWS_PER_APPEND)], pa.string())
    return pa.table([ids, names], schema=SCHEMA)


# -- where the tables live ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Place:
    """One table's location on one backend, in the form each system takes: the adapter URL and options
    (this engine), and the URI and storage options (the peers). Picklable: writer processes get it."""

    backend: str
    adapter_url: str
    adapter_options: dict[str, Any]
    uri: str
    delta_options: dict[str, str]
    lance_options: dict[str, str]
    local_dir: str | None = None


class Backends:
    """Makes fresh :class:`Place` s on local (one temporary directory for the run) and SeaweedFS."""

    def __init__(self, stack: contextlib.ExitStack, backends: Sequence[str]) -> None:
        self._tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-peers-"))
        self._s3: Any = None
        if "seaweedfs" in backends:
            from storage_adapter.servers.seaweedfs import SeaweedFS

            self._s3 = stack.enter_context(SeaweedFS(bucket="peers"))
            stack.enter_context(self._s3.scoped())

    def place(self, backend: str, name: str) -> Place:
        if backend == "local":
            path = os.path.join(self._tmp, name)
            os.makedirs(path)
            return Place(backend, f"file://{path}", {}, path, {}, {}, path)
        s3 = self._s3
        http = str(s3.endpoint.startswith("http://")).lower()
        delta = {
            "AWS_ENDPOINT_URL": s3.endpoint,
            "AWS_ACCESS_KEY_ID": s3.access_key_id,
            "AWS_SECRET_ACCESS_KEY": s3.secret_access_key,
            "AWS_REGION": s3.region,
            "AWS_ALLOW_HTTP": http,
            "conditional_put": "etag",  # safe concurrent commits without a lock service or unsafe rename
        }
        lance = {
            "aws_endpoint": s3.endpoint,
            "aws_access_key_id": s3.access_key_id,
            "aws_secret_access_key": s3.secret_access_key,
            "aws_region": s3.region,
            "allow_http": http,
        }
        return Place(backend, s3.url(name), s3.adapter_options(), f"s3://{s3.bucket}/{name}", delta, lance)


# -- one system's table -------------------------------------------------------------------------------
class Table:
    """One system's table at one place: ``create``, ``append`` (one commit), ``read``, ``count``."""

    retries = 0  # conflict retries the system reported (this engine only: the peers do not report them)

    def create(self) -> None:
        raise NotImplementedError

    def append(self, data: pa.Table) -> None:
        raise NotImplementedError

    def read(self, columns: list[str] | None = None) -> pa.Table:
        """A fresh reader's view (opened here: the open is part of the read)."""
        raise NotImplementedError

    def count(self) -> int:
        rows: int = self.read(["id"]).num_rows
        return rows

    def requests(self) -> dict[str, int] | None:
        """Storage requests and bytes written so far, where counted (this engine), else None."""
        return None


class EngineTable(Table):
    def __init__(self, place: Place, durable: bool = True) -> None:
        from contract_tests.counting import CountingAdapter
        from storage_adapter import open_adapter
        from storage_adapter.engine import Engine

        options = dict(place.adapter_options)
        if place.backend == "local" and not durable:
            options["durable"] = False
        self._raw = open_adapter(place.adapter_url, **options)
        self._counting = CountingAdapter(self._raw)
        self._written = _WrittenBytes(self._counting)
        self._engine = Engine.open(self._written)
        self._open = Engine.open

    def create(self) -> None:
        self._engine.create_table("t", SCHEMA)

    def append(self, data: pa.Table) -> None:
        self.retries += self._engine.commit({"t": data}).attempts - 1

    def read(self, columns: list[str] | None = None) -> pa.Table:
        table: pa.Table = self._open(self._raw, read_only=True).read("t", columns=columns)
        return table

    def requests(self) -> dict[str, int] | None:
        return {"requests": self._counting.total, "bytes_written": self._written.bytes}

    def reset_counts(self) -> None:
        self._counting.reset()
        self._written.bytes = 0

    def commit_two(self, i: int) -> None:
        self._engine.commit({"t": batch(i), "u": batch(i)})


class _WrittenBytes:
    """Delegates to ``inner``; adds the size of every body written to ``bytes``."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.bytes = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name in ("write", "write_if_absent", "write_if_match"):

            def counted(key: str, data: Any, *args: Any, **kwargs: Any) -> Any:
                if isinstance(data, bytes | bytearray | memoryview):
                    self.bytes += len(data)
                return attr(key, data, *args, **kwargs)

            return counted
        return attr


class DeltaTable(Table):
    def __init__(self, place: Place) -> None:
        self._place = place
        self._table: Any = None

    def _open(self) -> Any:
        from deltalake import DeltaTable as Opened

        return Opened(self._place.uri, storage_options=self._place.delta_options or None)

    def create(self) -> None:
        from deltalake import write_deltalake

        write_deltalake(
            self._place.uri,
            SCHEMA.empty_table(),
            mode="append",
            storage_options=self._place.delta_options or None,
        )

    def append(self, data: pa.Table) -> None:
        from deltalake import write_deltalake

        if self._table is None:
            self._table = self._open()
        # The opened table is kept (its log is not re-read from the start for every append): the fastest
        # way delta-rs offers to append repeatedly.
        write_deltalake(self._table, data, mode="append")

    def read(self, columns: list[str] | None = None) -> pa.Table:
        table: pa.Table = pa.table(self._open().to_pyarrow_dataset().to_table(columns=columns))
        return table


class LanceTable(Table):
    def __init__(self, place: Place) -> None:
        self._place = place
        self._dataset: Any = None

    def create(self) -> None:
        import lance

        lance.write_dataset(
            SCHEMA.empty_table(),
            self._place.uri,
            mode="create",
            storage_options=self._place.lance_options or None,
        )

    def append(self, data: pa.Table) -> None:
        import lance

        # The returned dataset is kept and appended to (its session and caches reused), as Lance's own
        # examples do; a concurrent writer's commit is found and retried against by Lance itself.
        self._dataset = lance.write_dataset(
            data,
            self._dataset if self._dataset is not None else self._place.uri,
            mode="append",
            storage_options=self._place.lance_options or None,
        )

    def read(self, columns: list[str] | None = None) -> pa.Table:
        import lance

        dataset = lance.dataset(self._place.uri, storage_options=self._place.lance_options or None)
        table: pa.Table = dataset.to_table(columns=columns)
        return table


def open_table(system: str, place: Place) -> Table:
    if system == ENGINE:
        return EngineTable(place)
    if system == ENGINE_FAST:
        return EngineTable(place, durable=False)
    if system == DELTA:
        return DeltaTable(place)
    return LanceTable(place)


# -- measurements ---------------------------------------------------------------------------------------
@dataclass
class Row:
    """One measurement of one system on one backend (a JSON row)."""

    system: str
    backend: str
    measurement: str
    value: float | None
    unit: str
    detail: str = ""


def _ms(seconds: Sequence[float]) -> float:
    return round(1000 * statistics.median(seconds), 2)


def stored_bytes(place: Place) -> int:
    """Bytes of every object under the table's place (data, logs, manifests)."""
    from storage_adapter import open_adapter

    adapter = open_adapter(place.adapter_url, **place.adapter_options)
    return sum(info.size for info in adapter.list(""))


def commits(system: str, place: Place, count: int, window: int) -> list[Row]:
    """``count`` appends to a fresh table: p50 of the first and last ``window``, requests and bytes."""
    table = open_table(system, place)
    table.create()
    counted = isinstance(table, EngineTable)
    seconds: list[float] = []
    last_requests: list[int] = []
    last_bytes: list[int] = []
    for i in range(count):
        data = batch(i)
        if counted and i >= count - window:
            assert isinstance(table, EngineTable)
            table.reset_counts()
        start = time.perf_counter()
        table.append(data)
        seconds.append(time.perf_counter() - start)
        if counted and i >= count - window:
            measured = table.requests()
            assert measured is not None
            last_requests.append(measured["requests"])
            last_bytes.append(measured["bytes_written"])
    b = place.backend
    rows = [
        Row(system, b, f"commit p50, commits 1-{window}", _ms(seconds[:window]), "ms"),
        Row(system, b, f"commit p50, commits {count - window + 1}-{count}", _ms(seconds[-window:]), "ms"),
        Row(
            system,
            b,
            "stored bytes per commit",
            round(stored_bytes(place) / count),
            "bytes",
            "every object under the table's place after the run, over the commits",
        ),
    ]
    if counted:
        rows.append(
            Row(
                system,
                b,
                "requests per commit",
                statistics.mean(last_requests),
                "requests",
                f"mean over commits {count - window + 1}-{count}, through the adapter's counting",
            )
        )
        rows.append(
            Row(
                system,
                b,
                "bytes written per commit",
                round(statistics.mean(last_bytes)),
                "bytes",
                f"mean over commits {count - window + 1}-{count}: every PUT body (data, sidecar, "
                "table version, manifest, history record)",
            )
        )
    else:
        rows.append(
            Row(system, b, "requests per commit", None, "requests", "not counted (the peer's own I/O)")
        )
    rows.extend(reads(system, place, count * ROWS_PER_APPEND))
    return rows


def reads(system: str, place: Place, expected_rows: int, repeats: int = 5) -> list[Row]:
    """Whole-table and one-column reads by a fresh reader each time (median of ``repeats``)."""
    table = open_table(system, place)
    rows = []
    for label, columns in (("whole-table read", None), ("one-column read (id)", ["id"])):
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            got = table.read(columns)
            seconds.append(time.perf_counter() - start)
            if got.num_rows != expected_rows:
                raise RuntimeError(
                    f"{system} {place.backend}: read {got.num_rows} rows, {expected_rows} written"
                )
        rows.append(
            Row(system, place.backend, label, _ms(seconds), "ms", f"{expected_rows:,} rows, fresh reader")
        )
    return rows


def _writer(system: str, place: Place, worker: int, appends: int, barrier: Any, results: Any) -> None:
    """One writer process: warm up with one append (imports, first open: not timed), wait for the
    others, then ``appends`` appends; reports (acknowledged, failed, retries, seconds)."""
    table = open_table(system, place)
    base = (1 + worker) * 1_000_000
    table.append(batch(base))
    acknowledged = failed = 0
    barrier.wait()
    start = time.perf_counter()
    for i in range(appends):
        try:
            table.append(batch(base + 1 + i))
            acknowledged += 1
        except Exception as exc:  # a failed commit is a measured outcome, not a crash of the bench
            failed += 1
            print(f"{system} writer {worker}: commit failed: {type(exc).__name__}: {exc}"[:300], flush=True)
    results.put((acknowledged, failed, table.retries, time.perf_counter() - start, time.perf_counter()))


def writers(system: str, place: Place, count: int, appends: int) -> list[Row]:
    """``count`` writer processes x ``appends`` appends on a fresh table."""
    open_table(system, place).create()
    barrier, results = SPAWN.Barrier(count + 1), SPAWN.Queue()
    procs = [
        SPAWN.Process(target=_writer, args=(system, place, w, appends, barrier, results))
        for w in range(count)
    ]
    for p in procs:
        p.start()
    barrier.wait(timeout=300)
    start = time.perf_counter()
    outcomes = [results.get(timeout=900) for _ in procs]
    wall = time.perf_counter() - start
    for p in procs:
        p.join(timeout=60)
    acknowledged = sum(o[0] for o in outcomes)
    failed = sum(o[1] for o in outcomes)
    retries = sum(o[2] for o in outcomes)
    visible = open_table(system, place).count() - count * ROWS_PER_APPEND  # less the warm-up appends
    lost = acknowledged * ROWS_PER_APPEND - visible
    label = f"{count} writers x {appends} appends"
    b = place.backend
    return [
        Row(
            system,
            b,
            f"{label}: commits/s",
            round(acknowledged / wall, 1),
            "commits/s",
            f"{acknowledged} acknowledged in {wall:.2f} s",
        ),
        Row(system, b, f"{label}: failed commits", failed, "commits"),
        Row(
            system,
            b,
            f"{label}: retries",
            retries if system in (ENGINE, ENGINE_FAST) else None,
            "retries",
            "" if system in (ENGINE, ENGINE_FAST) else "not reported by the peer",
        ),
        Row(
            system,
            b,
            f"{label}: rows lost",
            lost,
            "rows",
            f"{visible:,} rows visible, {acknowledged * ROWS_PER_APPEND:,} acknowledged",
        ),
    ]


def multi_table(place: Place, count: int) -> list[Row]:
    """This engine only: ``count`` commits of 100 rows to each of two tables in one atomic commit."""
    table = EngineTable(place)
    table.create()
    table._engine.create_table("u", SCHEMA)
    seconds = []
    for i in range(count):
        start = time.perf_counter()
        table.commit_two(i)
        seconds.append(time.perf_counter() - start)
    return [
        Row(
            ENGINE,
            place.backend,
            "two-table atomic commit p50",
            _ms(seconds),
            "ms",
            f"{count} commits; only this engine commits several tables atomically",
        )
    ]


# -- the run ----------------------------------------------------------------------------------------------
@dataclass
class Settings:
    commits: int
    window: int
    writers: tuple[int, ...]
    appends: int
    backends: tuple[str, ...]
    systems: tuple[str, ...]
    versions: dict[str, str] = field(default_factory=dict)


def systems_for(backend: str, systems: Sequence[str]) -> list[str]:
    return [s for s in systems if backend == "local" or s != ENGINE_FAST]


def run(settings: Settings, progress: Callable[[str], None] = print) -> list[Row]:
    rows: list[Row] = []
    with contextlib.ExitStack() as stack:
        places = Backends(stack, settings.backends)
        for backend in settings.backends:
            for system in systems_for(backend, settings.systems):
                tag = system.split(" ")[0] + ("-fast" if system == ENGINE_FAST else "")
                progress(f"{backend} {system}: {settings.commits} commits")
                rows += commits(
                    system,
                    places.place(backend, f"{tag}-{uuid.uuid4().hex[:8]}"),
                    settings.commits,
                    settings.window,
                )
                for n in settings.writers:
                    progress(f"{backend} {system}: {n} writers")
                    rows += writers(
                        system,
                        places.place(backend, f"{tag}-w{n}-{uuid.uuid4().hex[:8]}"),
                        n,
                        settings.appends,
                    )
            if ENGINE in settings.systems:
                rows += multi_table(places.place(backend, f"multi-{uuid.uuid4().hex[:8]}"), settings.window)
    return rows


def versions() -> dict[str, str]:
    import importlib.metadata as md

    found = {"python": platform.python_version()}
    for package in ("deltalake", "pylance", "pyarrow", "obstore"):
        with contextlib.suppress(md.PackageNotFoundError):
            found[package] = md.version(package)
    return found


def _cell(row: Row | None) -> str:
    if row is None:
        return ""
    if row.value is None:
        return row.detail or "n/a"
    value = (
        f"{row.value:,.1f}"
        if isinstance(row.value, float) and not row.value.is_integer()
        else f"{row.value:,.0f}"
    )
    return f"{value} {row.unit}"


def markdown(rows: Sequence[Row], settings: Settings) -> str:
    index = {(r.system, r.backend, r.measurement): r for r in rows}
    measurements = list(
        dict.fromkeys(
            r.measurement for r in rows if r.system != ENGINE or not r.measurement.startswith("two-table")
        )
    )
    lines = [
        "# This engine, delta-rs and Lance on the same storage",
        "",
        f"{settings.commits} appends of {ROWS_PER_APPEND} rows (int64, string) per system and backend; "
        f"p50 over commits 1-{settings.window} and the last {settings.window}; reads by a fresh reader, "
        f"median of 5; writers: processes x {settings.appends} appends on a fresh table. "
        f"Versions: {', '.join(f'{k} {v}' for k, v in settings.versions.items())}.",
        "",
    ]
    for backend in settings.backends:
        systems = systems_for(backend, settings.systems)
        lines += [
            f"## {backend}",
            "",
            "| measurement | " + " | ".join(systems) + " |",
            "|---|" + "---|" * len(systems),
        ]
        for m in measurements:
            cells = [_cell(index.get((s, backend, m))) for s in systems]
            if any(cells):
                lines.append(f"| {m} | " + " | ".join(cells) + " |")
        multi = index.get((ENGINE, backend, "two-table atomic commit p50"))
        if multi is not None:
            lines += [
                "",
                f"Two-table atomic commit (only this engine has one): p50 {_cell(multi)} ({multi.detail}).",
            ]
        lines.append("")
    lines += ["## What each system promises", ""]
    lines += [f"* **{s}**: {PROMISES[s]}" for s in settings.systems]
    return "\n".join(lines) + "\n"


def plot(rows: Sequence[Row], settings: Settings, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        m
        for m in dict.fromkeys(r.measurement for r in rows)
        if m.startswith(("commit p50", "whole-table", "one-column")) or m.endswith("commits/s")
    ]
    fig, axes = plt.subplots(
        len(settings.backends),
        len(panels),
        figsize=(3.2 * len(panels), 3.2 * len(settings.backends)),
        squeeze=False,
    )
    for i, backend in enumerate(settings.backends):
        systems = systems_for(backend, settings.systems)
        for j, m in enumerate(panels):
            values = [
                next((r.value for r in rows if (r.system, r.backend, r.measurement) == (s, backend, m)), None)
                for s in systems
            ]
            ax = axes[i][j]
            ax.bar(range(len(systems)), [v or 0 for v in values], color=[COLORS[s] for s in systems])
            ax.set_xticks(range(len(systems)), [s.replace(" (", "\n(") for s in systems], fontsize=6)
            ax.set_title(f"{backend}: {m}", fontsize=7)
            ax.tick_params(axis="y", labelsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(rows: Sequence[Row], settings: Settings, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "engine_peers.md", out / "engine_peers.json", out / "engine_peers.png"]
    paths[0].write_text(markdown(rows, settings))
    document = {
        "settings": asdict(settings),
        "promises": {s: PROMISES[s] for s in settings.systems},
        "rows": [asdict(r) for r in rows],
    }
    paths[1].write_text(json.dumps(document, indent=1) + "\n")
    plot(rows, settings, paths[2])
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke-test sizes: 12 commits, 2 writers x 3")
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--window", type=int, default=50)
    parser.add_argument("--writers", default="4,8")
    parser.add_argument("--appends", type=int, default=25)
    parser.add_argument("--backends", default="local,seaweedfs")
    parser.add_argument("--systems", default=",".join((ENGINE, ENGINE_FAST, DELTA, LANCE)))
    parser.add_argument("--out", type=Path, default=Path("results/engine_peers"))
    args = parser.parse_args(argv)
    if args.quick:
        args.commits, args.window, args.writers, args.appends = 12, 5, "2", 3
    settings = Settings(
        args.commits,
        min(args.window, args.commits),
        tuple(int(w) for w in args.writers.split(",") if w),
        args.appends,
        tuple(args.backends.split(",")),
        tuple(args.systems.split(",")),
        versions(),
    )
    rows = run(settings, lambda line: print(line, flush=True))
    for path in write_report(rows, settings, args.out):
        print(f"wrote {path}")
    print(markdown(rows, settings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
