"""Table version log: bytes an append writes as the table grows, read cost, and compaction's effect.

    python -m bench.table_log [--appends 1000] [--backends memory,local]

Prints one JSON document. Runs against whatever ``storage_adapter`` is importable, so the same script
measures the previous layout (full fragment list per version; no ``Engine.compact``) for a before/after:
``PYTHONPATH=<old checkout> python bench/table_log.py``. Numbers are recorded in docs/engine.md.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from typing import Any, cast

import pyarrow as pa

from storage_adapter.adapter import open_adapter
from storage_adapter.derived import DerivedOperations
from storage_adapter.engine import Engine, EngineSettings

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
MEASURED = (10, 100, 1000, 10000)


class WriteRecorder(DerivedOperations):
    """Delegates to ``inner``; records the body size of each PUT by key and counts GETs."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.written: dict[str, int] = {}
        self.gets = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def write_if_absent(self, key: str, data: bytes, *args: Any, **kwargs: Any) -> Any:
        self.written[key] = len(data)
        return self.inner.write_if_absent(key, data, *args, **kwargs)

    def write(self, key: str, data: bytes, *args: Any, **kwargs: Any) -> Any:
        self.written[key] = len(data)
        return self.inner.write(key, data, *args, **kwargs)

    def read_bytes(self, key: str) -> bytes:
        self.gets += 1
        data: bytes = self.inner.read_bytes(key)
        return data


def rows(i: int) -> pa.Table:
    return pa.table({"id": [i], "name": [f"row-{i}"]}, schema=SCHEMA)


def timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def run(backend: str, appends: int) -> dict[str, Any]:
    url = f"memory://table-log-{uuid.uuid4().hex}" if backend == "memory" else f"file://{tempfile.mkdtemp()}"
    recorder = WriteRecorder(open_adapter(url))
    engine = Engine.open(cast(Any, recorder), settings=EngineSettings(retention=16))
    engine.create_table("t", SCHEMA)
    version_bytes: dict[int, int] = {}
    metadata_bytes: dict[int, int] = {}  # every non-data, non-manifest PUT of the append
    commit_s: dict[int, float] = {}
    total_meta = 0
    for i in range(1, appends + 1):
        before = dict(recorder.written)
        recorder.written.clear()
        seconds, commit = timed(lambda i=i: engine.commit({"t": rows(i)}))
        new = recorder.written
        table_meta = sum(size for key, size in new.items() if "/_versions/" in key or "/_checkpoints/" in key)
        total_meta += table_meta
        if i in MEASURED:
            version_bytes[i] = new[f"tables/t/_versions/{commit.tables['t']:020d}.json"]
            metadata_bytes[i] = table_meta
            commit_s[i] = seconds
        recorder.written = {**before, **new}
    result: dict[str, Any] = {
        "backend": backend,
        "appends": appends,
        "version_file_bytes": version_bytes,
        "table_metadata_bytes": metadata_bytes,
        "table_metadata_bytes_mean_per_append": round(total_meta / appends),
        "commit_ms": {k: round(v * 1000, 2) for k, v in commit_s.items()},
    }
    result["read"] = read_costs(recorder.inner)
    if hasattr(engine, "compact"):
        written_before = sum(recorder.written.values())
        seconds, commit = timed(lambda: engine.compact("t", target_bytes=64 * 1024 * 1024, min_fragments=16))
        result["compaction"] = {
            "seconds": round(seconds, 3),
            "bytes_written": sum(recorder.written.values()) - written_before,
            "version": None if commit is None else commit.version,
            "read_after": read_costs(recorder.inner),
        }
    return result


def read_costs(adapter: Any) -> dict[str, Any]:
    """A cold reader (fresh engine: nothing cached) and a warm one (same engine, second read)."""
    recorder = WriteRecorder(adapter)
    reader = Engine.open(cast(Any, recorder), read_only=True)
    snap = reader.snapshot()
    store = reader._versions
    # the previous layout has no resolution: its versions list every fragment themselves
    resolve = getattr(store, "fragments", None) or (lambda t, v: vars(store.read(t, v))["fragments"])
    pin = snap.pins["t"]
    metadata_s, fragments = timed(lambda: resolve("t", pin))
    metadata_gets = recorder.gets
    cold_s, table = timed(lambda: Engine.open(adapter, read_only=True).read("t", snap))
    warm_s, _ = timed(lambda: reader.read("t", snap))
    return {
        "fragments": len(fragments),
        "rows": table.num_rows,
        "cold_metadata_ms": round(metadata_s * 1000, 2),
        "cold_metadata_gets": metadata_gets,
        "cold_read_s": round(cold_s, 3),
        "warm_read_s": round(warm_s, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=1000)
    parser.add_argument("--backends", default="memory,local")
    args = parser.parse_args()
    print(json.dumps([run(b, args.appends) for b in args.backends.split(",")], indent=1))


if __name__ == "__main__":
    main()
