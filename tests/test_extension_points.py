"""What an outside project sees: the core with only its own dependencies, a silent pytest plugin, and a new backend added
by one registration (an entry point) that then passes the whole contract with no edit anywhere else."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import tomllib
import venv
from importlib.metadata import requires, version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    """stdout, then stderr (what a person sees), of a command that must succeed."""
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, (
        f"{args} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout + done.stderr


def test_core_imports_and_works_with_only_its_core_dependencies(tmp_path: Path) -> None:
    """A fresh venv holding the core's dependencies (pyproject's ``dependencies``: obstore and arro3-core,
    the Arrow form of obstore's listings) and nothing else imports storage_adapter and uses it."""
    core = [
        re.split(r"[ ;<>=!~\[]", r)[0]
        for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    ]
    assert "obstore" in core
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    _run([python, "-m", "pip", "install", "-q", *(f"{name}=={version(name)}" for name in core)], cwd=tmp_path)
    installed = _run([python, "-m", "pip", "list", "--format=freeze"], cwd=tmp_path)
    needed = {name.lower().replace("-", "_") for name in core}
    for name in core:  # and what they need in turn
        needed |= {
            re.split(r"[ ;<>=!~\[]", r)[0].lower().replace("-", "_")
            for r in requires(name) or []
            if "extra ==" not in r
        }
    present = {line.split("==")[0].lower().replace("-", "_") for line in installed.split()}
    assert present <= {"pip", "setuptools", *needed}
    script = textwrap.dedent(
        """
        import sys
        import storage_adapter
        from storage_adapter import open_adapter
        store = open_adapter("memory://only-obstore/p")
        store.write("k", b"v")
        assert store.read_bytes("k") == b"v"
        leaked = sorted(m for m in sys.modules if m.split(".")[0] in ("pytest", "rich", "pyarrow", "contract_tests"))
        assert not leaked, leaked
        print("ok")
        """
    )
    # The source tree on the path, nothing else: storage_adapter must need only what this venv has.
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)}
    assert _run([python, "-c", script], cwd=tmp_path, env=env).strip() == "ok"


def _comparable(output: str) -> str:
    """Without timings and pytest's own list of installed plugins (which names the package either way)."""
    lines = [line for line in output.splitlines() if not line.startswith("plugins:")]
    return re.sub(r"in \d+\.\d+s", "in Xs", "\n".join(lines))


def test_plugin_prints_nothing_in_an_unrelated_project(tmp_path: Path) -> None:
    """A pytest session in a project that merely has the package installed looks exactly as it does with
    the plugin disabled."""
    (tmp_path / "test_unrelated.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_unrelated.py"]
    with_plugin = _run(command, cwd=tmp_path)
    without = _run([*command, "-p", "no:storage_contract"], cwd=tmp_path)
    assert _comparable(with_plugin) == _comparable(without)
    assert "contract" not in with_plugin


SANDBOX_BACKEND = '''
"""A third-party backend: local directories under $SANDBOX_BASE, addressed as sandbox://NAME/prefix."""
import dataclasses
import os
from urllib.parse import SplitResult

from storage_adapter.builtin_backends import LOCAL
from storage_adapter.keys import validate_prefix
from storage_adapter.local_driver import LocalDriver
from storage_adapter.registry import Backend


def locate(parts: SplitResult, url: str) -> tuple[str, str]:
    return os.path.join(os.environ["SANDBOX_BASE"], parts.netloc), validate_prefix(parts.path.lstrip("/"))


BACKEND = Backend(
    name="sandbox",
    scheme="sandbox",
    capabilities=dataclasses.replace(LOCAL.capabilities, backend="sandbox"),
    locate=locate,
    driver=LocalDriver,
)
'''


def test_a_new_backend_registered_by_entry_point_passes_the_contract(tmp_path: Path) -> None:
    """One registration (an entry point in the ``storage_adapter.backends`` group), no edit elsewhere:
    the URL scheme resolves everywhere, spawned processes included, and the contract passes. The clauses
    run are those where a registration could fail to reach: opening the URL here and in spawned processes
    (every process race), pickling, declared capabilities (the whole contract runs on a third-party
    backend in tests/test_dict_backend_example.py, and on this one's driver, the local one, in
    tests/test_contract_embedded.py; the whole run here cost 34 s)."""
    site = tmp_path / "site"
    (site / "sandbox_backend-0.1.dist-info").mkdir(parents=True)
    (site / "sandbox_backend.py").write_text(SANDBOX_BACKEND)
    dist_info = site / "sandbox_backend-0.1.dist-info"
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: sandbox-backend\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(
        "[storage_adapter.backends]\nsandbox = sandbox_backend:BACKEND\n"
    )
    (tmp_path / "base").mkdir()
    env = {
        **os.environ,
        "SANDBOX_BASE": str(tmp_path / "base"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
    }
    out = _run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--pyargs",
            "contract_tests",
            "--storage-url",
            "sandbox://store/contract",
            "--contract-processes",
            "2",
            "--contract-threads",
            "4",
            "-k",
            "processes or round_trip or pickle or capabilities",
        ],
        cwd=tmp_path,
        env=env,
    )
    summary = out.strip().splitlines()[-1]
    assert "passed" in summary and "failed" not in summary and "error" not in summary, out[-2000:]
    assert "skipped" not in summary, f"a clause was skipped on a shared local store: {summary}"


@pytest.mark.parametrize("bad", ["sandbox://x", "nosuch://x"])
def test_an_unregistered_scheme_is_a_configuration_error_listing_the_schemes(bad: str) -> None:
    from storage_adapter import ConfigurationError, open_adapter

    with pytest.raises(ConfigurationError, match=r"file://, s3://, memory://"):
        open_adapter(bad)
