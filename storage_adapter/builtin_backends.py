"""The built-in backends: ``local`` (``file://``), ``s3`` and ``memory``, each one registered object.

Each states its URL shape, options, capabilities, driver, throwaway instance and fsspec peer here, and
nowhere else. Imported (and so registered) by ``storage_adapter/__init__``.
"""

from __future__ import annotations

import ipaddress
import os
import re
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import fields, replace
from types import MappingProxyType
from typing import Any, get_type_hints
from urllib.parse import SplitResult, urlsplit

from storage_adapter.config import AdapterConfig, url_path
from storage_adapter.driver import Driver, ForeignWriter
from storage_adapter.errors import (
    BackendUnavailableError,
    ConfigurationError,
    InvalidKeyError,
    UnsupportedOperationError,
)
from storage_adapter.keys import is_plain_text, validate_prefix
from storage_adapter.local_driver import LocalDriver, LocalForeignWriter
from storage_adapter.obstore_driver import (
    ObstoreDriver,
    WrappedStore,
    is_obstore_store,
    local_directory,
    memory_store,
    s3_store,
    store_identity,
    store_secrets,
    store_writer,
    wrapped_driver,
)
from storage_adapter.redaction import redact_url, reject_userinfo
from storage_adapter.registry import Backend, FsspecPeer, HadoopRoot, Option, register_backend
from storage_adapter.translation import status_error_class
from storage_adapter.types import Capabilities, Support

_CHECK_THEN_ACT = "check-then-act (read the token, then write): not atomic"
# The longest streamed body write_if_absent / write_if_match send to S3 (buffered into one conditional
# PUT); longer ones are refused with UnsupportedOperationError (docs/streams.md).
S3_CONDITIONAL_STREAM_LIMIT = 64 * 1024 * 1024


def bucket_and_prefix(what: str, name: re.Pattern[str] | None = None) -> Any:
    """``locate`` for ``scheme://NAME/prefix`` URLs: NAME is required (and must match ``name`` when given),
    the prefix must be a valid key."""

    def locate(parts: SplitResult, url: str) -> tuple[str, str]:
        if not parts.netloc:
            raise ConfigurationError(
                f"{parts.scheme} URL {url!r} needs a {what}: {parts.scheme}://NAME/prefix", key=url
            )
        if name is not None and not name.fullmatch(parts.netloc):
            raise ConfigurationError(
                f"{parts.scheme} URL {url!r} names a malformed {what} {parts.netloc!r}: letters, digits, "
                "'.', '-' and '_', starting and ending with a letter or digit, at most 255",
                key=url,
            )
        try:
            prefix = validate_prefix(url_path(parts, url).lstrip("/"), parts.scheme)
        except InvalidKeyError as exc:
            raise ConfigurationError(f"storage URL {url!r} has an invalid prefix: {exc}", key=url) from exc
        return parts.netloc, prefix

    return locate


# -- local -----------------------------------------------------------------------------------------------
def _locate_directory(parts: SplitResult, url: str) -> tuple[str, str]:
    path = url_path(parts, url)
    if parts.netloc not in ("", "localhost"):
        raise ConfigurationError(f"file URL {url!r} must be file:///absolute/path", key=url)
    if not path.startswith("/"):
        raise ConfigurationError(f"file URL {url!r} must name an absolute path", key=url)
    if "\x00" in path:
        raise ConfigurationError(f"file URL {url!r} names a path with a NUL byte", key=url)
    return os.path.normpath(path), ""


@contextmanager
def _local_scratch() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="storage-adapter-scratch-") as root:
        yield f"file://{root}"


def _fsspec_local(config: AdapterConfig) -> tuple[Any, str]:
    from fsspec.implementations.local import LocalFileSystem

    root = config.location.rstrip("/") + (f"/{config.prefix}" if config.prefix else "")
    return LocalFileSystem(auto_mkdir=True), root


