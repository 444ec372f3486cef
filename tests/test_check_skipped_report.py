"""Entries another tool left under a judged target's root, which listings leave out (docs/listing.md), are
named in every report of a check (issue 41): the check surveys each judged root once after its clauses ran
(``skipped("")``, one listing) and the console, the Markdown, JSON and JUnit reports and the step summary
show the count and the first entries with their reasons. Information only: the target still conforms, a
survey that fails says so without failing the check, and a root with nothing odd shows nothing."""

from __future__ import annotations

import html
import io
import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from contract_tests import cli
from contract_tests.ci_report import step_summary, to_junit
from contract_tests.conformance import LEFT_OUT_SHOWN, ClauseOutcome, ConformanceRun, RunStatus, run_contract
from contract_tests.plugin import ContractSizes
from contract_tests.report import to_json, to_markdown
from contract_tests.targets import Target
from storage_adapter import open_adapter
from storage_adapter.adapter import ObjectStorageAdapter
from storage_adapter.errors import BackendUnavailableError
from storage_adapter.servers.server import S3Endpoint

SMALL = ContractSizes(threads=2, processes=2, increments=2, check_budget_s=10.0, clause_timeout_s=60.0)
CLAUSE = "round_trip_bytes"
LEFT_OUT = "under the root listings leave out"


def _plant(url: str, entries: dict[str, bytes], **options: Any) -> None:
    """Write ``entries`` below the root of ``url`` as another tool would: through the backend's raw store."""
    config = open_adapter(url, **options).config
    make = config.spec.foreign_writer
    assert make is not None, config.spec.name
    writer = make(config)
    for name, data in entries.items():
        writer.put(name, data)


def _check(*targets: Target) -> ConformanceRun:
    run = run_contract(list(targets), sizes=SMALL, selection=CLAUSE)
    assert run.status is RunStatus.CONFORMS, [r.reason for r in run.results]  # information, not a verdict
    return run


def _console(run: ConformanceRun) -> str:
    out = io.StringIO()
    cli._print_run(run, Console(file=out, width=200), "see the report check.md")
    return out.getvalue()


def _reports(run: ConformanceRun) -> dict[str, str]:
    return {
        "console": _console(run),
        "markdown": to_markdown(run),
        "junit": html.unescape(to_junit(run)),
        "summary": step_summary(run, "see the report check.md"),
    }


def _assert_named(run: ConformanceRun, target: str, expected: Iterable[tuple[str, str, str]]) -> None:
    """Every report format names each (name, reason, detail) of ``expected`` for ``target``."""
    expected = list(expected)
    (listed,) = [entry for entry in to_json(run)["left_out"] if entry["target"] == target]
    assert listed["count"] == len(expected) and listed["error"] is None
    assert {(e["name"], e["reason"], e["detail"]) for e in listed["entries"]} == set(expected)
    for form, text in _reports(run).items():
        assert f"{target}: {len(expected)} entries {LEFT_OUT}" in text, form
        for name, reason, detail in expected:
            shown = f"{name!r} ({reason})" if reason == "folder marker" else f"{name!r} ({reason}: {detail})"
            assert shown in text, (form, shown)
    assert "docs/listing.md" in _console(run)


def test_memory_names_what_another_tool_left_and_a_clean_root_shows_nothing() -> None:
    odd = Target("odd", f"memory://left-out-{uuid.uuid4().hex[:8]}")
    clean = Target("clean", f"memory://left-out-{uuid.uuid4().hex[:8]}")
    _plant(odd.address, {"back\\slash": b"x", "stage#123": b"yy"})
    run = _check(odd, clean)
    _assert_named(
        run,
        "odd",
        [
            ("back\\slash", "invalid key", "backslash"),
            ("stage#123", "invalid key", "segment ending in '#<digits>' is reserved for staging files"),
        ],
    )
    assert run.verdict(odd).conforms and run.conforms
    assert [entry["target"] for entry in to_json(run)["left_out"]] == ["odd"]
    for form, text in _reports(run).items():
        assert "clean:" not in "".join(ln for ln in text.splitlines() if LEFT_OUT in ln), form


def test_a_run_with_nothing_left_out_has_no_line_and_no_section() -> None:
    run = _check(Target("clean", f"memory://left-out-{uuid.uuid4().hex[:8]}"))
    assert to_json(run)["left_out"] == [] and run.left_out == ()
    for form, text in _reports(run).items():
        assert LEFT_OUT not in text and "could not survey" not in text, form
    assert "## Entries listings leave out" not in to_markdown(run)


