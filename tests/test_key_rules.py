"""The portable key rules of storage_adapter.keys (issue 12, finding 3; issue 15's edge cases).

Lone surrogates are refused before any I/O, for keys, prefixes, child names and URL prefixes (they used to
pass the fast path: local wrote them and then could not list its root, memory and S3 leaked a raw
UnicodeEncodeError). Lengths are counted in UTF-8 bytes; a segment longer than MAX_SEGMENT_BYTES (room for
the local staging suffix below the 255-byte filename limit) is refused everywhere, not only on local.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from storage_adapter import ConfigurationError, InvalidKeyError, open_adapter
from storage_adapter.keys import MAX_KEY_BYTES, MAX_SEGMENT_BYTES, validate_key, validate_prefix
from storage_adapter.protocol import StorageAdapter

SURROGATES = ("\udc80x", "a/\ud800", "\udfff", "ok/b\udc80c/d")


@pytest.fixture(params=["memory", "local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StorageAdapter:
    url = "memory://key-rules" if request.param == "memory" else f"file://{tmp_path}"
    return open_adapter(url).child(f"case-{len(str(tmp_path))}")


@pytest.mark.parametrize("key", SURROGATES, ids=repr)
def test_lone_surrogates_are_invalid_keys_before_any_io(store: StorageAdapter, key: str) -> None:
    for call in (
        lambda: store.write(key, b"x"),
        lambda: store.read_bytes(key),
        lambda: store.exists(key),
        lambda: store.rename("absent", key),
        lambda: store.list(key),
        lambda: store.list_dir(key + "/"),
        lambda: store.child(key),
        lambda: store.child(key).write("k", b"x"),
    ):
        with pytest.raises(InvalidKeyError, match="surrogate"):
            call()
    assert store.list() == []  # the root still lists: nothing unlistable was written


@pytest.mark.parametrize("url", ["memory://m/\udc80x", "s3://bucket/p/\ud800", "memory://m/a%ED%B2%80b"])
def test_url_prefixes_with_surrogates_are_configuration_errors(url: str) -> None:
    with pytest.raises(ConfigurationError, match=r"invalid prefix|not UTF-8|lone surrogate"):
        open_adapter(url)


def test_lengths_are_utf8_bytes() -> None:
    two_byte = "é"  # 2 UTF-8 bytes
    exactly = "/".join(["x" * 100] * 10) + "/" + "y" * (MAX_KEY_BYTES - 1010)
    assert len(exactly.encode()) == MAX_KEY_BYTES
    assert validate_key(exactly) == exactly
    with pytest.raises(InvalidKeyError, match=f"longer than {MAX_KEY_BYTES} bytes"):
        validate_key(exactly + "z")
    six_hundred = "/".join([two_byte * 100] * 6)  # 605 characters, 1,205 bytes
    with pytest.raises(InvalidKeyError, match="bytes"):
        validate_key(six_hundred)


def test_segments_over_the_portable_limit_are_refused_everywhere(tmp_path: Path) -> None:
    longest = "s" * MAX_SEGMENT_BYTES
    assert validate_key(f"a/{longest}") == f"a/{longest}"
    multibyte = "日" * (MAX_SEGMENT_BYTES // 3 + 1)  # within the limit in characters, over it in bytes
    for key in (f"a/{longest}x", "s" * 256, f"{multibyte}/leaf"):
        for adapter in (open_adapter("memory://segments"), open_adapter(f"file://{tmp_path}")):
            with pytest.raises(InvalidKeyError, match=f"segment longer than {MAX_SEGMENT_BYTES} bytes"):
                adapter.write(key, b"x")
    local = open_adapter(f"file://{tmp_path}")
    local.write(f"a/{longest}", b"fits on local too")
    assert [i.key for i in local.list()] == [f"a/{longest}"]


@pytest.mark.parametrize("key", ["a#1/b", "a/b#0123/c", "x#9"])
def test_staging_shapes_are_reserved_in_every_segment(key: str) -> None:
    with pytest.raises(InvalidKeyError, match="reserved"):
        validate_key(key)


@pytest.mark.parametrize("key", ["#1a/b", "a#/b", "a#x1", "#", "a/#b", ".hidden/..x/...", "a b/ c "])
def test_odd_but_portable_names_are_valid(key: str) -> None:
    assert validate_key(key) == key
    assert validate_prefix(key + "/") == key
