"""Spark as the parallel driver: recorded workload histories from Spark barrier tasks are linearizable,
planted bugs are caught, and the plain races (creates, CAS increments) have exact outcomes.

Uses the session's ``spark`` fixture (local[4]): barrier stages of 4 tasks. Default sizes: one workload
of 4 tasks x WorkloadSpec() (~370 ops) per shared backend; the create race is 4 tasks x 8 keys; the CAS
race is 4 tasks x 10 increments. Under ``-m stress``: 4 tasks x 30 rounds (~4,400 ops) and 4 x 50
increments. Memory stores are per-process, so Spark runs skip them with the reason from capabilities.
"""

from __future__ import annotations

import pytest
from stress_support import (
    DEFAULT_SPEC,
    STRESS_SPEC,
    assert_caught,
    assert_linearizable,
    bug_spec,
    planted,
    skip_unless_shared,
)

from contract_tests.planted_bugs import PLANTED_BUGS
from contract_tests.spark_races import race_cas_increments, race_write_if_absent, run_workload_on_spark

TASKS = 4


def test_spark_history_is_linearizable(adapter, spark) -> None:
    skip_unless_shared(adapter)
    assert_linearizable(run_workload_on_spark(spark, adapter, DEFAULT_SPEC, TASKS), minimum_ops=300)


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_planted_bug_is_caught_in_spark_tasks(adapter, spark, bug: str) -> None:
    skip_unless_shared(adapter)
    assert_caught(run_workload_on_spark(spark, planted(adapter, bug), bug_spec(), TASKS))


def test_spark_create_race_has_exactly_one_winner_per_key(adapter, spark) -> None:
    skip_unless_shared(adapter)
    race = race_write_if_absent(spark, adapter, [f"race/{i}" for i in range(8)], TASKS)
    assert race.exactly_one_winner_per_key, race


def test_spark_cas_increments_are_exact(adapter, spark) -> None:
    skip_unless_shared(adapter)
    result = race_cas_increments(spark, adapter, "counter", increments=10, tasks=TASKS)
    assert result.exact, result
    print(f"\n{result}")


def test_spark_races_catch_the_planted_bugs(adapter, spark) -> None:
    skip_unless_shared(adapter)
    creates = race_write_if_absent(
        spark, planted(adapter, "check_then_act_create"), [f"race/{i}" for i in range(4)], TASKS
    )
    assert not creates.exactly_one_winner_per_key
    increments = race_cas_increments(
        spark, planted(adapter, "racy_cas"), "counter", increments=5, tasks=TASKS
    )
    assert not increments.exact and increments.final < increments.expected and not increments.cut_off


def test_barrier_stage_wider_than_the_slots_is_refused(adapter, spark) -> None:
    slots = spark.sparkContext.defaultParallelism
    with pytest.raises(ValueError, match="free task slots"):
        race_write_if_absent(spark, adapter, ["k"], tasks=slots + 1)


@pytest.mark.stress
def test_stress_spark_history_is_linearizable(adapter, spark) -> None:
    skip_unless_shared(adapter)
    assert_linearizable(run_workload_on_spark(spark, adapter, STRESS_SPEC, TASKS), minimum_ops=4000)


@pytest.mark.stress
def test_stress_spark_cas_increments_are_exact(adapter, spark) -> None:
    skip_unless_shared(adapter)
    assert race_cas_increments(spark, adapter, "counter", increments=50, tasks=TASKS).exact
