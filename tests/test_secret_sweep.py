"""No secret is ever printed (issue 12, finding 2): a sweep that plants unique secrets and greps every output.

Secrets are the values of options declared ``secret=True`` (S3: ``secret_access_key``, ``session_token``),
given as options or through ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, and whatever a URL carries
as userinfo (``user:password@``), which is refused. Every planted value contains ``MARK``; the sweep looks
for it in reprs, URLs, messages, full tracebacks (every ``__cause__`` and ``__context__``, suppressed or
not), pickles' reopened copies, the CLI's stdout and stderr and its Markdown and JSON reports.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from contract_tests.planted_bugs import PlantedBugAdapter
from contract_tests.targets import parse_target
from storage_adapter import ConfigurationError, StorageError, open_adapter
from storage_adapter.config import parse_url
from storage_adapter.errors import PermissionDeniedError
from storage_adapter.registry import Backend, Option, register_backend, unregister_backend
from storage_adapter.servers.seaweedfs import S3Identity, SeaweedFS
from storage_adapter.servers.server import S3Endpoint, free_port
from storage_adapter.types import Capabilities, Support

MARK = "Pl4ntedSecret"


def planted(role: str) -> str:
    return f"{MARK}-{role}-{uuid.uuid4().hex}"


SECRET, TOKEN = planted("secret"), planted("token")
ADMIN = S3Identity("SWEEPADMIN", planted("admin"))
READER = S3Identity("SWEEPREADER", planted("reader"), actions=("Read:contract", "List:contract"))


def everything_printed(exc: BaseException) -> str:
    """The full traceback plus every link of the exception chain (suppressed contexts too): what a log,
    a debugger or a careless ``repr`` could show."""
    texts = ["".join(traceback.format_exception(exc))]
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        link = stack.pop()
        if link is None or id(link) in seen:
            continue
        seen.add(id(link))
        texts += [repr(link), str(link), repr(link.args), *getattr(link, "__notes__", ())]
        stack += [link.__cause__, link.__context__]
    return "\n".join(texts)


def assert_clean(text: str, where: str) -> None:
    assert MARK not in text, f"a planted secret appears in {where}:\n{text[-3000:]}"


def raised_by(call: Callable[[], Any], kind: type[BaseException] = StorageError) -> BaseException:
    with pytest.raises(kind) as info:
        call()
    assert_clean(everything_printed(info.value), f"the {type(info.value).__name__} of {call}")
    return info.value


# -- URLs: userinfo is refused, for every scheme, without being echoed -------------------------------------------
USERINFO_URLS = [
    f"s3://AKIAEXAMPLE:{SECRET}@bucket/p",
    f"s3://{SECRET}@bucket",
    f"memory://user:{SECRET}@store/p",
    f"file://user:{SECRET}@localhost/tmp/x",
    f"ftp://user:{SECRET}@host/x",
    f"gs://user:{SECRET}@bucket",
    f"s3://user:{SECRET}@[::1/p",  # also malformed: urlsplit raises on it
    f"s3://user:{SECRET}@bucket/p?x=1",
]


@pytest.mark.parametrize("url", USERINFO_URLS, ids=lambda u: u.split("://")[0] + "-" + str(len(u)))
def test_userinfo_in_any_url_is_refused_without_echo(url: str) -> None:
    error = raised_by(lambda: open_adapter(url), ConfigurationError)
    assert "credentials" in str(error) and "***@" in str(error)
    raised_by(lambda: parse_url(url, {}), ConfigurationError)


@pytest.mark.parametrize("url", USERINFO_URLS[:3], ids=["s3", "s3-user-only", "memory"])
def test_the_cli_target_name_never_carries_userinfo(url: str) -> None:
    for spec in (url, f"named={url}"):
        raised_by(lambda spec=spec: parse_target(spec), ConfigurationError)


def test_an_s3_endpoint_with_userinfo_is_refused() -> None:
    raised_by(lambda: open_adapter("s3://b", endpoint=f"http://u:{SECRET}@127.0.0.1:9"), ConfigurationError)


# -- reprs, URLs, pickles ------------------------------------------------------------------------------------------
def test_secret_options_and_environment_never_appear_in_reprs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKID")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", planted("env-secret"))
    monkeypatch.setenv("AWS_SESSION_TOKEN", planted("env-token"))
    from_env = open_adapter("s3://bucket/p", endpoint="http://127.0.0.1:9")
    from_options = open_adapter(
        "s3://bucket/p", access_key_id="AKID", secret_access_key=SECRET, session_token=TOKEN
    )
    for adapter in (from_env, from_options):
        assert MARK in "".join(map(str, dict(adapter.config.options).values()))  # planted where it belongs
        assert_clean(repr(adapter.config.options) + str(dict(adapter.config.options)), "printed options")
        clone = pickle.loads(pickle.dumps(adapter))
        assert clone == adapter
        for shown in (adapter, clone, adapter.child("c"), adapter.config, clone.config):
            assert_clean(repr(shown) + str(shown), f"repr of {type(shown).__name__}")
        assert_clean(adapter.url + clone.url + str(adapter.config.public_options()), "url")


# -- errors ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "options",
    [{"secret_access_key": 12345}, {"session_token": MARK.encode()}, {"secret_access_key": [SECRET]}],
    ids=["int", "bytes", "list"],
)
def test_a_bad_secret_option_value_is_refused_without_echo(options: dict[str, Any]) -> None:
    error = raised_by(lambda: open_adapter("s3://bucket", **options), ConfigurationError)
    assert next(iter(options)) in str(error)


def test_unreachable_endpoint_errors_are_secret_free() -> None:
    adapter = open_adapter(
        "s3://bucket/p",
        endpoint=f"http://127.0.0.1:{free_port()}",
        access_key_id="AKID",
        secret_access_key=SECRET,
        session_token=TOKEN,
        allow_http=True,
        max_retries=0,
        connect_timeout_s=1.0,
    )
    raised_by(lambda: adapter.read_bytes("k"))
    raised_by(lambda: adapter.write("k", b"v"))
    raised_by(lambda: adapter.list())


@pytest.fixture(scope="module")
def guarded() -> Iterator[S3Endpoint]:
    with SeaweedFS(identities=(ADMIN, READER)) as endpoint:
        yield endpoint


def test_wrong_secret_and_denied_write_errors_are_secret_free(guarded: S3Endpoint) -> None:
    options = {"endpoint": guarded.endpoint, "allow_http": True, "max_retries": 0}
    wrong = open_adapter(
        guarded.url("sweep"),
        access_key_id=ADMIN.access_key_id,
        secret_access_key=SECRET,
        session_token=TOKEN,
        **options,
    )
    for call in (lambda: wrong.write("k", b"v"), lambda: wrong.read_bytes("k"), lambda: wrong.list()):
        raised_by(call)
    reader = open_adapter(
        guarded.url("sweep"),
        access_key_id=READER.access_key_id,
        secret_access_key=READER.secret_access_key,
        **options,
    )
    assert isinstance(raised_by(lambda: reader.write("k", b"v")), PermissionDeniedError)


def test_a_profiles_wrong_secret_is_never_printed(
    guarded: S3Endpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secret read from the shared credentials file (never an option, so no Redactor knows it) is
    quoted by no repr and no error: nothing in the signing path echoes it."""
    for name in [name for name in os.environ if name.startswith("AWS_")]:
        monkeypatch.delenv(name)
    (tmp_path / "credentials").write_text(
        f"[sweep]\naws_access_key_id = {ADMIN.access_key_id}\naws_secret_access_key = {SECRET}\n"
        f"aws_session_token = {TOKEN}\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_PROFILE", "sweep")
    wrong = open_adapter(guarded.url("sweep"), endpoint=guarded.endpoint, allow_http=True, max_retries=0)
    assert_clean(repr(wrong) + repr(wrong.config) + repr(pickle.loads(pickle.dumps(wrong))), "reprs")
    for call in (lambda: wrong.write("k", b"v"), lambda: wrong.read_bytes("k"), lambda: wrong.list()):
        assert isinstance(raised_by(call), PermissionDeniedError)


