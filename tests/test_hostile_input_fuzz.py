"""Hostile keys, URLs and options (issue 12, "Grow the contract"): only typed errors, never a raw exception.

A deterministic catalogue (``HOSTILE_KEYS``, ``HOSTILE_URLS``, ``HOSTILE_OPTIONS``: the distinct inputs
counted by ``test_the_catalogue_is_large_enough``) runs once per input; Hypothesis then draws random
strings (surrogates, control characters, ``..``, ``//``, ``#123``, overlong, userinfo URLs, odd schemes,
option values of every type). Every input either is accepted (a valid key round-trips on memory) or
raises InvalidKeyError / ConfigurationError, and no planted secret is ever echoed.
"""

from __future__ import annotations

import traceback
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_adapter import ConfigurationError, InvalidKeyError, open_adapter
from storage_adapter.keys import validate_key, validate_prefix

PLANTED = f"PlantedFuzzSecret{uuid.uuid4().hex}"
MEMORY = open_adapter("memory://hostile-fuzz")

HOSTILE_KEYS = (
    "\udc80x",
    "a/\ud800",
    "\udfff\udc00",
    "a\x00b",
    "a\x1fb",
    "a\x7f",
    "..",
    "a/../b",
    "./a",
    "a//b",
    "/abs",
    "a/",
    "a\\b",
    "a#123",
    "a#0/b",
    "x" * 1025,
    "é" * 513,
    "s" * 201,
    "日" * 67,
    "",
)
HOSTILE_URLS = (
    f"s3://AKIA:{PLANTED}@bucket/p",
    f"memory://u:{PLANTED}@m",
    f"file://u:{PLANTED}@localhost/tmp",
    f"ftp://{PLANTED}@host",
    f"s3://u:{PLANTED}@[::1/p",
    f"s3:/\t/u:{PLANTED}@bucket",
    "s3://[::1",
    "gs://bucket",
    "javascript:alert(1)",
    "memory://m/\udc80",
    "memory://m/%ED%B2%80",
    "memory://m/a/../b",
    "memory://m/#frag",
    "s3://b?versionId=1",
    "file://host/x",
    "relative/path",
    "s3://",
    "memory://m/a#12",
)
HOSTILE_OPTIONS: tuple[dict[str, Any], ...] = (
    {"secret_access_key": 12345},
    {"secret_access_key": PLANTED.encode()},
    {"session_token": [PLANTED]},
    {"session_token": f"{PLANTED}\x00"},
    {"secret_access_key": f"\udc80{PLANTED}"},
    {"max_retries": -1},
    {"max_retries": 10**30},
    {"max_retries": 2.5},
    {"max_retries": True},
    {"connect_timeout_s": float("nan")},
    {"connect_timeout_s": float("inf")},
    {"connect_timeout_s": -1.0},
    {"retry_timeout_s": 1e300},
    {"allow_http": "maybe"},
    {"allow_http": 2},
    {"region": "\udc80"},
    {"endpoint": "localhost:9000"},
    {"endpoint": f"http://u:{PLANTED}@127.0.0.1:9"},
    {"no_such_option": 1},
    {"region": None},
)


def assert_secret_free(exc: BaseException) -> None:
    printed = "".join(traceback.format_exception(exc))
    link: BaseException | None = exc
    while link is not None:
        printed += repr(link.args)
        link = link.__cause__ or link.__context__
    assert PLANTED not in printed, printed


def check_key(key: object) -> None:
    """A key is valid (and round-trips on memory) or an InvalidKeyError, everywhere it may go."""
    try:
        valid = validate_key(key, "memory")
    except InvalidKeyError as exc:
        assert_secret_free(exc)
        with pytest.raises(InvalidKeyError):
            MEMORY.write(key, b"x")  # type: ignore[arg-type]
        if key not in ("", "/") and not (isinstance(key, str) and _valid_prefix(key)):
            for call in (lambda: MEMORY.child(key), lambda: MEMORY.list(key)):  # type: ignore[arg-type]
                with pytest.raises(InvalidKeyError):
                    call()
        return
    store = MEMORY.child(f"k-{uuid.uuid4().hex}")
    store.write(valid, valid)
    assert store.read_text(valid) == valid
    assert [i.key for i in store.list()] == [valid]
    store.delete(valid)


def _valid_prefix(prefix: str) -> bool:
    try:
        validate_prefix(prefix)
    except InvalidKeyError:
        return False
    return True


