"""AdapterFileSystem: pyarrow, pandas and DuckDB read engine fragments through the fsspec interface, with the
adapter's key rules (typed errors for bad and missing paths, nothing outside the root) and its guarantees
(ranged reads, one version per open file, atomic writes)."""

from __future__ import annotations

import pickle
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from random import Random
from typing import Any

import duckdb
import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
from counted_reads import CountedReads

from contract_tests.foreign_clauses import Planted, plant_foreign
from storage_adapter import open_adapter
from storage_adapter.engine import Engine
from storage_adapter.errors import InvalidKeyError, NotFoundError, UnsupportedOperationError
from storage_adapter.fsspec_filesystem import AdapterFileSystem
from storage_adapter.keys import key_problem
from storage_adapter.protocol import StorageAdapter

ROOT = Path(__file__).resolve().parent.parent
ROWS = pa.table(
    {
        "id": pa.array(range(1000), pa.int64()),
        "name": [f"n{i}" for i in range(1000)],
        "score": pa.array([i / 7 for i in range(1000)], pa.float64()),
    }
)


@pytest.fixture(params=["memory", "local"])
def plain(request: pytest.FixtureRequest, tmp_path: Path) -> StorageAdapter:
    """A fresh adapter on memory or local (``adapter`` adds SeaweedFS, for the tests that need it)."""
    if request.param == "memory":
        return open_adapter(f"memory://fsspec-{uuid.uuid4().hex[:8]}")
    return open_adapter(f"file://{tmp_path}")


def fragment_of(adapter: StorageAdapter) -> str:
    """An engine table ``t`` with ROWS committed as one fragment; its key."""
    engine = Engine.open(adapter)
    engine.create_table("t", ROWS.schema)
    engine.commit({"t": ROWS})
    (key,) = [info.key for info in adapter.list("tables/t/data")]
    return key


def test_pyarrow_pandas_and_duckdb_read_an_engine_fragment(adapter: StorageAdapter) -> None:
    """On memory, local and SeaweedFS."""
    key = fragment_of(adapter)
    fs = AdapterFileSystem(adapter)
    assert pq.read_table(key, filesystem=fs).equals(ROWS)
    projected = pads.dataset([key], filesystem=fs, format="parquet").to_table(columns=["name"])
    assert projected.column_names == ["name"] and projected.column("name").equals(ROWS.column("name"))
    assert pads.dataset("tables/t/data", filesystem=fs, format="parquet").count_rows() == 1000
    frame = pd.read_parquet(f"sa://{key}", filesystem=fs, columns=["id", "score"])
    assert list(frame.columns) == ["id", "score"] and frame["id"].sum() == sum(range(1000))
    with duckdb.connect() as connection:
        connection.register_filesystem(fs)
        assert connection.sql(f"select count(*), sum(id) from read_parquet('sa://{key}')").fetchall() == [
            (1000, sum(range(1000)))
        ]
        assert connection.sql(
            "select max(name) from read_parquet('sa://tables/t/data/*.parquet')"
        ).fetchall() == [("n999",)]


