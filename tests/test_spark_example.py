"""examples/spark_pipeline.py end to end on local and SeaweedFS: two tables in one commit, read back
through the data source equal to the engine, and a re-run that is a replay (nothing doubled)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from storage_adapter.engine import Engine

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "spark_pipeline.py"


def example() -> Any:
    spec = importlib.util.spec_from_file_location("spark_pipeline", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pipeline_writes_two_tables_atomically_and_a_rerun_doubles_nothing(
    adapter: Any, spark: Any, tmp_path: Path
) -> None:
    if not adapter.capabilities.shared_across_processes:
        pytest.skip("memory stores are per-process: Spark executors cannot reach them")
    pipeline = example()
    options = {k: str(v) for k, v in adapter.config.options}
    raw = pipeline.generate_raw(tmp_path / "raw", batch=1)
    first = pipeline.run(spark, adapter.url, options, raw, batch=1)
    assert not first["replayed"] and first["rows_written"] > 0
    assert first["read_back"] == first["engine_rows"]
    last = Engine.open(adapter).history()[-1]
    assert last.version == first["version"] and set(last.tables) == {"orders", "daily_totals"}  # one commit
    again = pipeline.run(spark, adapter.url, options, raw, batch=1)
    assert again["replayed"] and again["version"] == first["version"] and again["rows_written"] == 0
    assert again["read_back"] == again["engine_rows"] == first["engine_rows"]