# -- the boundary scrubs whatever a driver says --------------------------------------------------------------------
class _EchoingDriver:
    """A careless third-party driver: every failure quotes its password, in the message and the cause."""

    def __init__(self, config: Any) -> None:
        self.password = config.option("password")

    def get(self, key: str) -> bytes:
        try:
            raise OSError(f"login failed for password {self.password}")
        except OSError as exc:
            raise StorageError(f"cannot read {key!r} with {self.password}", key=key) from exc


@pytest.fixture
def echo_backend() -> Iterator[str]:
    caps = Capabilities(
        backend="echo",
        write_if_absent=Support.UNSUPPORTED,
        write_if_match=Support.UNSUPPORTED,
        atomic_rename=False,
        shared_across_processes=False,
        equal_content_equal_token=False,
        token_semantics="none",
        durable=False,
        single_delete="none",
        batch_delete="none",
        reclaims_orphans=False,
    )
    register_backend(
        Backend(
            name="echo",
            scheme="echo",
            capabilities=caps,
            locate=lambda parts, url: (parts.netloc, ""),
            driver=_EchoingDriver,  # type: ignore[arg-type]
            options={"password": Option(str, env=("ECHO_PASSWORD",), secret=True)},
        )
    )
    yield "echo://somewhere"
    unregister_backend("echo")


