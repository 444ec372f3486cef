"""The one place S3 server providers are looked up by name: the CLI, the pytest plugin and CI stages.

``provider("minio")()`` is an unstarted :class:`servers.server.S3Server`; use it as a context manager.
Providers that need Docker are marked so callers can say so before trying (``needs_docker``).
"""

from __future__ import annotations

from servers.ceph import CephRGW
from servers.containers import ContainerS3Server, MinIO, RustFS
from servers.moto import Moto
from servers.seaweedfs import SeaweedFS
from servers.server import S3Server
from storage_adapter.errors import ConfigurationError

PROVIDERS: dict[str, type[S3Server]] = {
    SeaweedFS.name: SeaweedFS,
    MinIO.name: MinIO,
    RustFS.name: RustFS,
    CephRGW.name: CephRGW,
    Moto.name: Moto,
}


def provider_names() -> tuple[str, ...]:
    return tuple(PROVIDERS)


def provider(name: str) -> type[S3Server]:
    """The provider class called ``name``. Raises ConfigurationError listing the known names."""
    try:
        return PROVIDERS[name]
    except KeyError:
        raise ConfigurationError(
            f"unknown S3 server provider {name!r}; choose from {', '.join(PROVIDERS)}", key=name
        ) from None


def needs_docker(name: str) -> bool:
    """Whether provider ``name`` runs in a container (and so needs a reachable Docker engine)."""
    return issubclass(provider(name), ContainerS3Server)