def test_local_names_a_tab_and_a_staging_lookalike() -> None:
    with tempfile.TemporaryDirectory(prefix="left-out-") as root:
        target = Target("local", Path(root).as_uri())
        _plant(target.address, {"a\tb": b"x", "stage#123": b"x"})
        run = _check(target)
    _assert_named(
        run,
        "local",
        [
            ("a\tb", "invalid key", "NUL or control character"),
            ("stage#123", "invalid key", "segment ending in '#<digits>' is reserved for staging files"),
        ],
    )


def test_seaweedfs_names_a_folder_marker_and_a_tab(embedded_seaweedfs: S3Endpoint) -> None:
    target = Target("seaweedfs", embedded_seaweedfs.url(f"left-out-{uuid.uuid4().hex[:8]}"))
    _plant(target.address, {"dir/": b"", "a\tb": b"x"}, **embedded_seaweedfs.adapter_options())
    with embedded_seaweedfs.scoped():
        run = _check(target)
    marker = "a zero-byte object whose name ends in '/' marks a folder"
    _assert_named(
        run,
        "seaweedfs",
        [("dir/", "folder marker", marker), ("a\tb", "invalid key", "NUL or control character")],
    )


def test_only_the_first_entries_are_shown_with_how_many_more() -> None:
    target = Target("many", f"memory://left-out-{uuid.uuid4().hex[:8]}")
    count = LEFT_OUT_SHOWN + 3
    _plant(target.address, {f"x{i:02d}\\y": b"x" for i in range(count)})
    run = _check(target)
    (listed,) = to_json(run)["left_out"]
    assert listed["count"] == count and len(listed["entries"]) == LEFT_OUT_SHOWN
    for form, text in _reports(run).items():
        assert f"many: {count} entries {LEFT_OUT}" in text, form
        assert repr(f"x{LEFT_OUT_SHOWN - 1:02d}\\y") in text and repr(f"x{LEFT_OUT_SHOWN:02d}\\y") not in text
        assert "and 3 more" in text, form


def test_a_survey_that_fails_is_reported_and_does_not_fail_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: ObjectStorageAdapter, prefix: str = "") -> list[Any]:
        raise BackendUnavailableError("listing refused: the server is gone\nsecond line")

    monkeypatch.setattr(ObjectStorageAdapter, "skipped", refuse)
    run = _check(Target("gone", f"memory://left-out-{uuid.uuid4().hex[:8]}"))
    (listed,) = to_json(run)["left_out"]
    assert listed["count"] == 0 and listed["entries"] == []
    assert "listing refused: the server is gone" in listed["error"] and "second line" not in listed["error"]
    for form, text in _reports(run).items():
        assert "gone: entries " + LEFT_OUT in text and "could not survey: " in text, form
        assert "listing refused: the server is gone" in text and "second line" not in text, form


def test_peers_are_not_surveyed() -> None:
    """A peer is compared, never judged: the rule is the adapter's, so its root is not surveyed (here a
    peer opened by the adapter's own factory, on a root that holds an odd name)."""
    url = f"memory://left-out-{uuid.uuid4().hex[:8]}"
    _plant(url, {"back\\slash": b"x"})
    judged = Target("judged", f"memory://left-out-{uuid.uuid4().hex[:8]}")
    run = run_contract(
        [judged, Target("peer", url, peer=True)], sizes=SMALL, peer_sizes=SMALL, selection=CLAUSE
    )
    assert {r.target for r in run.results} == {"judged", "peer"}
    assert to_json(run)["left_out"] == [] and LEFT_OUT not in _console(run)


def test_the_clauses_that_plant_odd_entries_leave_none_for_the_survey(embedded_seaweedfs: S3Endpoint) -> None:
    """The contract plants odd names and folder markers itself (contract_tests/foreign_clauses.py) and
    removes them: a check must not report its own plants as another tool's."""
    selection = "odd_names or leaves_out or folder_marker or listing"
    with tempfile.TemporaryDirectory(prefix="left-out-") as root:
        targets = [
            Target("memory", f"memory://left-out-{uuid.uuid4().hex[:8]}"),
            Target("local", Path(root).as_uri()),
            Target("seaweedfs", embedded_seaweedfs.url(f"left-out-{uuid.uuid4().hex[:8]}")),
        ]
        with embedded_seaweedfs.scoped():
            run = run_contract(targets, sizes=SMALL, selection=selection)
    planting = {
        r.clause for r in run.results if r.target == "seaweedfs" and r.outcome is ClauseOutcome.PASSED
    }
    assert "test_a_folder_marker_is_no_object_and_makes_no_directory" in planting, run.results
    assert run.left_out == (), [found.line() for found in run.left_out]