def _local_hadoop_root(config: AdapterConfig, url: str) -> HadoopRoot:
    """Hadoop's ``file://`` filesystem names the directory as the adapter's URL does; its objects are
    files there."""
    return HadoopRoot(url.rstrip("/"), {}, local_directory=url.removeprefix("file://").rstrip("/"))


LOCAL = register_backend(
    Backend(
        name="local",
        scheme="file",
        capabilities=Capabilities(
            backend="local",
            write_if_absent=Support.EMULATED,
            write_if_match=Support.EMULATED,
            atomic_rename=True,
            shared_across_processes=True,
            equal_content_equal_token=False,
            durable=True,
            token_semantics="inode-mtime-size; mtimes strictly increase along a key's history, so a token "
            "never repeats while the key exists (single host; clocks must not step back across a re-create)",
            single_delete="unlink(2) of the one file, under its directory lock",
            batch_delete="one unlink(2) per key, 8 at a time",
            reclaims_orphans=True,  # a killed writer leaves its staging file
            # A stream is staged whole in a file, then published by link/rename under the lock.
            streamed_conditional_write=Support.EMULATED,
        ),
        locate=_locate_directory,
        driver=LocalDriver,
        foreign_writer=LocalForeignWriter,
        options=MappingProxyType({"durable": Option(bool, default=True)}),
        configured=lambda declared, config: replace(declared, durable=bool(config.option("durable"))),
        display_location=lambda location: location.rstrip("/"),
        scratch=_local_scratch,
        hadoop_root=_local_hadoop_root,
        fsspec_peer=FsspecPeer(
            name="fsspec-local",
            capabilities=Capabilities(
                backend="fsspec-local",
                write_if_absent=Support.EMULATED,  # exists() then write
                write_if_match=Support.EMULATED,
                atomic_rename=True,  # shutil.move within one filesystem is rename(2)
                shared_across_processes=True,
                equal_content_equal_token=False,
                durable=False,
                token_semantics=f"hash of fsspec info (size, mtime, inode); CAS is {_CHECK_THEN_ACT}",
                single_delete="os.remove of the one file (LocalFileSystem.rm_file)",
                batch_delete="one delete per key, in turn",
                reclaims_orphans=False,  # writes in place: nothing staged
            ),
            filesystem=_fsspec_local,
        ),
    )
)


