"""Engine cost as its work grows: a table read vs its fragment count, a commit vs the tables it touches.

``python -m bench.engine_scale [--backends memory,local] [--fragments 1000,10000] [--tables 1,10,100]``
prints markdown tables: the median wall time of ``Engine.read`` of a table of N one-row fragments (a
fresh reader engine, so the table version GET is included), and of a ``commit_fragments`` touching k
tables (fragments written beforehand, so only the commit protocol is timed). Commit contention is in
bench/contention.py.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from ulid import ULID

SCHEMA = pa.schema([("n", pa.int64())])


_SEAWEEDFS: Any = None  # the S3Endpoint of the SeaweedFS that main starts for the seaweedfs backend


@contextlib.contextmanager
def open_root(backend: str) -> Iterator[Any]:
    """A fresh adapter on ``backend`` (local: durable writes, as in production)."""
    from storage_adapter import open_adapter

    if backend == "memory":
        yield open_adapter(f"memory://bench-scale-{uuid.uuid4().hex}")
    elif backend == "local":
        with tempfile.TemporaryDirectory(prefix="bench-scale-") as root:
            yield open_adapter(f"file://{root}")
    else:
        yield open_adapter(_SEAWEEDFS.url(uuid.uuid4().hex), **_SEAWEEDFS.adapter_options())


def _fragments(adapter: Any, table: str, count: int) -> list[Any]:
    """``count`` one-row fragments written straight to the store (the same small Parquet body each)."""
    from storage_adapter.engine import codec, layout
    from storage_adapter.engine.tables import FragmentRef, schema_fingerprint

    sink = io.BytesIO()
    pq.write_table(pa.table({"n": [1]}, schema=SCHEMA), sink)
    body, fingerprint = sink.getvalue(), schema_fingerprint(SCHEMA)
    refs = []
    for _ in range(count):
        key = layout.data_key(table, str(ULID()))
        adapter.write(key, body)
        refs.append(FragmentRef(table, key, 1, len(body), fingerprint, codec.now_iso()))
    return refs


def time_read(backend: str, fragments: int, repeats: int = 3) -> float:
    """Median seconds of reading one table of ``fragments`` one-row fragments."""
    from storage_adapter.engine import Engine

    with open_root(backend) as adapter:
        engine = Engine.open(adapter)
        engine.create_table("t", SCHEMA)
        engine.commit_fragments({"t": _fragments(adapter, "t", fragments)})
        times = []
        for _ in range(repeats):
            reader = Engine.open(adapter, read_only=True)
            start = time.perf_counter()
            rows = reader.read("t").num_rows
            times.append(time.perf_counter() - start)
            assert rows == fragments
        return statistics.median(times)


def time_multi_table_commit(backend: str, tables: int, repeats: int = 5) -> float:
    """Median seconds of one append ``commit_fragments`` over ``tables`` tables (steady state)."""
    from storage_adapter.engine import Engine

    with open_root(backend) as adapter:
        engine = Engine.open(adapter)
        names = [f"t{i:04d}" for i in range(tables)]
        for name in names:
            engine.create_table(name, SCHEMA)
        engine.commit_fragments({n: _fragments(adapter, n, 1) for n in names})  # warm the version cache
        times = []
        for _ in range(repeats):
            refs = {n: _fragments(adapter, n, 1) for n in names}
            start = time.perf_counter()
            engine.commit_fragments(refs)
            times.append(time.perf_counter() - start)
        return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backends", default="memory,local")
    parser.add_argument("--fragments", default="1000,10000")
    parser.add_argument("--tables", default="1,10,100")
    args = parser.parse_args()
    backends = args.backends.split(",")
    with contextlib.ExitStack() as stack:
        if "seaweedfs" in backends:
            from storage_adapter.servers.seaweedfs import SeaweedFS

            global _SEAWEEDFS
            _SEAWEEDFS = stack.enter_context(SeaweedFS(bucket="scale"))
            stack.enter_context(_SEAWEEDFS.scoped())
        _print_tables(backends, args.fragments, args.tables)


def _print_tables(backends: list[str], fragments: str, tables: str) -> None:
    print("| backend | fragments | read s |\n|---|---|---|")
    for backend in backends:
        for n in (int(x) for x in fragments.split(",") if x):
            print(f"| {backend} | {n} | {time_read(backend, n):.3f} |", flush=True)
    print("\n| backend | tables | commit ms |\n|---|---|---|")
    for backend in backends:
        for k in (int(x) for x in tables.split(",") if x):
            print(f"| {backend} | {k} | {1000 * time_multi_table_commit(backend, k):.1f} |", flush=True)


if __name__ == "__main__":
    main()
