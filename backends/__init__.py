"""Deprecated: the old name of :mod:`servers`, the package of S3 servers for tests (it holds servers, not
storage backends: those are ``storage_adapter.registry.Backend``). ``import backends.seaweedfs`` and the
like still work for one release, as the very same modules, with a DeprecationWarning."""

from __future__ import annotations

import sys
import warnings

import servers
import servers.ceph
import servers.containers
import servers.moto
import servers.registry
import servers.seaweedfs
import servers.server

warnings.warn(
    "the package backends is now servers (import servers.seaweedfs, servers.registry, ...); the old name "
    "goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
for _module in (
    servers.ceph,
    servers.containers,
    servers.moto,
    servers.registry,
    servers.seaweedfs,
    servers.server,
):
    _name = _module.__name__.rpartition(".")[2]
    sys.modules[f"{__name__}.{_name}"] = _module
    globals()[_name] = _module

from servers import S3Endpoint, S3Server, ServerUnavailable  # noqa: E402  (after the aliases: same objects)

__all__ = ["S3Endpoint", "S3Server", "ServerUnavailable"]
