"""The shipped state machine (contract_tests.stateful) on every backend, and with an out-of-band bypass on
local: writes and deletes made straight on the filesystem must be seen by the adapter."""

from __future__ import annotations

import os
from pathlib import Path

from contract_tests.stateful import run_state_machine
from storage_adapter import StorageAdapter, open_adapter


def test_adapter_behaves_like_a_dict(adapter: StorageAdapter) -> None:
    run_state_machine(adapter)


class FilesystemBypass:
    """Writes files under a local root directly (staged and renamed, so never seen half-written)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def put(self, key: str, data: bytes) -> None:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        staged = path.with_name(path.name + ".bypass-tmp")
        staged.write_bytes(data)
        os.replace(staged, path)

    def delete(self, key: str) -> None:
        (self.root / key).unlink(missing_ok=True)


def test_local_adapter_sees_out_of_band_changes(tmp_path: Path) -> None:
    run_state_machine(open_adapter(f"file://{tmp_path}"), raw=FilesystemBypass(tmp_path))
