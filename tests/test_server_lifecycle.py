"""A test server leaves nothing behind but its log: ``stop`` removes its process, its working directory
and every file it made outside it (storage_adapter.servers.server.ProcessServer)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from storage_adapter import open_adapter
from storage_adapter.servers.seaweedfs import SeaweedFS


def test_a_stopped_seaweedfs_leaves_only_its_log() -> None:
    server = SeaweedFS(bucket="lifecycle")
    with server as endpoint:
        adapter = open_adapter(endpoint.url("p"), **endpoint.adapter_options())
        adapter.write("k", b"v")
        workdir = server._workdir
        assert workdir is not None and Path(workdir).is_dir()
        port = urlsplit(endpoint.endpoint).port
    assert server._process is None and server._workdir is None
    assert not Path(workdir).exists()
    # weed's S3 gateway socket defaults to /tmp and outlives the process: it must live in the workdir
    assert not Path(f"/tmp/seaweedfs-s3-{port}.sock").exists()
    assert server.log_path is not None and server.log_path.is_file()