def test_the_adapter_boundary_scrubs_a_drivers_errors(echo_backend: str) -> None:
    adapter = open_adapter(echo_backend, password=SECRET)
    error = raised_by(lambda: adapter.read_bytes("k"))
    assert "'k'" in str(error) and "***" in str(error)
    assert error.__cause__ is not None and "login failed" in str(error.__cause__)  # still explained


# -- the CLI and its reports --------------------------------------------------------------------------------------
@contextmanager
def _cli_env(**values: str) -> Iterator[dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_REGION="us-east-1", **values)
    here = Path(__file__).parent  # so that --factory can name this module's leaky adapter
    env["PYTHONPATH"] = os.pathsep.join([str(here.parent), str(here)])
    yield env


def run_check(tmp_path: Path, *args: str, **env_values: str) -> str:
    """Run ``storage-adapter check`` with ``--report``; return stdout, stderr and every report file."""
    report = tmp_path / f"report-{uuid.uuid4().hex[:6]}"
    report.mkdir()
    with _cli_env(**env_values) as env:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "contract_tests",
                "check",
                *args,
                "--no-peers",
                "--threads",
                "2",
                "--processes",
                "2",
                "--increments",
                "2",
                "--report",
                str(report),
            ],
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
        )
    files = "".join(p.read_text() for p in report.iterdir())
    return f"exit {result.returncode}\n{result.stdout}\n{result.stderr}\n{files}"


def test_cli_output_and_reports_are_secret_free(guarded: S3Endpoint, tmp_path: Path) -> None:
    secrets = {"AWS_SECRET_ACCESS_KEY": SECRET, "AWS_SESSION_TOKEN": TOKEN}
    at_guarded = {"AWS_ENDPOINT_URL": guarded.endpoint, "AWS_ALLOW_HTTP": "true"}
    bad_input_cases = {
        "userinfo": run_check(tmp_path, USERINFO_URLS[0]),
        "userinfo-named": run_check(tmp_path, f"named={USERINFO_URLS[2]}"),
        "unreachable": run_check(
            tmp_path,
            "s3://bucket/p",
            AWS_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}",
            AWS_ALLOW_HTTP="true",
            AWS_ACCESS_KEY_ID="AKID",
            **secrets,
        ),
        "wrong-secret": run_check(
            tmp_path, guarded.url("cli"), AWS_ACCESS_KEY_ID=ADMIN.access_key_id, **secrets, **at_guarded
        ),
        "denied-write": run_check(
            tmp_path,
            guarded.url("cli"),
            AWS_ACCESS_KEY_ID=READER.access_key_id,
            AWS_SECRET_ACCESS_KEY=READER.secret_access_key,
            **at_guarded,
        ),
        "bad-option": run_check(tmp_path, "s3://bucket/p", AWS_ALLOW_HTTP="maybe", **secrets),
    }
    for case, output in bad_input_cases.items():
        assert output.startswith("exit 2"), f"{case}: {output[-2000:]}"
        assert_clean(output, f"the CLI's output for {case}")
    # The clauses that open adapters here and in spawned processes, report errors and capabilities, or
    # sign raw requests with the secret (the wire clauses): what could carry a secret into the output
    # (every clause's output is checked at default sizes by the stage of scripts/test.sh; a whole run
    # here cost 55-66 s).
    full_run = run_check(
        tmp_path,
        "--clauses",
        "round_trip or processes or errors_name or capabilities or pickle or if_none_match or delete_if_match",
        guarded.url("cli-run"),
        "memory://sweep",
        AWS_ACCESS_KEY_ID=ADMIN.access_key_id,
        AWS_SECRET_ACCESS_KEY=ADMIN.secret_access_key,
        **at_guarded,
    )
    assert full_run.startswith("exit 0") and "storage-adapter-check" in full_run, full_run[-3000:]
    assert_clean(full_run, "the CLI's output and reports of a full run")


class _LeakyExists(PlantedBugAdapter):
    """A third-party adapter whose ``exists`` fails quoting the environment's secret: the CLI's notes and
    the reports must mask it all the same."""

    def exists(self, key: str) -> bool:
        raise StorageError(f"exists({key!r}) failed with {os.environ['AWS_SECRET_ACCESS_KEY']}", key=key)


def open_leaky(url: str, **options: Any) -> _LeakyExists:
    return _LeakyExists(open_adapter(url, **options))


def test_the_cli_masks_environment_secrets_a_foreign_adapter_prints(tmp_path: Path) -> None:
    output = run_check(
        tmp_path, "memory://leaky", "--factory", "test_secret_sweep:open_leaky", AWS_SECRET_ACCESS_KEY=SECRET
    )
    assert output.startswith("exit 1") and "exists" in output and "***" in output, output[-3000:]
    assert_clean(output, "the CLI's output and reports for a foreign adapter")
