"""``storage-adapter check --server NAME`` on real servers finishes within its documented bound (docs/check.md:
under 5 minutes) with a complete report in all three formats, and names exactly what the server violates.

Ceph RGW 16.2 (skipped with the provider's reason where scripts/install-ceph.sh has not run) used to hang
the check; moto is a pure-Python peer server that keeps every clause at default sizes but one of the wire:
it overwrites on ``If-None-Match: <the current ETag>``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contract_tests.remedies import QUIRKS
from storage_adapter.servers.ceph import ceph_binaries
from storage_adapter.servers.server import ServerUnavailable

# The nightly servers tier (docs/ci.md): a second real S3 server beside the embedded SeaweedFS.
pytestmark = pytest.mark.servers

ROOT = Path(__file__).resolve().parent.parent
# The check's own bound is its total budget (--budget, 900 s by default). These runs stay far below it:
# 86 clauses took 224 s (moto) and 331 s (Ceph, the compatibility mode 305 s) on a busy 2-core machine.
BOUND_S = 600
WIRE_CLAUSES = "if_none_match or delete_if_match"
WIRE_PUT = "test_put_if_none_match_with_the_current_etag_never_overwrites"
WIRE_DELETE = "test_delete_if_match_with_a_stale_etag_never_deletes"
CEPH_16_FAILURES = {
    "test_cas_fresh_token_wins",
    "test_cas_increments_threads",
    "test_cas_increments_processes",
    "test_mixed_history_is_linearizable_threads",
    "test_mixed_history_is_linearizable_processes",
    # The writers these clauses sweep beside CAS each body with its own write's token, which Ceph 16.2
    # refuses (unquoted If-Match): their evidence names that CAS, not remove_orphans.
    "test_remove_orphans_spares_writes_in_flight_threads",
    "test_remove_orphans_spares_writes_in_flight_processes",
    # The same refusal: a CAS with the token write_if_absent returned (a quoted ETag) is answered 412.
    "test_write_if_absent_returns_the_new_token",
    # Streams (issue 20): Ceph 16.2 answers CompleteMultipartUpload with no ETag, so a streamed write
    # past one part returns an empty token where read_versioned reports "<md5>-<parts>" (an open defect
    # of the adapter on such servers), and a streamed CAS meets the If-Match refusal above.
    "test_a_streamed_write_is_visible_only_complete",
    "test_a_streamed_create_has_one_winner_or_is_refused",
    # The server itself, on the wire (contract_tests/wire_clauses.py): a PUT with If-None-Match carrying
    # the current quoted ETag overwrites, a DELETE with a stale If-Match deletes (docs/ceph.md).
    WIRE_PUT,
    WIRE_DELETE,
}
# Ceph 16.2 (memstore) sometimes answers a DeleteObjects of a renamed source with a per-key UnknownError
# while renames cross (seen once in several runs on a loaded host): reported with that evidence, not always.
CEPH_16_INTERMITTENT = {"test_crossing_renames_finish_and_keep_every_object"}


def _check(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict, str, float]:
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "contract_tests",
            "check",
            *args,
            "--no-peers",
            "--report",
            str(tmp_path / "r"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=BOUND_S + 120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    elapsed = time.monotonic() - started
    report = json.loads((tmp_path / "r.json").read_text())
    return result, report, (tmp_path / "r.md").read_text(), elapsed


def _ceph_or_skip() -> None:
    try:
        ceph_binaries()
    except ServerUnavailable as exc:
        pytest.skip(str(exc))


def test_check_on_ceph_rgw_names_its_failures_with_evidence(tmp_path: Path) -> None:
    _ceph_or_skip()
    result, report, markdown, elapsed = _check(tmp_path, "--server", "ceph")
    assert elapsed < BOUND_S
    assert result.returncode == 1, result.stdout[-4000:]
    (target,) = report["targets"]
    if "16.2." in report["versions"]["ceph"]:
        assert CEPH_16_FAILURES <= set(target["violations"]) <= CEPH_16_FAILURES | CEPH_16_INTERMITTENT
    assert target["inconclusive"] == []
    failed = [r for r in report["results"] if r["outcome"] == "fail"]
    assert all(r["evidence"] for r in failed)  # every failure says why, in every format
    for row in failed:
        assert row["evidence"] in markdown and row["evidence"].splitlines()[0] in result.stdout
    # The failures of the quoted-If-Match quirk name its option (contract_tests/remedies.py), no other does.
    (quoted_if_match,) = [q for q in QUIRKS if q.option == "unquoted_if_match"]
    for row in failed:
        named = (
            "remedy:" in row["evidence"] and "STORAGE_ADAPTER_S3_UNQUOTED_IF_MATCH=true" in row["evidence"]
        )
        assert named == (row["clause"] in quoted_if_match.clauses), row


def test_check_on_ceph_rgw_with_the_compatibility_mode_is_partial(tmp_path: Path) -> None:
    _ceph_or_skip()
    result, report, markdown, elapsed = _check(tmp_path, "--server", "ceph", "--compat", "unquoted-if-match")
    assert elapsed < BOUND_S
    assert report["compatibility_modes"] == {"ceph": ["unquoted-if-match"]}
    assert "compatibility mode unquoted-if-match is ON" in markdown and "is ON" in result.stdout
    (target,) = report["targets"]
    assert not target["conforms"] and target["verdict"].startswith("ceph: PARTIAL with compatibility mode")
    assert "cas_fresh_token_wins" not in " ".join(target["violations"])  # the mode fixes plain CAS
    assert "remedy:" not in markdown  # the option is on: nothing to suggest


def test_the_wire_clauses_pin_both_ceph_deviations(tmp_path: Path) -> None:
    """Ceph RGW 16.2.15 overwrites on If-None-Match with the current quoted ETag (the unquoted one it
    compares literally, and refuses) and deletes on a stale If-Match, quoted or not (docs/ceph.md)."""
    _ceph_or_skip()
    result, report, markdown, _ = _check(tmp_path, "--server", "ceph", "--clauses", WIRE_CLAUSES)
    assert result.returncode == 1, result.stdout[-4000:]
    rows = {r["clause"]: r for r in report["results"]}
    assert {c: r["outcome"] for c, r in rows.items()} == {WIRE_PUT: "fail", WIRE_DELETE: "fail"}
    if "16.2." in report["versions"]["ceph"]:
        put, delete = rows[WIRE_PUT], rows[WIRE_DELETE]
        assert put["reason"] == (
            "a PUT with If-None-Match: <the current ETag> was not refused (quoted ETag: 200, replaced)"
        )
        assert delete["reason"] == (
            "a DELETE with If-Match: <a stale ETag> was not refused "
            "(quoted ETag: 204, deleted; unquoted ETag: 204, deleted)"
        )
        quoted, _, _, unquoted, before, after = put["evidence"].splitlines()
        assert (
            quoted.startswith("quoted: PUT ") and 'If-None-Match: "' in quoted and quoted.endswith("-> 200")
        )
        assert unquoted.endswith("-> 412 PreconditionFailed") and before.split()[1:] == after.split()[1:]
        assert [line.split("->")[-1] for line in delete["evidence"].splitlines()[::3]] == [" 204", " 204"]
        assert delete["evidence"].count("after:  absent (404 NoSuchKey)") == 2
    for row in rows.values():
        assert row["evidence"] in markdown and row["reason"] in result.stdout
        assert "remedy:" not in row["evidence"]  # no option of the adapter changes what the server does


def test_check_on_moto_fails_only_if_none_match_with_the_current_etag(tmp_path: Path) -> None:
    """moto 5.2.5 keeps every clause at default sizes but one: a PUT with If-None-Match carrying the
    object's current ETag overwrites it, quoted or not (docs/check.md)."""
    result, report, markdown, elapsed = _check(tmp_path, "--server", "moto")
    assert elapsed < BOUND_S
    assert result.returncode == 1, result.stdout[-4000:]
    assert report["status"] == "violations" and report["versions"]["moto"].startswith("moto 5.")
    (target,) = report["targets"]
    assert target["violations"] == [WIRE_PUT] and target["inconclusive"] == []
    (failed,) = [r for r in report["results"] if r["outcome"] == "fail"]
    assert failed["reason"] == (
        "a PUT with If-None-Match: <the current ETag> was not refused "
        "(quoted ETag: 200, replaced; unquoted ETag: 200, replaced)"
    )
    requests = failed["evidence"].splitlines()[::3]
    assert [line.split(":")[0] for line in requests] == ["quoted", "unquoted"]
    assert all(" If-None-Match: " in line and line.endswith("-> 200") for line in requests)
    assert failed["evidence"] in markdown and failed["reason"] in result.stdout