# -- s3 --------------------------------------------------------------------------------------------------
# Bounded by default: an unreachable endpoint must fail in seconds, not after object_store's 3 minutes.
# With no keys, the standard AWS chain signs the requests (storage_adapter.aws_profile); unsigned requests
# only with anonymous=True. Every option is checked here, before obstore sees it: obstore panics on a
# malformed endpoint and overflows on an out-of-range number.
# The HTTP client's options, shared by every backend over an object_store HTTP client (S3, Azure): its
# timeouts, retries, proxy, TLS verification and connection pool. Bounded by default: an unreachable
# endpoint must fail in seconds, not after object_store's 3 minutes.
CLIENT_OPTIONS: Mapping[str, Option] = MappingProxyType(
    {
        "connect_timeout_s": Option(float, default=5.0),
        "request_timeout_s": Option(float, default=60.0),
        "max_retries": Option(int, default=3),
        "retry_timeout_s": Option(float, default=15.0),
        "init_backoff_s": Option(float, default=0.1),
        "max_backoff_s": Option(float, default=15.0),
        # A forward proxy (and hosts that bypass it), TLS verification, the connection pool.
        "proxy_url": Option(str),
        "proxy_excludes": Option(str),
        "allow_invalid_certificates": Option(bool, default=False),
        "pool_max_idle_per_host": Option(int, default=None),
        "pool_idle_timeout_s": Option(float, default=None),
    }
)
# With no keys, the standard AWS chain signs the requests (storage_adapter.aws_profile); unsigned requests
# only with anonymous=True. Every option is checked here, before obstore sees it: obstore panics on a
# malformed endpoint and overflows on an out-of-range number.
S3_OPTIONS: Mapping[str, Option] = MappingProxyType(
    {
        "endpoint": Option(
            str, env=("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
        ),  # the service-specific one wins
        # The credentials resolve as one group: keys given explicitly take no token or profile of the
        # environment, and a profile given explicitly takes no keys from it.
        "access_key_id": Option(str, env=("AWS_ACCESS_KEY_ID",), group="credentials"),
        "secret_access_key": Option(str, env=("AWS_SECRET_ACCESS_KEY",), secret=True, group="credentials"),
        "session_token": Option(str, env=("AWS_SESSION_TOKEN",), secret=True, group="credentials"),
        "profile": Option(str, env=("AWS_PROFILE", "AWS_DEFAULT_PROFILE"), group="credentials"),
        "anonymous": Option(bool, env=("AWS_SKIP_SIGNATURE",), default=False),
        "region": Option(str, env=("AWS_REGION", "AWS_DEFAULT_REGION"), default="us-east-1"),
        "virtual_hosted_style": Option(bool, env=("AWS_VIRTUAL_HOSTED_STYLE_REQUEST",), default=False),
        "conditional_put": Option(str, env=("AWS_CONDITIONAL_PUT",), default="etag"),
        "allow_http": Option(bool, env=("AWS_ALLOW_HTTP",), default=False),
        **CLIENT_OPTIONS,
        # Compatibility mode for Ceph RGW before its 2025 fix, which answers 412 to an If-Match carrying
        # the quoted ETag it returned itself: send the ETag unquoted. CAS against CAS is then exact, but a
        # CAS racing a plain write or delete is still not atomic there (docs/ceph.md).
        "unquoted_if_match": Option(bool, env=("STORAGE_ADAPTER_S3_UNQUOTED_IF_MATCH",), default=False),
    }
)
UNQUOTED_IF_MATCH = "unquoted-if-match"
# object_store's conditional-put modes: "etag" (If-None-Match / If-Match) or "disabled" (conditional
# writes refused, declared unsupported in the capabilities).
CONDITIONAL_PUT_MODES = ("etag", "disabled")


# What object_store can represent (its durations and retry count), with room to spare.
_CLIENT_LIMITS = {
    "max_retries": 100,
    "connect_timeout_s": 86400.0,
    "request_timeout_s": 86400.0,
    "pool_max_idle_per_host": 100_000,
    "pool_idle_timeout_s": 86400.0,
    "retry_timeout_s": 86400.0,
    "init_backoff_s": 86400.0,
    "max_backoff_s": 86400.0,
}
# A zero duration would make every request (or the first retry) fail at once.
_POSITIVE = (
    "connect_timeout_s",
    "request_timeout_s",
    "init_backoff_s",
    "max_backoff_s",
    "pool_idle_timeout_s",
)
# An endpoint's host: a name or IPv4 address, or an IPv6 address in brackets (what the URI parser under
# object_store accepts; anything else panics there on the first request).
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]")
_PATH = re.compile(r"(?:/[A-Za-z0-9._~!$&'()*+,;=:@%-]*)*")
_DOTTED_NUMBERS = re.compile(r"[0-9.]+")
# A bucket name as S3 servers accept it (AWS's rules are stricter; some servers allow capitals and "_"):
# anything else reaches object_store's URI parser, which panics on it at the first request.
_BUCKET = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,253}[A-Za-z0-9])?")


def _is_address(host: str) -> bool:
    """False for a host written as an IP address that is not one (``999.1.1.1``, ``[1::2::3]``), which the
    URI parser under object_store panics on; True for every other host."""
    literal = host[1:-1] if host.startswith("[") else host if _DOTTED_NUMBERS.fullmatch(host) else None
    if literal is None:
        return True
    try:
        ipaddress.ip_address(literal)
    except ValueError:
        return False
    return True


