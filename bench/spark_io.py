"""The Spark data path, side by side in one run: the ``storage_adapter`` data source and the native
path (``storage_adapter.spark.write``) against plain Spark Parquet on the same backend (issues 19, 31).

Per backend and round, interleaved:

* **write**: the same rows (id int64, label string, score float64, generated in the executors by
  ``spark.range``) appended through ``df.write.format("storage_adapter")`` into a fresh table, through the
  native path into another fresh table (Spark's own Parquet writer, its committed files published in one
  engine commit), and written by ``df.write.parquet`` into a fresh folder;
* **the ceiling**: the same rows written into a Python data source that does nothing with them (its
  ``DataSourceArrowWriter.write`` only counts the Arrow batches Spark sends it). It costs what every
  Python data source pays before its first line of its own: Spark turning its rows into Arrow batches in
  the JVM and shipping them to a Python worker. The data source over this floor is how much of its time
  is its own (target: at most 1.10x); ``df.write.parquet`` over it is the best write ratio any Python
  data source can reach on this machine;
* **the read ceiling**: the same number of rows, with the same columns, read through a Python data
  source that does nothing but hand Spark Arrow batches it made once (``IDLE_SOURCE``): what every Python
  data source's read pays after its own work, Spark taking Arrow batches from a Python worker into the JVM.
  ``spark.read.parquet`` over it is the best read ratio any Python data source can reach on this machine;
* **read**: a full scan (every row and column into Spark's ``noop`` sink) through
  ``spark.read.format("storage_adapter")`` and through ``spark.read.parquet`` over exactly the files of
  the same snapshot (``Engine.files``): the target's row. Beside it, a one-column query (``count`` and
  ``sum(score)``), reported without a target: Spark's Parquet reader decodes one column there, while
  Spark hands a Python data source no column list to prune with;
* **native read** (issue 43): the same full scan and one-column query through ``storage_adapter.spark.read``
  (Spark's own Parquet reader over the same snapshot's files, resolved through the engine each time), in
  the same rounds, against ``spark.read.parquet`` of those files (target: at least 0.95x, both);
* **publishes per load**: the manifest versions one data-source append adds, at 1, 4 and 16 Spark
  partitions (exact: a request count, not a time).

Each backend is one warehouse root (an engine), each write a fresh table in it. Plain Spark Parquet and the
native path need a Hadoop filesystem for the backend: ``file://`` has one, S3 needs the ``s3a`` jars,
which the PySpark wheel does not ship (the data source reads and writes S3 through the adapter in the
Python workers). On SeaweedFS the data source's own numbers are reported and the others are marked
unavailable, never invented.

Spark's start-up and the first job's worker start are excluded (one session, one warm-up of every write
and every read: a session's first read through a Python data source starts its reader workers, seconds).
Beside every time, the CPU it took (Linux): the whole host's busy core-seconds, and the S3 server's own
(SeaweedFS runs on the same cores: what it spends storing the bytes is time the data source waits for and
the do-nothing source never pays).
Medians of ``--rounds``, and every round's ratios (the machine may be shared: compare within a round).
Numbers are reported against the issue's targets, never asserted. Writes ``spark_io.json`` (every
round's seconds too) and ``spark_io.md`` into the results directory.

    python -m bench.spark_io [--rows N] [--rounds R] [--master local[2]] [--backends local,seaweedfs]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from storage_adapter.engine import Engine
from storage_adapter.spark import read, spark_session, write

SCHEMA = pa.schema([("id", pa.int64()), ("label", pa.string()), ("score", pa.float64())])
NATIVE_TARGET, OWN_SHARE_TARGET, READ_TARGET, NATIVE_READ_TARGET = 0.9, 1.10, 0.67, 0.95
PUBLISH_PARTITIONS = (1, 4, 16)


@dataclass(frozen=True)
class Backend:
    """Where a round writes: the engine (one warehouse root per backend, a fresh table per write), the
    Spark options that reopen it, and a local folder for plain Spark Parquet (None where Spark has no
    filesystem for the backend)."""

    name: str
    engine: Engine
    options: dict[str, str]
    parquet_root: Path | None
    server_pid: int | None = None

    @property
    def url(self) -> str:
        return self.engine.adapter.url


@dataclass(frozen=True)
class SparkIoResult:
    """Medians over the rounds (``rounds``: every round's seconds, by measurement); None where the backend
    has no Hadoop filesystem for Spark's own Parquet writer and reader."""

    backend: str
    rows: int
    partitions: int
    datasource_write_s: float
    parquet_write_s: float | None
    idle_write_s: float
    native_write_s: float | None
    datasource_read_s: float
    idle_read_s: float
    parquet_read_s: float | None
    datasource_narrow_read_s: float
    parquet_narrow_read_s: float | None
    publishes_per_load: dict[str, int]
    rounds: dict[str, list[float]]
    native_read_s: float | None = None
    native_narrow_read_s: float | None = None

    @property
    def write_ratio(self) -> float | None:
        """Data-source write throughput over plain Parquet's."""
        return None if self.parquet_write_s is None else self.parquet_write_s / self.datasource_write_s

    @property
    def native_ratio(self) -> float | None:
        """The native path's write throughput over plain Parquet's (>= 0.9 is the target)."""
        if self.parquet_write_s is None or self.native_write_s is None:
            return None
        return self.parquet_write_s / self.native_write_s

    @property
    def ceiling_ratio(self) -> float | None:
        """Plain Parquet's write throughput over the do-nothing Python data source's: the best write ratio
        a Python data source can reach here."""
        return None if self.parquet_write_s is None else self.parquet_write_s / self.idle_write_s

    @property
    def own_share(self) -> float:
        """The data source's write time over the do-nothing one's (1.0: no time of its own; <= 1.10 is
        the target)."""
        return self.datasource_write_s / self.idle_write_s

    @property
    def read_ratio(self) -> float | None:
        """Data-source read throughput over plain Parquet's (>= 0.67 is the target)."""
        return None if self.parquet_read_s is None else self.parquet_read_s / self.datasource_read_s

    @property
    def read_ceiling_ratio(self) -> float | None:
        """``spark.read.parquet``'s full-read throughput over the do-nothing Python source's: the best
        read ratio a Python data source can reach here."""
        return None if self.parquet_read_s is None else self.parquet_read_s / self.idle_read_s

    @property
    def narrow_read_ratio(self) -> float | None:
        """The same for a query of one column (reported, no target: see ``narrow_scan``)."""
        if self.parquet_narrow_read_s is None:
            return None
        return self.parquet_narrow_read_s / self.datasource_narrow_read_s

    @property
    def native_read_ratio(self) -> float | None:
        """The native read's full-read throughput (storage_adapter.spark.read) over ``spark.read.parquet``'s
        of the same files (>= 0.95 is the target)."""
        if self.parquet_read_s is None or self.native_read_s is None:
            return None
        return self.parquet_read_s / self.native_read_s

    @property
    def native_column_read_ratio(self) -> float | None:
        """The same for the one-column query (>= 0.95 is the target)."""
        if self.parquet_narrow_read_s is None or self.native_narrow_read_s is None:
            return None
        return self.parquet_narrow_read_s / self.native_narrow_read_s

    def per_round(self, numerator: str, denominator: str) -> list[float]:
        """``numerator`` over ``denominator`` in each round (both measured in that round)."""
        return [a / b for a, b in zip(self.rounds[numerator], self.rounds[denominator], strict=True)]


def spark_rows(spark: Any, rows: int, partitions: int) -> Any:
    return spark.range(0, rows, numPartitions=partitions).selectExpr(
        "id", "concat('row-', id) AS label", "CAST(id * 0.5 AS DOUBLE) AS score"
    )


def fresh_table(backend: Backend) -> str:
    """A new empty table in the backend's warehouse (as a job writes a new table or partition, and as
    ``df.write.parquet`` writes a fresh folder each round)."""
    table = f"events_{uuid.uuid4().hex[:10]}"
    backend.engine.create_table(table, SCHEMA)
    return table


IDLE_FORMAT = "bench_idle_sink"


def register_idle_sink(spark: Any) -> None:
    """Register the do-nothing Python data source (``IDLE_FORMAT``). Its classes are defined here, in a
    function, so that Spark's cloudpickle ships them by value: the workers need not import ``bench``."""
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    class Counted(WriterCommitMessage):
        def __init__(self, rows: int) -> None:
            self.rows = rows

    class IdleWriter(DataSourceArrowWriter):
        def write(self, iterator: Iterator[pa.RecordBatch]) -> Counted:
            return Counted(sum(batch.num_rows for batch in iterator))

    class IdleSink(DataSource):
        @classmethod
        def name(cls) -> str:
            return IDLE_FORMAT

        def writer(self, schema: Any, overwrite: bool) -> IdleWriter:
            return IdleWriter()

    spark.dataSource.register(IdleSink)


IDLE_SOURCE = "bench_idle_source"
IDLE_BATCH_ROWS = 256 * 1024  # as many rows as the data source's read batches hold at most


def register_idle_source(spark: Any) -> None:
    """Register the do-nothing Python data source to read from (``IDLE_SOURCE``, options ``rows`` and
    ``partitions``): each partition builds one batch of the bench's columns and hands it to Spark again
    and again (sliced for the last rows), so its time is Spark's taking of the batches, not their making."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class IdleReader(DataSourceReader):
        def __init__(self, rows: int, partitions: int) -> None:
            self.rows, self.count = rows, partitions

        def partitions(self) -> list[InputPartition]:
            share, extra = divmod(self.rows, self.count)
            return [InputPartition(share + (1 if i < extra else 0)) for i in range(self.count)]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            import pyarrow.compute as pc

            ids = pa.array(range(min(partition.value, IDLE_BATCH_ROWS)), pa.int64())
            labels = pc.binary_join_element_wise("row-", pc.cast(ids, pa.string()), "")
            batch = pa.record_batch(
                [ids, labels, pc.multiply(pc.cast(ids, pa.float64()), 0.5)], schema=SCHEMA
            )
            for start in range(0, partition.value, IDLE_BATCH_ROWS):
                yield batch.slice(0, min(IDLE_BATCH_ROWS, partition.value - start))

    class IdleSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return IDLE_SOURCE

        def schema(self) -> str:
            return "id bigint, label string, score double"

        def reader(self, schema: Any) -> IdleReader:
            return IdleReader(int(self.options["rows"]), int(self.options["partitions"]))

    spark.dataSource.register(IdleSource)


def idle_read(spark: Any, rows: int) -> None:
    """A full scan of ``rows`` rows from the do-nothing source, in as many partitions as Spark has cores
    (as the data source's read of a table this size)."""
    partitions = spark.sparkContext.defaultParallelism
    full_scan(spark.read.format(IDLE_SOURCE).option("rows", rows).option("partitions", partitions).load())


def idle_write(frame: Any) -> None:
    frame.write.format(IDLE_FORMAT).mode("append").save()


def datasource_write(frame: Any, backend: Backend, table: str) -> None:
    frame.write.format("storage_adapter").mode("append").options(**backend.options).option(
        "table", table
    ).save(backend.url)


def native_write(frame: Any, backend: Backend, table: str) -> None:
    """The native path (storage_adapter.spark.write): Spark's own Parquet writer, one engine commit."""
    write(frame, backend.engine, table)


def full_scan(frame: Any) -> None:
    """Every row and column materialized, nothing kept: Spark's ``noop`` sink, the usual way to time a
    read (neither side can skip a column)."""
    frame.write.format("noop").mode("overwrite").save()


def narrow_scan(frame: Any) -> tuple[int, float]:
    """``count(*)`` and ``sum(score)``: Spark's Parquet reader decodes one column, while a Python data
    source is handed no column list by Spark (its API has no pruning) and ships all three."""
    row = frame.selectExpr("count(*) AS n", "sum(score) AS s").collect()[0]
    return int(row["n"]), float(row["s"])


def local_path(engine: Engine, key: str) -> str:
    return engine.adapter.url.removeprefix("file://").rstrip("/") + "/" + key


def datasource_reader(spark: Any, backend: Backend, table: str) -> Any:
    """``spark.read.format("storage_adapter")`` of ``table`` on the backend (``.load(backend.url)`` reads)."""
    return spark.read.format("storage_adapter").options(**backend.options).option("table", table)


def snapshot_files(backend: Backend, table: str) -> list[str]:
    """The local paths of the files of ``table``'s current snapshot: what ``spark.read.parquet`` reads."""
    return [local_path(backend.engine, f.key) for f in backend.engine.files(table)]


def host_busy_seconds() -> float | None:
    """Core-seconds every CPU of the host spent busy since boot (Linux's /proc/stat; None elsewhere)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            ticks = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


def process_cpu_seconds(pid: int | None) -> float | None:
    """User and system CPU seconds of process ``pid`` so far (Linux; None elsewhere or without one)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(spark: Any) -> None:
    """Start a measurement from the same state whatever ran before it: the JVM's and Python's garbage
    collected, and dirty pages (``df.write.parquet`` does not fsync) on disk. Measured without it, a write
    timed right after the do-nothing write (gigabytes of Arrow buffers freed) paid for that write's
    collection: 0.3 core-seconds more for the native path than for ``df.write.parquet`` timed after it."""
    spark.sparkContext._jvm.java.lang.System.gc()
    gc.collect()
    os.sync()


def timed(
    spark: Any,
    samples: dict[str, list[float]],
    name: str,
    action: Callable[[], Any],
    server_pid: int | None = None,
) -> Any:
    """Run ``action`` from a settled state (:func:`settle`); append its seconds to ``samples[name]``, and
    (where the host says) the host's busy core-seconds meanwhile to ``samples[name + "_cpu"]``, the
    server's to ``samples[name + "_server_cpu"]``."""
    settle(spark)
    busy, server = host_busy_seconds(), process_cpu_seconds(server_pid)
    started = time.perf_counter()
    result = action()
    samples.setdefault(name, []).append(time.perf_counter() - started)
    busy_after, server_after = host_busy_seconds(), process_cpu_seconds(server_pid)
    if busy is not None and busy_after is not None:
        samples.setdefault(f"{name}_cpu", []).append(busy_after - busy)
    if server is not None and server_after is not None:
        samples.setdefault(f"{name}_server_cpu", []).append(server_after - server)
    return result


def one_round(
    spark: Any, backend: Backend, rows: int, partitions: int, samples: dict[str, list[float]], turn: int
) -> None:
    """Every write, then every read, once, each from a settled state; their seconds appended to
    ``samples``. The order turns by ``turn`` places each round, so that no path always follows the same
    one (a job pays part of its predecessor's memory churn; measured: up to 0.3 core-seconds)."""
    table = fresh_table(backend)
    writes: list[tuple[str, Callable[[], Any]]] = [
        ("datasource_write", lambda: datasource_write(spark_rows(spark, rows, partitions), backend, table)),
        ("idle_write", lambda: idle_write(spark_rows(spark, rows, partitions))),
    ]
    native, folder = None, None
    if backend.parquet_root is not None:  # Spark's own writer and reader reach the root
        native, folder = fresh_table(backend), backend.parquet_root / uuid.uuid4().hex[:10]
        writes += [
            ("native_write", lambda: native_write(spark_rows(spark, rows, partitions), backend, native)),
            ("parquet_write", lambda: spark_rows(spark, rows, partitions).write.parquet(str(folder))),
        ]
    for name, action in _turned(writes, turn):
        timed(spark, samples, name, action, backend.server_pid)
    if native is not None and folder is not None:
        if sum(f.rows for f in backend.engine.files(native)) != rows:
            raise AssertionError(f"the native path published {backend.engine.files(native)} for {rows} rows")
        shutil.rmtree(folder)
    reader = datasource_reader(spark, backend, table)
    reads: list[tuple[str, Callable[[], Any]]] = [
        ("datasource_read", lambda: full_scan(reader.load(backend.url))),
        ("idle_read", lambda: idle_read(spark, rows)),
        ("datasource_narrow_read", lambda: narrow_scan(reader.load(backend.url))),
    ]
    if backend.parquet_root is not None:
        files = snapshot_files(backend, table)
        reads += [
            ("parquet_read", lambda: full_scan(spark.read.parquet(*files))),
            ("parquet_narrow_read", lambda: narrow_scan(spark.read.parquet(*files))),
            ("native_read", lambda: full_scan(read(spark, backend.engine, table))),
            ("native_narrow_read", lambda: narrow_scan(read(spark, backend.engine, table))),
        ]
    for name, action in _turned(reads, turn):
        result = timed(spark, samples, name, action, backend.server_pid)
        if name in ("datasource_narrow_read", "native_narrow_read") and result != (
            rows,
            sum(i * 0.5 for i in range(rows)),
        ):
            raise AssertionError(f"data source read {result} (rows, sum of score), wrote {rows} rows")
        if name == "parquet_narrow_read" and result[0] != rows:
            raise AssertionError(f"spark.read.parquet of the snapshot's files read {result[0]} rows")


def _turned(steps: list[tuple[str, Callable[[], Any]]], turn: int) -> list[tuple[str, Callable[[], Any]]]:
    """``steps`` starting at the ``turn``-th (modulo their number), the rest in order after it."""
    at = turn % len(steps)
    return steps[at:] + steps[:at]


def measure(spark: Any, backend: Backend, rows: int, rounds: int, partitions: int) -> SparkIoResult:
    # Warm-up: every write and read path once at full size (the JVM compiles each path's code on its first
    # runs; a session's first read through a Python data source also starts its reader workers).
    warm_table = fresh_table(backend)
    datasource_write(spark_rows(spark, rows, partitions), backend, warm_table)
    idle_write(spark_rows(spark, rows, partitions))
    reader = datasource_reader(spark, backend, warm_table)
    full_scan(reader.load(backend.url))
    narrow_scan(reader.load(backend.url))
    idle_read(spark, rows)
    if backend.parquet_root is not None:
        native_write(spark_rows(spark, rows, partitions), backend, fresh_table(backend))
        warm = backend.parquet_root / uuid.uuid4().hex[:10]
        spark_rows(spark, rows, partitions).write.parquet(str(warm))
        shutil.rmtree(warm)
        files = snapshot_files(backend, warm_table)
        full_scan(spark.read.parquet(*files))
        narrow_scan(spark.read.parquet(*files))
        full_scan(read(spark, backend.engine, warm_table))
        narrow_scan(read(spark, backend.engine, warm_table))
    samples: dict[str, list[float]] = {}
    for turn in range(rounds):
        one_round(spark, backend, rows, partitions, samples, turn)
    publishes = {}
    for parts in PUBLISH_PARTITIONS:
        table = fresh_table(backend)
        before = backend.engine.snapshot().version
        datasource_write(spark_rows(spark, 10_000, parts), backend, table)
        publishes[f"{parts} partitions"] = backend.engine.snapshot().version - before

    def median(name: str) -> float | None:
        return statistics.median(samples[name]) if name in samples else None

    return SparkIoResult(
        backend=backend.name,
        rows=rows,
        partitions=partitions,
        datasource_write_s=statistics.median(samples["datasource_write"]),
        parquet_write_s=median("parquet_write"),
        idle_write_s=statistics.median(samples["idle_write"]),
        native_write_s=median("native_write"),
        datasource_read_s=statistics.median(samples["datasource_read"]),
        idle_read_s=statistics.median(samples["idle_read"]),
        parquet_read_s=median("parquet_read"),
        datasource_narrow_read_s=statistics.median(samples["datasource_narrow_read"]),
        parquet_narrow_read_s=median("parquet_narrow_read"),
        publishes_per_load=publishes,
        rounds=samples,
        native_read_s=median("native_read"),
        native_narrow_read_s=median("native_narrow_read"),
    )


@contextlib.contextmanager
def backends(names: list[str]) -> Iterator[list[Backend]]:
    with contextlib.ExitStack() as stack:
        found = []
        for name in names:
            if name == "local":
                root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-spark-io-")))
                (root / "parquet").mkdir()
                engine = Engine.open(f"file://{root}/warehouse")
                found.append(Backend("local", engine, {}, root / "parquet"))
            elif name == "seaweedfs":
                from storage_adapter.servers.seaweedfs import SeaweedFS

                server = SeaweedFS(bucket="bench")
                endpoint = stack.enter_context(server)
                stack.enter_context(endpoint.scoped())
                options = endpoint.adapter_options()
                engine = Engine.open(endpoint.url(f"spark-io-{uuid.uuid4().hex[:8]}"), options=options)
                found.append(
                    Backend("seaweedfs", engine, {k: str(v) for k, v in options.items()}, None, server.pid)
                )
            else:
                raise SystemExit(f"bench.spark_io: unknown backend {name!r} (local, seaweedfs)")
        yield found


def _ratio(value: float | None, target: float | None) -> str:
    if value is None:
        return "n/a (no Hadoop filesystem for Spark's own Parquet here)"
    shown = math.floor(value * 100) / 100  # rounded down: a ratio just under its target never reads as it
    if target is None:
        return f"{shown:.2f}x"
    return f"{shown:.2f}x (target >= {target}x: {'met' if value >= target else 'NOT met'})"


def _share(value: float) -> str:
    shown = math.ceil(value * 100) / 100  # rounded up: a share just over its target never reads as it
    return (
        f"{shown:.2f}x (target <= {OWN_SHARE_TARGET}x: {'met' if value <= OWN_SHARE_TARGET else 'NOT met'})"
    )


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def _narrow(r: SparkIoResult) -> str:
    pq = "n/a" if r.parquet_narrow_read_s is None else f"{r.parquet_narrow_read_s:.2f} s"
    ratio = "n/a" if r.narrow_read_ratio is None else f"{r.narrow_read_ratio:.2f}x"
    return f"{r.datasource_narrow_read_s:.2f} s vs {pq}: {ratio}"


def markdown(results: list[SparkIoResult], master: str, rounds: int) -> str:
    lines = [
        f"# Spark data path, {master}, median of {rounds}",
        "",
        "| backend | rows | write: data source | write: do-nothing Python data source | data source / do-nothing "
        "| write: native path | write: df.write.parquet | native path throughput / df.write.parquet "
        "| data source throughput / df.write.parquet | full read: data source | full read: spark.read.parquet "
        "| full read ratio | one-column query ratio (no target) | publishes per load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        publishes = ", ".join(f"{k}: {v}" for k, v in r.publishes_per_load.items())
        lines.append(
            f"| {r.backend} | {r.rows:,} | {r.datasource_write_s:.2f} s | {r.idle_write_s:.2f} s | "
            f"{_share(r.own_share)} | {_seconds(r.native_write_s)} | {_seconds(r.parquet_write_s)} | "
            f"{_ratio(r.native_ratio, NATIVE_TARGET)} | {_ratio(r.write_ratio, None)} | "
            f"{r.datasource_read_s:.2f} s | {_seconds(r.parquet_read_s)} | {_ratio(r.read_ratio, READ_TARGET)} | "
            f"{_narrow(r)} | {publishes} |"
        )
    lines += ["", "Every round (each ratio within one round; then the median of those ratios):", ""]
    for r in results:
        lines.append(
            f"* {r.backend}: data source / do-nothing {_rounds(r, 'datasource_write', 'idle_write')}"
        )
        if r.parquet_write_s is not None:
            native = _rounds(r, "parquet_write", "native_write")
            lines.append(f"* {r.backend}: native path throughput / df.write.parquet {native}")
            lines.append(f"* {r.backend}: full read ratio {_rounds(r, 'parquet_read', 'datasource_read')}")
            if r.native_read_s is not None:
                lines.append(
                    f"* {r.backend}: native read / spark.read.parquet, full "
                    f"{_ratio(r.native_read_ratio, NATIVE_READ_TARGET)}: "
                    f"{_rounds(r, 'parquet_read', 'native_read')}; one column "
                    f"{_ratio(r.native_column_read_ratio, NATIVE_READ_TARGET)}: "
                    f"{_rounds(r, 'parquet_narrow_read', 'native_narrow_read')}"
                )
            ceiling = _rounds(r, "parquet_read", "idle_read")
            lines.append(
                f"* {r.backend}: read ceiling (spark.read.parquet / do-nothing Python source) {ceiling}"
            )
        lines.append(
            f"* {r.backend}: data source full read / do-nothing read {_rounds(r, 'datasource_read', 'idle_read')}"
        )
        if cpu := _cpu(r):
            lines.append(
                f"* {r.backend}: CPU, median core-seconds (the host has {os.cpu_count()} cores): {cpu}"
            )
    return "\n".join(lines) + "\n"


def _cpu(r: SparkIoResult) -> str:
    """The host's busy core-seconds per measurement, and the server's own where it ran (medians)."""
    shown = []
    for name, label in (
        ("datasource_write", "data source write"),
        ("idle_write", "do-nothing write"),
        ("native_write", "native write"),
        ("parquet_write", "df.write.parquet"),
        ("datasource_read", "data source full read"),
        ("idle_read", "do-nothing full read"),
        ("parquet_read", "spark.read.parquet full read"),
        ("native_read", "native full read"),
    ):
        if f"{name}_cpu" in r.rounds:
            shown.append(f"{label} {statistics.median(r.rounds[f'{name}_cpu']):.2f}")
        if f"{name}_server_cpu" in r.rounds:
            shown.append(f"of which the server's {statistics.median(r.rounds[f'{name}_server_cpu']):.2f}")
    return ", ".join(shown)


def _rounds(r: SparkIoResult, numerator: str, denominator: str) -> str:
    ratios = r.per_round(numerator, denominator)
    return ", ".join(f"{v:.2f}x" for v in ratios) + f" (median {statistics.median(ratios):.2f}x)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--backends", default="local,seaweedfs")
    parser.add_argument("--results", type=Path, default=Path("results/bench"))
    args = parser.parse_args(argv)
    # The servers first: Spark's Python workers, started with the session, inherit a started server's
    # client settings (S3Endpoint.scoped), not the caller's AWS_* ones.
    with backends(args.backends.split(",")) as targets:
        # A driver heap of fixed size (it starts at spark.driver.memory's default, 1g): settle()'s full
        # collection would otherwise shrink it, and the next measurement would pay for growing it again.
        spark = spark_session(
            args.master, "bench-spark-io", settings={"spark.driver.extraJavaOptions": "-Xms1g"}
        )
        register_idle_sink(spark)
        register_idle_source(spark)
        try:
            results = [measure(spark, b, args.rows, args.rounds, args.partitions) for b in targets]
        finally:
            spark.stop()
    args.results.mkdir(parents=True, exist_ok=True)
    report = [
        dict(
            asdict(r),
            write_ratio=r.write_ratio,
            native_ratio=r.native_ratio,
            read_ratio=r.read_ratio,
            narrow_read_ratio=r.narrow_read_ratio,
            ceiling_ratio=r.ceiling_ratio,
            read_ceiling_ratio=r.read_ceiling_ratio,
            native_read_ratio=r.native_read_ratio,
            native_column_read_ratio=r.native_column_read_ratio,
            own_share=r.own_share,
            master=args.master,
        )
        for r in results
    ]
    (args.results / "spark_io.json").write_text(json.dumps(report, indent=2))
    table = markdown(results, args.master, args.rounds)
    (args.results / "spark_io.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
