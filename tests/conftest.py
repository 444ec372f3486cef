"""Shared fixtures for the project's own tests.

The storage-contract plugin (contract_tests.plugin) is active here; ``adapter`` and ``embedded_seaweedfs``
name its prefixed fixtures for this project's tests: a test taking ``adapter`` runs once per embedded
backend (memory, local, SeaweedFS) under a fresh prefix. ``spark`` is one SparkSession for
the whole run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from backends.server import S3Endpoint
from contract_tests.plugin import ServerPool
from storage_adapter.protocol import StorageAdapter


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from storage_adapter.spark import spark_session

    session = spark_session("local[4]", "storage-adapter-tests")
    yield session
    session.stop()


@pytest.fixture
def adapter(storage_contract_adapter: StorageAdapter) -> StorageAdapter:
    """The contract plugin's adapter: a test taking it runs once per embedded backend, under a fresh prefix."""
    return storage_contract_adapter


@pytest.fixture(scope="session")
def embedded_seaweedfs(storage_contract_servers: ServerPool) -> S3Endpoint:
    """One SeaweedFS S3 server for the whole run (shared with the contract's seaweedfs target)."""
    return storage_contract_servers.endpoint("seaweedfs")