def _endpoint_problem(endpoint: str) -> str:
    """Why ``endpoint`` is not a well-formed ``http(s)://host[:port][/path]`` URL; empty when it is."""
    if not endpoint.startswith(("http://", "https://")):
        return "must start with http:// or https://"
    try:
        parts = urlsplit(endpoint)
        port = parts.port
    except ValueError:
        return "has a malformed host or port"
    if port == 0 or parts.netloc.endswith(":"):
        return "has a malformed port"
    host = parts.netloc.rpartition(":")[0] if port is not None else parts.netloc
    if not _HOST.fullmatch(host) or ".." in host or not _is_address(host):
        return "has a malformed host"
    if parts.query or parts.fragment or "?" in endpoint or "#" in endpoint:
        return "must not have a query or fragment"
    if not _PATH.fullmatch(parts.path):
        return "has characters a URL path cannot hold"
    return ""


def check_endpoint(endpoint: str | None, url: str, service: str) -> None:
    """Raise ConfigurationError unless ``endpoint`` (None: not set) is a well-formed
    ``http(s)://host[:port][/path]`` URL without credentials (they belong in their options)."""
    if endpoint is None:
        return
    reject_userinfo(endpoint)
    problem = _endpoint_problem(endpoint)
    if problem:
        raise ConfigurationError(f"{service} endpoint {endpoint!r} for {url} {problem}", key=url)


def check_client_options(options: Mapping[str, Any], url: str, service: str) -> None:
    """Validate the HTTP client's options (:data:`CLIENT_OPTIONS`) of a resolved configuration: a proxy
    URL without credentials, host names to bypass it, durations and counts object_store can represent."""
    proxy = options.get("proxy_url")
    if proxy is not None:
        if redact_url(proxy) != proxy:  # proxy credentials are not supported: never carried in a URL
            raise ConfigurationError(
                f"{service} proxy_url {redact_url(proxy)!r} for {url} carries credentials "
                "(user:password@), which are not supported",
                key=url,
            )
        problem = _endpoint_problem(proxy)
        if problem:
            raise ConfigurationError(f"{service} proxy_url {proxy!r} for {url} {problem}", key=url)
    excludes = options.get("proxy_excludes")
    if excludes is not None and not all(_HOST.fullmatch(h.strip().lstrip(".")) for h in excludes.split(",")):
        raise ConfigurationError(
            f"option proxy_excludes={excludes!r} for {url} must be comma-separated host names", key=url
        )
    for name in _POSITIVE:
        if options.get(name) is not None and options[name] <= 0:
            raise ConfigurationError(f"option {name}={options[name]!r} for {url} must be positive", key=url)
    for name, limit in _CLIENT_LIMITS.items():
        if options.get(name) is not None and options[name] > limit:
            raise ConfigurationError(f"option {name}={options[name]!r} for {url} is over {limit}", key=url)


def _check_s3_options(options: Mapping[str, Any], url: str) -> None:
    check_endpoint(options.get("endpoint"), url, "S3")
    if bool(options.get("access_key_id")) != bool(options.get("secret_access_key")):
        raise ConfigurationError(f"S3 options for {url}: access_key_id and secret_access_key go together")
    if options.get("session_token") and not options.get("access_key_id"):
        raise ConfigurationError(f"S3 options for {url}: a session_token needs access_key_id")
    if options["conditional_put"] not in CONDITIONAL_PUT_MODES:
        raise ConfigurationError(
            f"option conditional_put={options['conditional_put']!r} for {url} must be one of "
            + ", ".join(CONDITIONAL_PUT_MODES),
            key=url,
        )
    check_client_options(options, url, "S3")


class _UnquotedIfMatch(ObstoreDriver):
    """The S3 driver in compatibility mode ``unquoted-if-match``: If-Match carries the ETag without its
    quotes (a token is still the quoted ETag everywhere else)."""

    def if_match_token(self, token: str) -> str:
        return token.strip('"')


