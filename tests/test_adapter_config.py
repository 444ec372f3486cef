"""open_adapter: URL and option parsing, environment resolution, equality, pickling, secrecy."""

from __future__ import annotations

import pickle

import pytest

from storage_adapter import ConfigurationError, open_adapter
from storage_adapter.config import parse_url

SECRET = "s3cr3t-value-never-shown"


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("ftp://host/x", "scheme must be one of file://, s3://, memory://"),
        ("gs://bucket", "scheme must be one of"),
        ("relative/path", "scheme must be one of"),
        ("", "non-empty"),
        ("s3://", "needs a bucket"),
        ("memory://", "needs a store name"),
        ("file://host/x", "file:///absolute/path"),
        ("s3://b/a//b", "invalid key"),
        ("s3://b?x=1", "query"),
    ],
)
def test_bad_urls_raise_configuration_error_naming_the_url(url: str, fragment: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        open_adapter(url)
    assert fragment in str(info.value)
    if url:
        assert url in str(info.value) or "invalid key" in str(info.value)


def test_unknown_option_lists_supported_ones() -> None:
    with pytest.raises(ConfigurationError) as info:
        open_adapter("s3://bucket", endpoit="http://x")
    message = str(info.value)
    assert "endpoit" in message and "endpoint" in message and "access_key_id" in message
    with pytest.raises(ConfigurationError, match="supported: none"):
        open_adapter("memory://x", region="eu")


def test_option_types_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="allow_http"):
        open_adapter("s3://bucket", allow_http="maybe")
    with pytest.raises(ConfigurationError, match="max_retries"):
        open_adapter("s3://bucket", max_retries="many")
    with pytest.raises(ConfigurationError, match="http:// or https://"):
        open_adapter("s3://bucket", endpoint="localhost:9000")


def test_s3_settings_come_from_the_environment_when_not_given() -> None:
    env = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "AKIDENV",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "eu-west-3",
        "AWS_ALLOW_HTTP": "true",
    }
    config = parse_url("s3://bucket/some/prefix", {"access_key_id": "AKIDOPT", "secret_access_key": "s"}, env)
    assert config.option("endpoint") == "http://127.0.0.1:9"
    assert config.option("access_key_id") == "AKIDOPT"  # options win over the environment
    # The credentials come from one source: a key id given alone takes no secret from the environment.
    with pytest.raises(ConfigurationError, match="access_key_id and secret_access_key go together"):
        parse_url("s3://bucket/some/prefix", {"access_key_id": "AKIDOPT"}, env)
    assert config.option("region") == "eu-west-3"
    assert config.option("allow_http") is True
    assert (config.location, config.prefix) == ("bucket", "some/prefix")


def test_credentials_never_appear_in_repr_or_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = open_adapter(
        "s3://bucket",
        endpoint="http://127.0.0.1:9",
        access_key_id="AKID",
        secret_access_key=SECRET,
        allow_http=True,
        max_retries=0,
        connect_timeout_s=1.0,
    )
    assert SECRET not in repr(adapter) and SECRET not in repr(adapter.config)
    with pytest.raises(Exception) as info:
        adapter.read_bytes("k")
    assert SECRET not in str(info.value)


def test_equal_configs_compare_equal_and_pickle() -> None:
    a = open_adapter("memory://same/prefix")
    b = open_adapter("memory://same/prefix")
    assert a == b and hash(a) == hash(b)
    assert a != open_adapter("memory://other/prefix")
    assert pickle.loads(pickle.dumps(a)) == a
    assert a.child("x") == open_adapter("memory://same/prefix/x")


def test_local_child_and_plain_absolute_path_are_the_same_store(tmp_path: object) -> None:
    root = open_adapter(str(tmp_path))
    assert root == open_adapter(f"file://{tmp_path}")
    child = root.child("sub")
    assert child.url == f"file://{tmp_path}/sub"
    assert not (tmp_path / "sub").exists()  # type: ignore[operator]  # a child creates nothing until it writes
    child.write("k", b"v")
    assert open_adapter(child.url).read_bytes("k") == b"v"
    assert open_adapter(child.url) == child and hash(open_adapter(child.url)) == hash(child)


