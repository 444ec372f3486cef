"""The one place server providers are looked up by name: the CLI, the pytest plugin and CI stages.

``provider("minio")()`` is an unstarted :class:`storage_adapter.servers.server.Server` (an S3 server, or Azurite for Azure
Blob Storage); use it as a context manager.
Providers that need Docker are marked so callers can say so before trying (``needs_docker``).
"""

from __future__ import annotations

from typing import Any

from storage_adapter.errors import ConfigurationError
from storage_adapter.servers.azurite import Azurite
from storage_adapter.servers.ceph import CephRGW
from storage_adapter.servers.containers import ContainerS3Server, MinIO, RustFS
from storage_adapter.servers.moto import Moto
from storage_adapter.servers.seaweedfs import SeaweedFS
from storage_adapter.servers.server import Server

PROVIDERS: dict[str, type[Server[Any]]] = {
    SeaweedFS.name: SeaweedFS,
    MinIO.name: MinIO,
    RustFS.name: RustFS,
    CephRGW.name: CephRGW,
    Moto.name: Moto,
    Azurite.name: Azurite,
}


def provider_names() -> tuple[str, ...]:
    return tuple(PROVIDERS)


def provider(name: str) -> type[Server[Any]]:
    """The provider class called ``name``. Raises ConfigurationError listing the known names."""
    try:
        return PROVIDERS[name]
    except KeyError:
        raise ConfigurationError(
            f"unknown server provider {name!r}; choose from {', '.join(PROVIDERS)}", key=name
        ) from None


def needs_docker(name: str) -> bool:
    """Whether provider ``name`` runs in a container (and so needs a reachable Docker engine)."""
    return issubclass(provider(name), ContainerS3Server)