def _s3_driver(config: AdapterConfig) -> Driver:
    driver = _UnquotedIfMatch if config.option("unquoted_if_match") else ObstoreDriver
    return driver(
        config,
        s3_store,
        signed_delete_timeout_s=float(dict(config.options)["request_timeout_s"]),
    )


def _s3_configured(declared: Capabilities, config: AdapterConfig) -> Capabilities:
    """The compatibility modes an S3 configuration turns on, and the conditional writes it turns off,
    declared (never silent)."""
    configured = replace(
        declared, compatibility_modes=(UNQUOTED_IF_MATCH,) if config.option("unquoted_if_match") else ()
    )
    if config.option("conditional_put") == "disabled":
        # object_store then refuses every conditional put: never emulated behind the caller's back.
        configured = replace(
            configured, write_if_absent=Support.UNSUPPORTED, write_if_match=Support.UNSUPPORTED
        )
    return configured


def _botocore_config(opts: Mapping[str, Any]) -> dict[str, Any]:
    """The adapter's timeouts, retries and addressing as botocore ``Config`` settings (s3fs's and the
    bucket creation's clients behave as the adapter's)."""
    return {
        "connect_timeout": opts["connect_timeout_s"],
        "read_timeout": opts["request_timeout_s"],
        "retries": {"max_attempts": int(opts["max_retries"]) + 1, "mode": "standard"},
        "s3": {"addressing_style": "virtual" if opts["virtual_hosted_style"] else "path"},
    }


def _create_s3_bucket(config: AdapterConfig) -> None:
    """Create the bucket ``config`` addresses, with its endpoint, region and credentials; a bucket these
    credentials already own counts as created. Needs botocore (the ``aws`` extra)."""
    try:
        import botocore.session
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError as exc:
        raise ConfigurationError(
            f"creating the bucket of {config.url} needs botocore (pip install 'storage-adapter[aws]')",
            key=config.url,
        ) from exc
    opts = dict(config.options)
    keys = opts.get("access_key_id")
    session = botocore.session.Session(profile=None if keys else opts.get("profile"))
    client = session.create_client(
        "s3",
        region_name=opts["region"],
        endpoint_url=opts.get("endpoint"),
        aws_access_key_id=keys,
        aws_secret_access_key=opts.get("secret_access_key") if keys else None,
        aws_session_token=opts.get("session_token") if keys else None,
        config=Config(**_botocore_config(opts)),
    )
    where = {} if opts["region"] == "us-east-1" else {"LocationConstraint": opts["region"]}
    try:
        client.create_bucket(
            Bucket=config.location, **({"CreateBucketConfiguration": where} if where else {})
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
            raise status_error_class(int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)))(
                f"cannot create the bucket of {config.url}: {exc}", key=config.location, backend="s3"
            ) from None
    except BotoCoreError as exc:
        raise BackendUnavailableError(
            f"cannot create the bucket of {config.url}: {exc}", key=config.location, backend="s3"
        ) from None


def _fsspec_s3(config: AdapterConfig) -> tuple[Any, str]:
    import s3fs

    opts = dict(config.options)
    fs = s3fs.S3FileSystem(
        key=opts.get("access_key_id"),
        secret=opts.get("secret_access_key"),
        token=opts.get("session_token"),
        anon=bool(opts["anonymous"]),  # otherwise botocore's credential chain, as the adapter's
        profile=None if opts.get("access_key_id") else opts.get("profile"),
        endpoint_url=opts.get("endpoint"),
        client_kwargs={"region_name": opts["region"]},
        config_kwargs=_botocore_config(opts),
    )
    return fs, f"{config.location}/{config.prefix}" if config.prefix else config.location


# Hadoop's S3 filesystem (hadoop-aws): not in the PySpark wheel; clusters add it with the AWS SDK bundle.
S3A_FILESYSTEM = "org.apache.hadoop.fs.s3a.S3AFileSystem"