def check_url(url: object, options: dict[str, Any] | None = None) -> None:
    """Opening is a success or a ConfigurationError; neither ever shows the planted secret."""
    try:
        adapter = open_adapter(url, **(options or {}))  # type: ignore[arg-type]
    except ConfigurationError as exc:
        assert_secret_free(exc)
        return
    shown = f"{adapter!r}{adapter.url}{adapter.config!r}"
    assert PLANTED not in shown, shown


def test_the_catalogue_is_large_enough() -> None:
    distinct = {repr(k) for k in HOSTILE_KEYS} | set(HOSTILE_URLS) | {repr(o) for o in HOSTILE_OPTIONS}
    assert len(distinct) >= 15 and len(distinct) == len(HOSTILE_KEYS + HOSTILE_URLS) + len(HOSTILE_OPTIONS)


@pytest.mark.parametrize("key", HOSTILE_KEYS, ids=lambda k: repr(k)[:16])
def test_hostile_keys_are_invalid_keys(key: str) -> None:
    with pytest.raises(InvalidKeyError):
        validate_key(key)
    check_key(key)


@pytest.mark.parametrize("url", HOSTILE_URLS, ids=lambda u: repr(u)[:24])
def test_hostile_urls_are_configuration_errors(url: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        open_adapter(url)
    assert_secret_free(info.value)


@pytest.mark.parametrize("options", HOSTILE_OPTIONS, ids=lambda o: repr(o)[:24])
def test_hostile_options_are_configuration_errors(options: dict[str, Any]) -> None:
    if options == {"region": None}:  # None means "not given": the default applies
        check_url("s3://bucket", options)
        return
    with pytest.raises(ConfigurationError) as info:
        # With a whole key pair (unless the case is about one), so each case fails for its own reason.
        open_adapter(
            "s3://bucket", **{"access_key_id": "AKID", "secret_access_key": "not-a-secret", **options}
        )
    assert_secret_free(info.value)


SEGMENT = st.one_of(
    st.text(min_size=0, max_size=12),
    st.sampled_from([".", "..", "#123", "a#7", "\udc80", "\x00", "\x7f", "\\", " ", "é" * 110, "s" * 201]),
)
KEYS = st.one_of(st.lists(SEGMENT, min_size=1, max_size=6).map("/".join), st.text(max_size=40), st.binary())


@settings(max_examples=300, deadline=None)
@given(KEYS)
def test_random_keys_are_valid_or_invalid_keys(key: object) -> None:
    check_key(key)


# No file:// (in any case): opening a local root creates its directory, and random paths land in "/".
SCHEMES = st.sampled_from(["s3", "memory", "ftp", "S3", "MEMORY", "", "x-y", "\udc80", "s3 ", "fi le"])
HOSTS = st.text(max_size=12)
PATHS = st.text(max_size=20)
# The secret is planted only where it is userinfo (after "//"); after one "/" it is a path, not a credential.
URLS = st.one_of(
    st.builds("{}://{}{}{}".format, SCHEMES, st.sampled_from([f"u:{PLANTED}@", f"{PLANTED}@"]), HOSTS, PATHS),
    st.builds("{}:/\t/u:{}@{}".format, SCHEMES, st.just(PLANTED), HOSTS),
    st.builds("{}:{}{}{}".format, SCHEMES, st.sampled_from(["//", "/", "///", ""]), HOSTS, PATHS),
)
OPTION_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.binary(max_size=8),
    st.lists(st.integers(), max_size=2),
)
SECRET_VALUES = st.one_of(
    OPTION_VALUES,
    st.sampled_from([PLANTED, PLANTED.encode(), [PLANTED], f"{PLANTED}\x00", f"\udc80{PLANTED}"]),
)
OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "secret_access_key": SECRET_VALUES,
        "session_token": SECRET_VALUES,
        "access_key_id": OPTION_VALUES,
        "region": OPTION_VALUES,
        "endpoint": OPTION_VALUES,
        "allow_http": OPTION_VALUES,
        "max_retries": OPTION_VALUES,
        "connect_timeout_s": OPTION_VALUES,
        "retry_timeout_s": OPTION_VALUES,
    },
)


@settings(max_examples=300, deadline=None)
@given(URLS)
def test_random_urls_open_or_are_configuration_errors(url: str) -> None:
    check_url(url)


@settings(max_examples=300, deadline=None)
@given(OPTIONS)
def test_random_options_open_or_are_configuration_errors(options: dict[str, Any]) -> None:
    check_url("s3://bucket", options)
