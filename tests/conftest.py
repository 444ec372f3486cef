"""Shared fixtures for the project's own tests.

The storage-contract plugin (contract_tests.plugin) is active here: any test taking ``adapter`` runs once
per embedded backend (memory, local, SeaweedFS) under a fresh prefix. ``spark`` is one SparkSession for
the whole run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from storage_adapter.spark import spark_session

    session = spark_session("local[4]", "storage-adapter-tests")
    yield session
    session.stop()