def _s3_hadoop_root(config: AdapterConfig, url: str) -> HadoopRoot:
    """``s3://bucket/prefix`` as S3A names it, ``s3a://bucket/prefix``, reached with the adapter's options
    as per-bucket S3A settings (:func:`s3a_options`)."""
    return HadoopRoot(
        "s3a://" + url.removeprefix("s3://").rstrip("/"),
        s3a_options(config.location, dict(config.options)),
        filesystem_class=S3A_FILESYSTEM,
    )


def s3a_options(bucket: str, options: Mapping[str, Any]) -> dict[str, str]:
    """The ``fs.s3a.bucket.<bucket>.*`` settings of the adapter's S3 ``options``: endpoint (and TLS as its
    scheme says), region, path-style unless virtual-hosted, static keys and session token; anonymous as
    S3A's anonymous provider. Without keys, S3A's own credential chain signs (environment, instance
    profile). UnsupportedOperationError for a ``profile``, which S3A takes only from its environment."""
    if options.get("profile"):
        raise UnsupportedOperationError(
            f"S3 option profile has no s3a:// setting here (bucket {bucket!r}): give the keys, or write with "
            "the data source (df.write.format('storage_adapter'))",
            key=bucket,
            backend="s3",
        )
    prefix = f"fs.s3a.bucket.{bucket}."
    settings = {"path.style.access": "false" if options.get("virtual_hosted_style") else "true"}
    endpoint = options.get("endpoint")
    if endpoint:
        settings["endpoint"] = str(endpoint)
        settings["connection.ssl.enabled"] = "false" if str(endpoint).startswith("http://") else "true"
    if options.get("region"):
        settings["endpoint.region"] = str(options["region"])
    if options.get("anonymous"):
        settings["aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider"
    for name, setting in (
        ("access_key_id", "access.key"),
        ("secret_access_key", "secret.key"),
        ("session_token", "session.token"),
    ):
        if options.get(name):
            settings[setting] = str(options[name])
    return {prefix + name: value for name, value in settings.items()}


S3 = register_backend(
    Backend(
        name="s3",
        scheme="s3",
        capabilities=Capabilities(
            backend="s3",
            write_if_absent=Support.NATIVE,
            write_if_match=Support.NATIVE,
            atomic_rename=False,  # copy + delete
            shared_across_processes=True,
            equal_content_equal_token=True,
            durable=True,
            token_semantics="the ETag; for single-part puts the MD5 of the content, so equal bodies give "
            "equal tokens (put a unique value in CAS bodies to rule out ABA)",
            single_delete="object_store 0.13 sends POST ?delete with one key; where a server refuses it (a permanent 4xx "
            "or 501) one DeleteObject to a presigned URL instead (needs credentials), never the multi-object "
            "POST ?delete again",
            batch_delete="one multi-object POST ?delete (DeleteObjects) per 1000 keys; where the server refused "
            "it, one presigned DeleteObject per key, 8 at a time",
            reclaims_orphans=False,  # incomplete multipart uploads: the bucket's lifecycle rules
            # Multipart uploads carry no If-None-Match / If-Match on many servers (object_store sends none):
            # a conditional stream is buffered into one conditional PUT, up to this size.
            streamed_conditional_write=Support.NATIVE,
            streamed_conditional_limit=S3_CONDITIONAL_STREAM_LIMIT,
        ),
        locate=bucket_and_prefix("bucket", _BUCKET),
        driver=_s3_driver,
        foreign_writer=lambda config: store_writer(s3_store(config), config, "s3"),
        options=S3_OPTIONS,
        check_options=_check_s3_options,
        configured=_s3_configured,
        create_container=_create_s3_bucket,
        hadoop_root=_s3_hadoop_root,
        fsspec_peer=FsspecPeer(
            name="s3fs",
            capabilities=Capabilities(
                backend="s3fs",
                write_if_absent=Support.NATIVE,  # pipe_file(mode="create") sends If-None-Match: *
                write_if_match=Support.EMULATED,
                atomic_rename=False,  # copy + delete
                shared_across_processes=True,
                equal_content_equal_token=True,
                durable=True,
                token_semantics=f"the ETag (content MD5 for single-part puts); CAS is {_CHECK_THEN_ACT}",
                single_delete="DeleteObject (S3FileSystem.rm_file)",
                batch_delete="one delete per key, in turn",
                reclaims_orphans=False,
            ),
            filesystem=_fsspec_s3,
        ),
    )
)


# -- memory ----------------------------------------------------------------------------------------------
@contextmanager
def _memory_scratch() -> Iterator[str]:
    yield f"memory://scratch-{uuid.uuid4().hex[:12]}"


def _fsspec_memory(config: AdapterConfig) -> tuple[Any, str]:
    from fsspec.implementations.memory import MemoryFileSystem

    return MemoryFileSystem(), f"/{config.location}" + (f"/{config.prefix}" if config.prefix else "")


MEMORY = register_backend(
    Backend(
        name="memory",
        scheme="memory",
        capabilities=Capabilities(
            backend="memory",
            write_if_absent=Support.NATIVE,
            write_if_match=Support.NATIVE,
            atomic_rename=False,  # object_store's InMemory renames by copy then delete
            shared_across_processes=False,
            equal_content_equal_token=False,
            durable=False,
            token_semantics="a per-store counter, incremented by every put: never repeats within the process",
            single_delete="removal from the in-process store",
            batch_delete="removal from the in-process store, 1000 keys per call",
            reclaims_orphans=False,
            streamed_conditional_write=Support.NATIVE,  # buffered into one put: the store is memory anyway
        ),
        locate=bucket_and_prefix("store name"),
        driver=lambda config: ObstoreDriver(config, memory_store),
        foreign_writer=lambda config: store_writer(memory_store(config), config, "memory"),
        scratch=_memory_scratch,
        fsspec_peer=FsspecPeer(
            name="fsspec-memory",
            capabilities=Capabilities(
                backend="fsspec-memory",
                write_if_absent=Support.EMULATED,  # exists() then write
                write_if_match=Support.EMULATED,
                atomic_rename=False,  # MemoryFileSystem.mv copies then deletes
                shared_across_processes=False,
                equal_content_equal_token=False,
                durable=False,
                token_semantics=f"hash of fsspec info (size, created time); CAS is {_CHECK_THEN_ACT}",
                single_delete="removal from the in-process dict (MemoryFileSystem.rm_file)",
                batch_delete="one delete per key, in turn",
                reclaims_orphans=False,
            ),
            filesystem=_fsspec_memory,
        ),
    )
)


# -- a user's own obstore store --------------------------------------------------------------------------
def _store_url(parts: SplitResult, url: str) -> tuple[str, str]:
    raise ConfigurationError(
        f"{url!r}: an obstore:// adapter wraps a store object; open it with "
        "open_adapter(store=<obstore store>, capabilities=Capabilities(...))",
        key=url,
    )


def _declared(_placeholder: Capabilities, config: AdapterConfig) -> Capabilities:
    declared: Capabilities = config.option("capabilities")
    return declared


def _wrapped_foreign_writer(config: AdapterConfig) -> ForeignWriter:
    """Writes below the root of an adapter over a user's store: its directory's files for a LocalStore,
    else through the store (raw requests for S3 and Azure)."""
    store = config.option("store").store
    directory = local_directory(store)
    if directory is not None:
        return LocalForeignWriter(AdapterConfig(LOCAL.name, directory, config.prefix, (("durable", True),)))
    return store_writer(store, config, config.option("capabilities").backend)


def _wrapped_driver(config: AdapterConfig) -> Driver:
    """The driver of an adapter over a user's store, named as its declared capabilities say. A
    ``LocalStore`` names a directory, served by the ``file://`` backend's driver at that directory
    (durable): object_store's local store has no compare-and-swap, no fsync and follows symlinks, so it
    could keep none of the adapter's promises there. Any other store is driven through obstore."""
    name = config.option("capabilities").backend
    directory = local_directory(config.option("store").store)
    if directory is not None:
        return LocalDriver(
            AdapterConfig(LOCAL.name, directory, config.prefix, (("durable", True),)), name=name
        )
    return wrapped_driver(config, name)


WRAPPED = register_backend(
    Backend(
        name="obstore",
        scheme="obstore",
        # Never used as is: an adapter over a user's store has the capabilities its caller declared
        # (``configured``), and the contract checks them.
        capabilities=Capabilities(
            backend="obstore",
            write_if_absent=Support.UNSUPPORTED,
            write_if_match=Support.UNSUPPORTED,
            atomic_rename=False,
            shared_across_processes=False,
            equal_content_equal_token=True,
            token_semantics="declared by the caller of open_adapter(store=...)",
            durable=False,
            single_delete="declared by the caller of open_adapter(store=...)",
            batch_delete="declared by the caller of open_adapter(store=...)",
            reclaims_orphans=False,
        ),
        locate=_store_url,
        driver=_wrapped_driver,
        foreign_writer=_wrapped_foreign_writer,
        options=MappingProxyType(
            {
                "store": Option(WrappedStore),
                "capabilities": Option(Capabilities),
                "secrets": Option(tuple, secret=True),
            }
        ),
        configured=_declared,
    )
)


# What each declared capability must be (the annotations, resolved once).
_CAPABILITY_TYPES = get_type_hints(Capabilities)


def _declaration_problem(declared: Capabilities) -> str:
    """What is wrong with a caller's declared capabilities (a field not of its annotated type, a backend
    name that is not plain text, which every message names); empty when nothing is."""
    for field in fields(Capabilities):
        value, hint = getattr(declared, field.name), _CAPABILITY_TYPES[field.name]
        if hint == tuple[str, ...]:
            ok = isinstance(value, tuple) and all(isinstance(mode, str) for mode in value)
        elif hint == int | None:  # a byte count, or no limit
            ok = value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)
        else:
            ok = isinstance(value, hint)
        if not ok:
            return f"{field.name} must be of type {hint}, not {value!r:.80}"
    if not is_plain_text(declared.backend) or not declared.backend:
        return f"backend must name the store in plain text, not {declared.backend!r:.80}"
    return ""