def test_memory_stores_are_shared_by_name_within_a_process() -> None:
    open_adapter("memory://shared-name").write("k", b"v")
    assert open_adapter("memory://shared-name").read_bytes("k") == b"v"
    assert open_adapter("memory://another-name").read_if_exists("k") is None


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        # Each of these endpoints made obstore panic on the first request (pyo3's PanicException).
        ({"endpoint": "http://exa mple:9000"}, "malformed host"),
        ({"endpoint": "http://[::1"}, "malformed host or port"),
        ({"endpoint": "http://"}, "malformed host"),
        ({"endpoint": "http://127.0.0.1:99999"}, "malformed host or port"),
        ({"endpoint": "http://127.0.0.1:"}, "malformed port"),
        ({"endpoint": "http://host/a b"}, "URL path"),
        ({"endpoint": "http://host/?x=1"}, "query or fragment"),
        ({"endpoint": "http://host\n/"}, "control characters"),
        ({"access_key_id": "AK\nID", "secret_access_key": SECRET}, "access_key_id must be UTF-8 text"),
        ({"access_key_id": "AKID", "secret_access_key": SECRET + "\n"}, "secret_access_key must be"),
        ({"max_retries": -1}, "max_retries=-1 must be a finite, non-negative number"),
        ({"max_retries": 2**70}, "is over 100"),
        ({"max_retries": 1.5}, "max_retries must be int"),
        ({"connect_timeout_s": 0}, "connect_timeout_s=0.0 for s3://bucket must be positive"),
        ({"request_timeout_s": float("nan")}, "finite"),
        ({"init_backoff_s": -0.1}, "init_backoff_s"),
        ({"conditional_put": "dynamo:table"}, "must be one of etag, disabled"),
        ({"virtual_hosted_style": "sometimes"}, "is not a boolean"),
        ({"anonymous": 1}, "anonymous must be bool"),
        ({"profile": "ci\n"}, "profile must be UTF-8 text"),
        ({"proxy_url": "proxy:3128"}, "proxy_url 'proxy:3128' for s3://bucket must start with http://"),
        ({"proxy_url": "http://u:p@proxy:3128"}, "carries credentials"),
        ({"proxy_excludes": "a.example, b/c"}, "proxy_excludes"),
        ({"pool_max_idle_per_host": -1}, "pool_max_idle_per_host=-1"),
        ({"pool_idle_timeout_s": 0}, "pool_idle_timeout_s=0.0 for s3://bucket must be positive"),
        ({"allow_invalid_certificates": "yes please"}, "allow_invalid_certificates"),
    ],
)
def test_s3_options_are_checked_before_obstore_sees_them(options: dict[str, object], fragment: str) -> None:
    """Every bad option is a ConfigurationError (a ValueError) at open, naming the option, never a
    secret's value: nothing reaches obstore to panic or overflow there."""
    with pytest.raises(ConfigurationError) as info:
        open_adapter("s3://bucket", allow_http=True, **options)
    assert fragment in str(info.value) and "s3://bucket" in str(info.value)
    assert SECRET not in str(info.value) and info.value.__context__ is None


def test_well_formed_endpoints_are_accepted() -> None:
    for endpoint in (
        "http://127.0.0.1:9000",
        "https://s3.eu-west-3.amazonaws.com",
        "http://[::1]:9000",
        "https://bucket.s3.example/",
        "http://minio.local:9000/base/path",
    ):
        assert open_adapter("s3://bucket", endpoint=endpoint, anonymous=True).config.option("endpoint")


def test_conditional_put_disabled_is_declared_unsupported() -> None:
    from storage_adapter.types import Support

    adapter = open_adapter("s3://bucket", conditional_put="disabled", anonymous=True)
    caps = adapter.capabilities
    assert (caps.write_if_absent, caps.write_if_match) == (Support.UNSUPPORTED, Support.UNSUPPORTED)
    assert open_adapter("s3://bucket", anonymous=True).capabilities.write_if_absent is Support.NATIVE


@pytest.mark.parametrize(
    "name", ["a%2541dir", "hash%23dir", "what%3Fdir", "sp ace", "sp%20ace", "uni-%C3%A9", "plain"]
)
def test_an_adapters_url_opens_the_same_store_again(tmp_path: object, name: str) -> None:
    """``adapter.url`` (and so every URL built on it, ``Engine.files``'s too) is a URL of the same root and
    prefix: a ``%``, ``#`` or ``?`` decoded from the URL given is escaped again (written raw, ``a%41dir``
    reopened the directory ``aAdir``, and ``hash#dir`` was refused as a URL with a fragment)."""
    for url in (f"file://{tmp_path}/{name}", f"memory://store-{name.count('%')}/{name}/inner"):
        adapter = open_adapter(url)
        again = open_adapter(adapter.url)
        assert again == adapter and again.url == adapter.url, (url, adapter.url)
    local = open_adapter(f"file://{tmp_path}/{name}")
    local.write("k", b"v")
    assert open_adapter(local.url).read_bytes("k") == b"v"
