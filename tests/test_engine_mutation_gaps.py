"""The engine's promises the mutation campaign found unguarded (docs/mutation.md, "The layers built on the
adapter"): ``commit_fragments`` refuses a fragment written more than half the grace period ago (vacuum
may be reclaiming it), before anything is visible, and commits one written within it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from test_engine_tables_spark_ready import D1, EVENTS, events

from storage_adapter.engine import Engine, EngineSettings, StaleFragmentError
from storage_adapter.engine.layout import MANIFEST_KEY

GRACE_S = 100.0


def _written(seconds_ago: float) -> str:
    return (datetime.now(UTC) - timedelta(seconds=seconds_ago)).isoformat(timespec="microseconds")


def test_commit_fragments_refuses_a_fragment_older_than_half_the_grace_period(adapter):
    engine = Engine.open(adapter, settings=EngineSettings(grace_s=GRACE_S))
    engine.create_table("ev", EVENTS)
    (ref,) = engine.write_fragments("ev", events([1], [D1], ["eu"]))
    before = adapter.read_bytes(MANIFEST_KEY)
    with pytest.raises(StaleFragmentError):
        engine.commit_fragments({"ev": [replace(ref, written_at=_written(0.6 * GRACE_S))]})
    assert adapter.read_bytes(MANIFEST_KEY) == before
    engine.commit_fragments({"ev": [replace(ref, written_at=_written(0.4 * GRACE_S))]})
    assert engine.read("ev").num_rows == 1