def store_config(store: object, capabilities: object, options: Mapping[str, Any]) -> AdapterConfig:
    """The configuration of an adapter over the user's obstore ``store`` (MemoryStore, LocalStore,
    S3Store, ...) with the declared ``capabilities``. Raises ConfigurationError for anything but an
    obstore store, for missing or ill-typed capabilities, and for options (the store carries its own
    configuration)."""
    kind = type(store).__name__
    if not is_obstore_store(store):
        raise ConfigurationError(f"store must be an obstore store (obstore.store.*Store), not {kind}")
    identity = store_identity(store)
    if capabilities is None:
        raise ConfigurationError(
            f"the obstore {kind} {identity} has no declared capabilities: pass "
            "open_adapter(store=..., capabilities=Capabilities(...)) saying what it guarantees (the "
            "contract suite checks the declaration)",
            key=identity,
        )
    if not isinstance(capabilities, Capabilities):
        raise ConfigurationError(
            f"capabilities for the obstore {kind} {identity} must be a Capabilities, not "
            f"{type(capabilities).__name__}",
            key=identity,
        )
    problem = _declaration_problem(capabilities)
    if problem:
        raise ConfigurationError(f"capabilities for the obstore {kind} {identity}: {problem}", key=identity)
    if options:
        raise ConfigurationError(
            f"unknown option(s) {', '.join(sorted(options))} for the obstore {kind} {identity}: a wrapped "
            "store carries its own configuration",
            key=identity,
        )
    return AdapterConfig(
        WRAPPED.name,
        identity,
        "",
        (
            ("capabilities", capabilities),
            ("secrets", store_secrets(store)),
            ("store", WrappedStore(store, identity)),
        ),
    )