def test_a_projection_reads_little_more_than_its_column(plain: StorageAdapter) -> None:
    """Each read of an open file is one ranged read, so pyarrow and DuckDB fetch the footer and the
    column's chunks, not the payload beside them (a read-ahead cache is there when asked for)."""
    payload = pa.table(
        {
            "id": pa.array(range(20_000), pa.int64()),
            "payload": [Random(i).randbytes(500) for i in range(20_000)],
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(payload, sink, row_group_size=5000)
    plain.write("f.parquet", sink.getvalue().to_pybytes())
    size, counted = len(sink.getvalue()), CountedReads(plain)
    fs = AdapterFileSystem(counted)  # type: ignore[arg-type]
    assert pq.read_table("f.parquet", filesystem=fs, columns=["id"]).column("id").equals(payload.column("id"))
    assert sum(counted.read) < size / 20, (counted.read, size)
    counted.read.clear()
    with duckdb.connect() as connection:
        connection.register_filesystem(fs)
        assert connection.sql("select sum(id) from read_parquet('sa://f.parquet')").fetchall() == [
            (sum(range(20_000)),)
        ]
    assert sum(counted.read) < size / 20, (counted.read, size)
    counted.read.clear()
    readahead = AdapterFileSystem(counted, cache_type="readahead", block_size=1 << 20)  # type: ignore[arg-type]
    with readahead.open("f.parquet") as f:
        assert len(f.read(10)) == 10
    assert counted.read == [10 + (1 << 20)]


def test_pandas_opens_the_filesystem_from_storage_options(plain: StorageAdapter) -> None:
    key = fragment_of(plain)
    frame = pd.read_parquet(f"sa://{key}", storage_options={"root": plain.url}, columns=["name"])
    assert frame["name"].tolist() == ROWS.column("name").to_pylist()
    fs = fsspec.filesystem("storage-adapter", root=plain.url)
    assert isinstance(fs, AdapterFileSystem) and fs.adapter == plain and fs == plain.to_fsspec()


def test_listing_info_and_times(plain: StorageAdapter) -> None:
    fs = plain.to_fsspec()
    for key in ("d/a.txt", "d/e/b.txt", "d/e/f/c.txt", "top"):
        fs.pipe_file(key, key.encode())
    assert fs.ls("d", detail=False) == ["d/a.txt", "d/e"]
    detail = {e["name"]: e for e in fs.ls("sa://d/")}
    assert detail["d/a.txt"]["size"] == 7 and detail["d/a.txt"]["type"] == "file"
    assert detail["d/e"]["type"] == "directory"
    assert fs.ls("", detail=False) == ["d", "top"]
    assert fs.ls("top", detail=False) == ["top"]  # an object lists as itself
    assert fs.find("d") == ["d/a.txt", "d/e/b.txt", "d/e/f/c.txt"]
    assert fs.find("d", withdirs=True) == ["d", "d/a.txt", "d/e", "d/e/b.txt", "d/e/f", "d/e/f/c.txt"]
    assert fs.find("d", maxdepth=1) == ["d/a.txt"]
    assert fs.find("top") == ["top"] and fs.find("nothing") == []
    info = fs.info("d/e/b.txt")
    assert (info["size"], info["type"], info["token"]) == (9, "file", plain.read_versioned("d/e/b.txt").token)
    assert fs.info("d/e")["type"] == "directory" and fs.isdir("d/e") and fs.isfile("top")
    assert fs.exists("d") and fs.exists("d/e/f/c.txt") and not fs.exists("d/x") and fs.exists("")
    assert isinstance(fs.modified("d/a.txt"), datetime) and fs.created("d/a.txt") == fs.modified("d/a.txt")
    fs.mkdir("empty/dir")
    fs.makedirs("empty/dir", exist_ok=True)
    assert not fs.exists("empty")  # a directory is a prefix holding objects
    fs.rm("d", recursive=True)
    assert [i.key for i in plain.list()] == ["top"] and fs.ls("", detail=False) == ["top"]


def test_ranged_cat_file_is_one_ranged_read(plain: StorageAdapter) -> None:
    data = bytes(range(256)) * 16
    plain.write("blob", data)
    calls: list[str] = []

    class Recording:
        def __getattr__(self, name: str) -> Any:
            calls.append(name)
            return getattr(plain, name)

    fs = AdapterFileSystem(Recording())  # type: ignore[arg-type]
    assert fs.cat_file("blob", 100, 200) == data[100:200]
    assert calls == ["backend", "read_range"]
    assert fs.cat_file("blob", 4000) == data[4000:] and fs.cat_file("blob", 5000, 6000) == b""
    assert fs.cat_file("blob", -10) == data[-10:] and fs.cat_file("blob", 10, -10) == data[10:-10]
    assert fs.cat_file("blob") == data and fs.cat("sa://blob") == data
    with fs.open("blob", "rb", block_size=1024) as f:
        f.seek(1000)
        assert f.read(10) == data[1000:1010] and f.size == len(data)
        assert f.details["token"] == plain.read_versioned("blob").token


def test_an_open_file_reads_one_version(plain: StorageAdapter) -> None:
    fs = plain.to_fsspec()
    fs.pipe_file("v", b"a" * 4096)
    with fs.open("v", "rb", block_size=16, cache_type="none") as f:
        assert f.read(16) == b"a" * 16
        plain.write("v", b"b" * 4096)
        try:
            rest = f.read()
        except Exception as exc:  # S3 and memory refuse to mix versions
            assert type(exc).__name__ == "ObjectChangedError"
        else:  # local keeps the opened file
            assert rest == b"a" * 4080


def test_written_files_appear_whole_on_close(plain: StorageAdapter) -> None:
    fs = plain.to_fsspec()
    with fs.open("w/out.bin", "wb", block_size=1024) as f:  # spooled to disk past 1 KiB
        for _ in range(10):
            f.write(b"x" * 1000)
        assert not plain.exists("w/out.bin")
    assert plain.read_bytes("w/out.bin") == b"x" * 10_000
    with pytest.raises(RuntimeError), fs.open("w/out.bin", "wb") as f:
        f.write(b"partial")
        raise RuntimeError("the writer fails")
    assert plain.read_bytes("w/out.bin") == b"x" * 10_000  # nothing of the failed file
    with pytest.raises(FileExistsError), fs.open("w/out.bin", "xb") as f:
        f.write(b"second")
    with fs.open("w/new.bin", "xb") as f:
        f.write(b"first")
    assert plain.read_bytes("w/new.bin") == b"first"
    with pytest.raises(FileExistsError):
        fs.pipe_file("w/new.bin", b"again", mode="create")
    fs.pipe("w/new.bin", b"replaced")
    assert fs.cat("w/new.bin") == b"replaced"
    pq.write_table(ROWS, "w/t.parquet", filesystem=fs)
    assert pq.read_table("w/t.parquet", filesystem=fs).equals(ROWS)
    fs.rm_file("w/new.bin")
    fs.rm_file("w/new.bin")  # deleting a missing object is no error, as on the adapter
    assert not plain.exists("w/new.bin")
    with pytest.raises(UnsupportedOperationError, match="mode 'ab'"):
        fs.open("w/out.bin", "ab")


BAD_PATHS = ["../x", "/x", "a/../../x", "a//b", "sa://../x", "a\x00b", "a\\b", "./a"]
CALLS: dict[str, Callable[[AdapterFileSystem, str], object]] = {
    "info": lambda fs, p: fs.info(p),
    "ls": lambda fs, p: fs.ls(p),
    "find": lambda fs, p: fs.find(p),
    "exists": lambda fs, p: fs.exists(p),
    "cat_file": lambda fs, p: fs.cat_file(p, 0, 4),
    "open_rb": lambda fs, p: fs.open(p, "rb"),
    "open_wb": lambda fs, p: fs.open(p, "wb"),
    "pipe_file": lambda fs, p: fs.pipe_file(p, b"x"),
    "rm_file": lambda fs, p: fs.rm_file(p),
    "modified": lambda fs, p: fs.modified(p),
    "mkdir": lambda fs, p: fs.mkdir(p),
}


@pytest.mark.parametrize("call", CALLS)
def test_bad_paths_are_invalid_keys_and_nothing_leaves_the_root(
    call: str, plain: StorageAdapter, tmp_path: Path
) -> None:
    plain.write("outside", b"secret")
    fs = plain.child("inner").to_fsspec()
    for path in BAD_PATHS:
        with pytest.raises(InvalidKeyError) as caught:
            CALLS[call](fs, path)
        assert isinstance(caught.value, ValueError) and caught.value.backend == plain.backend
    assert [i.key for i in plain.list()] == ["outside"]
    assert fs.ls("", detail=False) == [] and not fs.exists("outside")


@pytest.mark.parametrize("call", ["info", "cat_file", "open_rb", "ls", "modified"])
def test_missing_paths_are_not_found(call: str, plain: StorageAdapter) -> None:
    with pytest.raises(NotFoundError, match="missing") as caught:
        CALLS[call](plain.to_fsspec(), "dir/missing")
    assert isinstance(caught.value, FileNotFoundError)


def test_pickles_as_its_adapter_and_is_not_cached_across_options(plain: StorageAdapter) -> None:
    fs = plain.to_fsspec(block_size=4096)
    fs.pipe_file("k", b"v")
    clone = pickle.loads(pickle.dumps(fs))
    assert clone == fs and clone.blocksize == 4096 and clone.cat_file("k") == b"v"
    with pytest.raises(TypeError, match="not both"):
        AdapterFileSystem(plain, root=plain.url)


def test_the_protocols_are_declared_as_fsspec_entry_points() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    specs = project["project"]["entry-points"]["fsspec.specs"]
    assert specs == {
        "sa": "storage_adapter.fsspec_filesystem:AdapterFileSystem",
        "storage-adapter": "storage_adapter.fsspec_filesystem:AdapterFileSystem",
    }
    assert fsspec.get_filesystem_class("sa") is AdapterFileSystem


def test_the_core_does_not_import_fsspec() -> None:
    """fsspec is an extra: the adapter imports the filesystem only when ``to_fsspec`` is called."""
    code = "import sys, storage_adapter; storage_adapter.open_adapter('memory://x'); print('fsspec' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.strip() == "False"


def test_options_given_to_the_filesystem_are_never_echoed() -> None:
    """Built from a root URL and options (as pandas' storage_options do), it keeps no copy of them: fsspec
    would put them in ``storage_options`` and its JSON form. It serializes by pickle, as its adapter."""
    secret = "wJalrXUtnFEMI-never-shown"
    fs = fsspec.filesystem(
        "sa",
        root="s3://bucket/prefix",
        options={
            "endpoint": "http://127.0.0.1:9",
            "access_key_id": "AKIDEXAMPLE",
            "secret_access_key": secret,
        },
    )
    assert fs.adapter.url == "s3://bucket/prefix"
    assert (
        secret not in repr(fs)
        and secret not in repr(fs.storage_options)
        and secret not in repr(fs.storage_args)
    )
    with pytest.raises(TypeError, match="pickle"):
        fs.to_json()
    assert pickle.loads(pickle.dumps(fs)) == fs


@pytest.mark.parametrize("source", ["src", "src/", "sa://src", "deep/src", "deep/src/"])
def test_a_recursive_copy_of_a_directory_follows_cp_at_any_depth(
    source: str, plain: StorageAdapter, tmp_path: Path
) -> None:
    """fsspec's rule, as ``cp -r``: into an existing directory, ``src`` copies the directory and ``src/``
    its contents, whether ``src`` sits directly under the root or deeper (one directly under the root
    spilled its files into the target, over any of the same name). ``cp``, ``get`` and ``put`` alike; the
    root as the target holds the copy directly."""
    fs = plain.to_fsspec()
    parent = source.removeprefix("sa://").rstrip("/").rpartition("/")[0]
    tree = {"a": b"new a", "sub/b": b"new b"}
    fs.pipe({f"{parent}/src/{k}".lstrip("/"): v for k, v in tree.items()})
    fs.pipe({"dst/a": b"kept", "dst/keep": b"kept"})
    contents = source.endswith("/")
    below = "dst/" if contents else "dst/src/"
    expected = {"dst/a": b"kept", "dst/keep": b"kept"} | {below + k: v for k, v in tree.items()}

    fs.cp(source, "dst", recursive=True)
    assert {k: fs.cat_file(k) for k in fs.find("dst")} == expected

    local = tmp_path / "local"
    local.mkdir()
    (local / "keep").write_bytes(b"kept")
    fs.get(source, str(local), recursive=True)
    got = {p.relative_to(local).as_posix(): p.read_bytes() for p in local.rglob("*") if p.is_file()}
    assert got == {"keep": b"kept"} | {below.removeprefix("dst/") + k: v for k, v in tree.items()}

    upload = tmp_path / "up" / "src"
    for key, value in tree.items():
        (upload / key).parent.mkdir(parents=True, exist_ok=True)
        (upload / key).write_bytes(value)
    fs.rm("dst", recursive=True)
    fs.pipe("dst/keep", b"kept")
    fs.put(str(upload) + ("/" if contents else ""), "dst", recursive=True)
    assert {k: fs.cat_file(k) for k in fs.find("dst")} == {"dst/keep": b"kept"} | {
        below + k: v for k, v in tree.items()
    }
    if parent:  # the root as the target is a directory like any other
        fs.cp(source, "", recursive=True)
        at_root = {("" if contents else "src/") + k: v for k, v in tree.items()}
        assert {k: fs.cat_file(k) for k in at_root} == at_root


@pytest.fixture
def planted(adapter: StorageAdapter) -> Iterator[Planted]:
    """Other tools' entries below ``adapter``'s root (contract_tests.foreign_clauses): odd names, folder
    markers where the store holds them, and objects around them."""
    yield from plant_foreign(adapter)


def test_the_face_agrees_with_itself_about_every_name_other_tools_left(
    adapter: StorageAdapter, planted: Planted
) -> None:
    """ls, find, exists, info and isdir tell one story over a bucket other tools wrote to: every object is
    a file to each of them, a prefix with an object below it a directory, a prefix holding only folder
    markers (or only odd names) nothing at all, and no odd name appears anywhere, under any name."""
    fs = adapter.to_fsspec()
    objects = sorted(planted.objects)
    directories = sorted(
        {"/".join(key.split("/")[:depth]) for key in objects for depth in range(1, key.count("/") + 1)}
    )
    assert fs.find("") == objects
    assert sorted(fs.find("", withdirs=True)) == sorted([*objects, *directories])
    for key in objects:
        assert fs.exists(key) and fs.isfile(key) and not fs.isdir(key), key
        assert fs.info(key)["type"] == "file" and fs.info(key)["size"] == len(planted.objects[key]), key
        parent = key.rsplit("/", 1)[0] if "/" in key else ""
        assert key in fs.ls(parent, detail=False), key
    for directory in directories:
        assert fs.exists(directory) and fs.isdir(directory) and not fs.isfile(directory), directory
        assert fs.info(directory)["type"] == "directory", directory
    nothing = {name.rstrip("/") for name in planted.odd if name.endswith("/")} - set(directories)
    nothing |= {name.split("/")[0] for name in planted.odd} - {key.split("/")[0] for key in objects}
    nothing -= {""}
    for name in sorted(nothing):
        try:
            fs.info(name)
        except (FileNotFoundError, InvalidKeyError):
            pass
        else:
            raise AssertionError(f"info({name!r}) found what only other tools' odd entries make")
        if key_problem(name) is not None:
            continue  # a name no key can have: the face refuses it (InvalidKeyError), checked above
        assert not fs.exists(name) and not fs.isdir(name) and not fs.isfile(name), name
        assert fs.find(name) == [] and name not in fs.ls("", detail=False), name
    shown = {entry for path in ["", *directories] for entry in fs.ls(path, detail=False)}
    assert shown == set(objects) | set(directories)
