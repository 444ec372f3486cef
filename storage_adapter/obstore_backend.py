"""The one module that imports obstore: builds stores and translates every obstore exception.

Methods take full store paths (root prefix already joined) plus the caller's key for messages. Conditional
outcomes that are not errors (a lost create, a failed precondition) come back as values, not exceptions.
"""

from __future__ import annotations

import asyncio
import builtins
import io
import itertools
import operator
import os
import pickle
import re
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Iterable, Iterator, Sequence
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

import obstore
from arro3.core import DataType
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    GenericError,
    InvalidPathError,
    NotSupportedError,
    PreconditionError,
    UnauthenticatedError,
)
from obstore.exceptions import PermissionDeniedError as ObstorePermissionDenied
from obstore.store import AzureStore, GCSStore, HTTPStore, LocalStore, MemoryStore, S3Store

from storage_adapter.aws_profile import BotocoreCredentials, StaticKeys, profile_source
from storage_adapter.batch import DELETE_BATCH, DELETE_WORKERS, LIST_PAGE, chunked, delete_each, side_by_side
from storage_adapter.config import AdapterConfig
from storage_adapter.errors import (
    BackendUnavailableError,
    BatchDeleteError,
    ConfigurationError,
    InvalidKeyError,
    NotFoundError,
    ObjectChangedError,
    PermissionDeniedError,
    StorageError,
    UnsupportedOperationError,
)
from storage_adapter.faults import FaultKind, due, recovering
from storage_adapter.keys import join_key
from storage_adapter.streams import BytesLike, clip
from storage_adapter.threaded import ThreadedAsyncDriver, in_thread
from storage_adapter.types import ObjectInfo, object_infos

if TYPE_CHECKING:  # only in obstore's type stubs
    from obstore import GetOptions
    from obstore.store import S3Config, S3CredentialProvider

# obstore 0.12 exposes no status attribute: an error's text ends with object_store's error in Rust's
# pretty Debug form, after this marker. Inside it every string (server body, URL) is escaped onto one
# line, so a field that spans a line break is object_store's own structure, never server or user text.
_DEBUG_MARKER = "\n\nDebug source:\n"
# RequestError::Status / ::Response { status, .. }: the server answered with this HTTP status.
_STATUS_FIELD = re.compile(r"^ *(?:inner: )?(?:Status|Response) \{\n *status: (\d{3}),$", re.MULTILINE)
# HttpError { kind, .. }: the request never got an answer (connect, request, timeout, interrupted, ...).
_TRANSPORT_FIELD = re.compile(r"^ *(?:\w+: )?HttpError \{\n *kind: (\w+),$", re.MULTILINE)

# A GET body is copied into its final bytes in chunks of at least this size. Larger ones cost more than
# they save: obstore gathers each chunk from many HTTP frames, and 8 MiB chunks peaked at 1.2-1.3x the
# object, 1 MiB ones at 1.02-1.05x.
_READ_CHUNK = 1024 * 1024

# A streamed body goes out as one PUT when it ends within this many bytes, else as a multipart upload in
# parts of this size (object_store's default; S3's minimum part size is 5 MiB).
_PART = 5 * 1024 * 1024

_MEMORY_STORES: dict[str, MemoryStore] = {}
_MEMORY_LOCK = threading.Lock()


def _memory_store(name: str) -> MemoryStore:
    with _MEMORY_LOCK:
        store = _MEMORY_STORES.get(name)
        if store is None:
            store = _MEMORY_STORES[name] = MemoryStore()
        return store


def memory_store(config: AdapterConfig) -> Any:
    """The process-wide in-memory store named by ``config.location``."""
    return _memory_store(config.location)


def _credentials(opts: dict[str, Any], s3_config: dict[str, Any], url: str) -> BotocoreCredentials | None:
    """Put the keys that sign the store into ``s3_config``: the options' own, else a static profile's.
    Returns the credential provider for any other profile (botocore's), or None: object_store's own chain
    (web identity, container, instance metadata) then signs."""
    if opts.get("access_key_id"):
        source: StaticKeys | BotocoreCredentials | None = StaticKeys(
            opts["access_key_id"], opts["secret_access_key"], opts.get("session_token")
        )
    else:
        source = profile_source(opts.get("profile"), url)
    if not isinstance(source, StaticKeys):
        return source
    s3_config.update(access_key_id=source.access_key_id, secret_access_key=source.secret_access_key)
    if source.session_token:
        s3_config["session_token"] = source.session_token
    return None


def _client_options(opts: dict[str, Any]) -> Any:
    """object_store's HTTP client options from the (validated) S3 options; unset ones keep its defaults."""
    client: dict[str, Any] = {
        "allow_http": bool(opts["allow_http"]),
        "allow_invalid_certificates": bool(opts["allow_invalid_certificates"]),
        "connect_timeout": timedelta(seconds=opts["connect_timeout_s"]),
        "timeout": timedelta(seconds=opts["request_timeout_s"]),
    }
    if opts.get("proxy_url"):
        client["proxy_url"] = opts["proxy_url"]
    if opts.get("proxy_excludes"):
        client["proxy_excludes"] = opts["proxy_excludes"]
    if opts.get("pool_max_idle_per_host") is not None:
        client["pool_max_idle_per_host"] = str(opts["pool_max_idle_per_host"])  # obstore takes text
    if opts.get("pool_idle_timeout_s") is not None:
        client["pool_idle_timeout"] = timedelta(seconds=opts["pool_idle_timeout_s"])
    return client


def s3_store(config: AdapterConfig) -> Any:
    """An S3Store for the bucket ``config.location`` with the resolved (and already validated) S3 options.

    Signed by the keys in the options, else by the standard AWS chain (:mod:`storage_adapter.aws_profile`
    resolves its profiles, object_store the rest); unsigned only with ``anonymous``. Every setting
    object_store would otherwise take from the environment is given explicitly, so the options decide.
    """
    opts = dict(config.options)
    s3_config: dict[str, Any] = {
        "region": opts["region"],
        "virtual_hosted_style_request": opts["virtual_hosted_style"],
        "conditional_put": opts["conditional_put"],
        "skip_signature": opts["anonymous"],
    }
    if opts.get("endpoint"):
        # object_store lets AWS_ENDPOINT_URL_S3 from its own environment beat "endpoint"; under its own
        # key the option wins (the variable already fed the option when no endpoint was given).
        s3_config["endpoint"] = s3_config["aws_endpoint_url_s3"] = opts["endpoint"]
    provider = None if opts["anonymous"] else _credentials(opts, s3_config, config.url)
    return S3Store(
        config.location,
        config=cast("S3Config", s3_config),
        client_options=_client_options(opts),
        retry_config={
            "max_retries": opts["max_retries"],
            "retry_timeout": timedelta(seconds=opts["retry_timeout_s"]),
            "backoff": {
                "init_backoff": timedelta(seconds=opts["init_backoff_s"]),
                "max_backoff": timedelta(seconds=opts["max_backoff_s"]),
            },
        },
        credential_provider=cast("S3CredentialProvider | None", provider),
    )


# -- a user's own obstore store (open_adapter(store=..., capabilities=...)) -----------------------------
_STORE_TYPES = (MemoryStore, LocalStore, S3Store, GCSStore, AzureStore, HTTPStore)
# The fields of a store's config that hold credentials (S3 keys and tokens, Azure keys and SAS, GCS
# service account keys): masked in everything the adapter reports.
_SECRET_FIELD = re.compile(r"secret|token|password|sas|service_account|^access_key$", re.IGNORECASE)
# Wrapped stores obstore cannot pickle, by identity: a pickled adapter over one reopens the very store in
# this process. Held from the first pickling on, for the process's life.
_REATTACHABLE: dict[str, Any] = {}


def is_obstore_store(candidate: object) -> bool:
    """Whether ``candidate`` is one of obstore's stores."""
    return isinstance(candidate, _STORE_TYPES)


def store_identity(store: Any) -> str:
    """A name for the store object itself: its kind, this process and the object (one store wrapped
    twice is one identity; a store and its pickled copy in another process keep the original's)."""
    return f"{type(store).__name__.lower()}-{os.getpid()}-{id(store):x}"


def store_secrets(store: Any) -> tuple[str, ...]:
    """The credential values in ``store``'s config (nothing for stores without one)."""
    config = getattr(store, "config", None) or {}
    return tuple(str(v) for k, v in config.items() if _SECRET_FIELD.search(k) and isinstance(v, str) and v)


class WrappedStore:
    """A user's obstore store inside an adapter's config: equal (and hashing) by the store's identity,
    so an adapter and its pickled copy compare equal.

    Pickling: through obstore's own pickling where it has one (S3, GCS, Azure, HTTP, local stores: the
    copy addresses the same bucket or directory). A store obstore cannot pickle (a MemoryStore, a store
    with a Python credential provider) is pickled by reference: the copy is the very same store in this
    process; in another process a MemoryStore copy is a new, empty store there (memory stores are
    per-process, as ``memory://`` ones), and any other store raises ConfigurationError when unpickled.
    """

    __slots__ = ("identity", "store")

    def __init__(self, store: Any, identity: str) -> None:
        self.store, self.identity = store, identity

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WrappedStore) and other.identity == self.identity

    def __hash__(self) -> int:
        return hash(self.identity)

    def __repr__(self) -> str:
        return f"WrappedStore({self.identity})"

    def __reduce__(self) -> tuple[Any, ...]:
        try:
            pickled = pickle.dumps(self.store)  # obstore's own pickling, where it has one
        except (TypeError, AttributeError, pickle.PicklingError):
            # obstore refuses (MemoryStore), or what the store holds does not pickle (a local function
            # as credential provider)
            with _MEMORY_LOCK:
                _REATTACHABLE.setdefault(self.identity, self.store)
            return (_reattached, (self.identity, isinstance(self.store, MemoryStore)))
        return (_unpickled, (pickled, self.identity))


def _unpickled(pickled: bytes, identity: str) -> WrappedStore:
    return WrappedStore(pickle.loads(pickled), identity)


def _reattached(identity: str, per_process: bool) -> WrappedStore:
    with _MEMORY_LOCK:
        store = _REATTACHABLE.get(identity)
        if store is None and per_process:
            store = _REATTACHABLE[identity] = MemoryStore()
    if store is None:
        raise ConfigurationError(
            f"the wrapped obstore store {identity} cannot be reopened in this process: obstore cannot "
            "pickle it; wrap the store in each process (or open the adapter from a URL)",
            key=identity,
        )
    return WrappedStore(store, identity)


def local_directory(store: object) -> str | None:
    """The directory a user's ``LocalStore`` serves (its prefix; the filesystem root without one), None
    for any other store."""
    if not isinstance(store, LocalStore):
        return None
    return str(store.prefix) if store.prefix is not None else os.sep


def wrapped_driver(config: AdapterConfig, name: str) -> ObstoreBackend:
    """The driver of an adapter over a user's store (config option ``store``, a :class:`WrappedStore`),
    its messages naming the backend ``name``. On S3 it confirms the child prefixes of ``list_dir`` and
    falls back to signed single deletes, as the ``s3`` backend does."""
    store = config.option("store").store
    s3 = isinstance(store, S3Store)
    return ObstoreBackend(
        config,
        lambda _config: store,
        confirm_prefixes=s3,
        signed_delete_timeout_s=60.0 if s3 else None,
        name=name,
    )


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


# What the boundary translates: obstore's errors and the OS's (local mutations, connection failures).
_TRANSLATED = (BaseError, OSError, NotImplementedError)


def _is_panic(exc: BaseException) -> bool:
    """A Rust panic inside obstore: pyo3 raises it as ``pyo3_runtime.PanicException``, a BaseException
    (one class per extension module, importable from none), so it is recognised by its qualified name."""
    return any(c.__module__ == "pyo3_runtime" and c.__name__ == "PanicException" for c in type(exc).__mro__)


def http_status(exc: BaseException) -> int | None:
    """The HTTP status the server answered (urllib's ``code``, or the field of object_store's structured
    error); None when the request got no answer (or the error did not come from an HTTP request)."""
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code
    match = _STATUS_FIELD.search(str(exc).rpartition(_DEBUG_MARKER)[2])
    return int(match.group(1)) if match else None


def _transport_failure(exc: BaseException) -> str | None:
    """object_store's ``HttpErrorKind`` when the request failed below HTTP (no status came back)."""
    match = _TRANSPORT_FIELD.search(str(exc).rpartition(_DEBUG_MARKER)[2])
    return match.group(1) if match else None


def status_error_class(status: int) -> type[StorageError]:
    """The error class for an HTTP status: the table in docs/errors.md.

    Transient (retry may succeed): 408, 409 (S3 answers a conflicting concurrent request so and says
    retry), 429 and 5xx except 501. 501 Not Implemented is the server's permanent refusal. Every other
    4xx (and 3xx) is a permanent refusal of this request: a plain, non-transient StorageError.
    """
    if status in (401, 403):
        return PermissionDeniedError
    if status == 404:
        return NotFoundError
    if status == 501:
        return UnsupportedOperationError
    if status in (408, 409, 429) or status >= 500:
        return BackendUnavailableError
    return StorageError


# A permanent refusal of the request itself (other 4xx, 501), as opposed to missing, denied or transient.
_REFUSALS = (StorageError, UnsupportedOperationError)

_PHRASES: dict[type[StorageError], str] = {
    PermissionDeniedError: "permission denied",
    InvalidKeyError: "invalid key",
    UnsupportedOperationError: "unsupported",
    BackendUnavailableError: "backend unavailable",
    StorageError: "failed",
}


class Translation:
    """Translates exceptions leaving its block into our hierarchy, naming key and backend. Every driver
    (this module's and the local one) wraps its I/O in one, so classification lives in one place.

    Classification is by exception type, HTTP status and transport failure, never by message wording
    (docs/errors.md). A Rust panic in obstore (a BaseException) becomes a StorageError too; other
    BaseExceptions (KeyboardInterrupt, SystemExit) and programming errors pass through unchanged.

    A class rather than a generator-based context manager: it wraps every request, and costs a fraction.
    """

    __slots__ = ("action", "backend", "key")

    def __init__(self, backend: str, key: str, action: str) -> None:
        self.backend, self.key, self.action = backend, key, action

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> Literal[False]:
        if exc is None or isinstance(exc, StorageError):
            return False  # success, or already ours
        if isinstance(exc, _TRANSLATED) or _is_panic(exc):
            raise self._translate(exc) from exc
        return False  # a programming error or an interrupt: it must surface as it is

    def _classify(self, exc: BaseException) -> tuple[type[StorageError], str]:
        """The error class, and what decided it (for the message)."""
        if _is_panic(exc):
            return StorageError, "obstore panicked"
        status = http_status(exc)
        if isinstance(exc, FileNotFoundError) or status == 404:
            return NotFoundError, ""
        if isinstance(exc, (ObstorePermissionDenied, UnauthenticatedError, PermissionError)):
            return PermissionDeniedError, ""
        if isinstance(exc, InvalidPathError):
            return InvalidKeyError, ""
        if isinstance(exc, (NotSupportedError, NotImplementedError)):
            return UnsupportedOperationError, ""
        if status is not None:
            return status_error_class(status), f"HTTP {status}"
        transport = _transport_failure(exc)
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        if transport is not None or isinstance(reason, (ConnectionError, TimeoutError)):
            return BackendUnavailableError, f"transport {transport}" if transport else ""
        return StorageError, ""

    def _translate(self, exc: BaseException) -> StorageError:
        key, backend = self.key, self.backend
        cls, reason = self._classify(exc)
        if cls is NotFoundError:
            return NotFoundError(f"not found: {key!r} on {backend}", key=key, backend=backend)
        detail = f" ({reason})" if reason else ""
        message = f"{_PHRASES[cls]}{detail}: {self.action} {key!r} on {backend}: {_first_line(exc)}"
        return cls(message, key=key, backend=backend)


def _fault_point(point: str) -> None:
    """Mark the obstore request ``point`` about to be made (storage_adapter.faults): an injected fault is
    raised as obstore raises the real one, so the driver's own handling and the translation see it."""
    kind = due(point)
    if kind is None:
        return
    status = {FaultKind.UNAVAILABLE: 503, FaultKind.DENIED: 403}.get(kind, 400)
    message = f"injected fault before {point}{_DEBUG_MARKER}Status {{\n    status: {status},\n}}"
    raise (ObstorePermissionDenied if kind is FaultKind.DENIED else GenericError)(message)


class _Body:
    """A GET's whole body as ``bytes``, assembled from its stream holding one copy of it (plus at most
    two chunks); fed chunk by chunk by the sync and the async GET alike.

    ``bytes(result.bytes())`` held two on S3: object_store gathers the body into one Rust buffer, then
    ``bytes`` copies it. obstore's stream hands over each chunk as a fresh Python ``bytes`` (a copy out of
    Rust; its zero-copy ``Bytes`` would need a second copy to become the promised ``bytes``), so:

    * a body that arrives as one chunk (every small object; an in-memory object is always one) is
      returned as it is;
    * a longer one is copied chunk by chunk into a ``bytes`` of the announced size held by a BytesIO,
      which writes in place while it is the only reference, and whose ``getvalue()`` returns that very
      object once it is exactly full (CPython since 3.5; elsewhere a copy, never a wrong result).
      ``truncate`` keeps a body shorter than announced exact.
    """

    __slots__ = ("_buffer", "_first", "_size")

    def __init__(self, result: Any) -> None:
        self._size = int(result.meta["size"])
        self._first: bytes | None = None
        self._buffer: io.BytesIO | None = None

    def add(self, chunk: bytes) -> None:
        if self._first is None:
            self._first = chunk
            return
        if self._buffer is None:
            self._buffer = io.BytesIO(bytes(self._size))
            self._buffer.write(self._first)
        self._buffer.write(chunk)

    def value(self) -> bytes:
        if self._buffer is None:
            return self._first or b""
        self._buffer.truncate()
        return self._buffer.getvalue()


# The end of a range that covers any object (S3 and object_store clamp a range's end to the size).
_PAST_ANY_END = 1 << 62


def _whole_body(result: Any) -> bytes:
    body = _Body(result)
    for chunk in result.stream(min_chunk_size=_READ_CHUNK):
        body.add(chunk)
    return body.value()


async def _whole_body_async(result: Any) -> bytes:
    if int(result.meta["size"]) <= _READ_CHUNK:
        # One await for the whole (small) body instead of one per chunk plus one for the end of the
        # stream: each await of obstore's is a round trip between its runtime and the event loop.
        return bytes(await result.bytes_async())
    body = _Body(result)
    async for chunk in result.stream(min_chunk_size=_READ_CHUNK):
        body.add(chunk)
    return body.value()


def _gathered(chunks: Iterator[BytesLike], limit: int | None) -> tuple[bytes, Iterator[BytesLike] | None]:
    """The first bytes of ``chunks``: all of them and None when they end within ``limit`` bytes (None:
    no limit), else the first chunks past the limit and the iterator of the rest."""
    parts, size = [], 0
    for chunk in chunks:
        parts.append(chunk)
        size += len(chunk)
        if limit is not None and size > limit:
            return b"".join(parts), chunks
    return b"".join(parts), None


def _owned(chunks: Iterable[BytesLike]) -> Iterator[bytes]:
    """Each chunk as ``bytes``: a bytearray or memoryview the caller reuses must not change a part obstore
    still holds (``bytes(b)`` of a ``bytes`` is the object itself, no copy)."""
    for chunk in chunks:
        yield bytes(chunk)


class _Pin:
    """The version a multi-part read is pinned to: its ETag and size."""

    __slots__ = ("size", "token")

    def __init__(self, meta: Any) -> None:
        self.token, self.size = str(meta["e_tag"]), int(meta["size"])


# A read that takes several requests is planned once, as a generator that yields each request it needs and gets back
# the answer (or has the request's exception thrown in), and made by the sync driver's runner or its
# async twin's: the version pinning and size rules exist once for both. A request is a ranged GET's
# options (answered with the body's buffer and the response's metadata) or None, a HEAD (answered with
# the object's metadata).
R = TypeVar("R")
_Plan = Generator[Any, Any, R]


def _made(plan: _Plan[R], make: Callable[[Any], Any]) -> R:
    """The result of ``plan``, each of its requests made by ``make`` (blocking)."""
    step, answer = plan.send, None
    while True:
        try:
            request = step(answer)
        except StopIteration as done:
            return cast("R", done.value)
        try:
            step, answer = plan.send, make(request)
        except Exception as exc:  # the plan's to handle (a refused range, a moved version) or re-raise
            step, answer = plan.throw, exc


async def _made_async(plan: _Plan[R], make: Callable[[Any], Awaitable[Any]]) -> R:
    """The result of ``plan``, each of its requests made by awaiting ``make``: :func:`_made`'s twin."""
    step, answer = plan.send, None
    while True:
        try:
            request = step(answer)
        except StopIteration as done:
            return cast("R", done.value)
        try:
            step, answer = plan.send, await make(request)
        except Exception as exc:
            step, answer = plan.throw, exc


class ObstoreBackend:
    """The driver of a backend served by one obstore store: thin and exception-translating.

    ``build_store(config)`` makes the store. ``confirm_prefixes`` makes ``list_dir`` confirm the child
    prefixes it reports: some S3 servers (SeaweedFS) keep a directory after its last object is deleted
    and report it as a common prefix, and a prefix is only a child if an object lives under it (see
    :meth:`list_dir` for what that costs).

    ``signed_delete_timeout_s`` (S3) enables the single-object delete fallback: object_store 0.13 deletes
    even one key with the multi-object ``POST ?delete``, which some S3-compatible servers refuse (a
    permanent 4xx or 501). Once refused, this driver deletes each key with one DeleteObject sent to a URL
    obstore presigns (so it needs credentials), with that timeout.
    """

    def __init__(
        self,
        config: AdapterConfig,
        build_store: Callable[[AdapterConfig], Any],
        *,
        confirm_prefixes: bool = False,
        signed_delete_timeout_s: float | None = None,
        name: str | None = None,
    ) -> None:
        self.name = name or config.backend
        self._prefix = config.prefix
        self._confirm_prefixes = confirm_prefixes
        self._signed_delete_timeout_s = signed_delete_timeout_s
        self._batch_delete_refused = False  # set once the server refused POST ?delete; never reset
        self._conditional_limit = config.spec.capabilities_for(config).streamed_conditional_limit
        try:
            self._store = build_store(config)
        except BaseException as exc:
            # obstore's errors and its panics (a BaseException) alike; ours and interrupts pass unchanged.
            if not isinstance(exc, BaseError) and not _is_panic(exc):
                raise
            raise StorageError(
                f"cannot open {config.url} ({self.name}): {_first_line(exc)}",
                key=config.url,
                backend=self.name,
            ) from exc

    def path(self, key: str) -> str:
        return join_key(self._prefix, key)

    def listed(self, prefix: str) -> str | None:
        """The store path a listing of ``prefix`` starts at (None: the whole store)."""
        return self.path(prefix) if prefix else self._prefix or None

    def relative(self, path: str) -> str:
        return path[len(self._prefix) + 1 :] if self._prefix else path

    @property
    def store(self) -> Any:
        return self._store

    @property
    def confirms_prefixes(self) -> bool:
        return self._confirm_prefixes

    @property
    def batch_delete_refused(self) -> bool:
        return self._batch_delete_refused

    def asynchronous(self) -> ObstoreAsyncDriver:
        """This driver's non-blocking twin over obstore's async calls (same store, same state)."""
        return ObstoreAsyncDriver(self)

    def translated(self, key: str, action: str) -> Translation:
        """A context manager translating obstore's (and the OS's) exceptions raised inside it."""
        return Translation(self.name, key, action)

    # -- reads ---------------------------------------------------------------------------------------
    def get(self, key: str) -> bytes:
        return self.get_versioned(key)[0]

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        """The bytes and the token of exactly those bytes (one GET: the token comes with the body)."""
        with self.translated(key, "read"):
            _fault_point("get")
            result = obstore.get(self._store, self.path(key))
            return _whole_body(result), str(result.meta["e_tag"])

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]:
        """One ranged GET per non-empty range (see :meth:`ranges_plan`)."""
        with self.translated(key, "read_range"):
            return _made(self.ranges_plan(key, ranges), partial(self.request, self.path(key)))

    def request(self, path: str, options: GetOptions | None) -> Any:
        """One request of a read plan, blocking: a HEAD's metadata, or a ranged GET's buffer and metadata."""
        if options is None:
            return obstore.head(self._store, path)
        result = obstore.get(self._store, path, options=options)
        return result.bytes(), result.meta

    def ranges_plan(self, key: str, ranges: Sequence[tuple[int, int]]) -> _Plan[builtins.list[bytes]]:
        """The requests of ``get_ranges``: the first ranged GET learns the version (ETag and size), every
        range is then checked against the size before the next request, and each later GET carries
        If-Match on that ETag (and its answer's ETag is compared too, for servers that ignore If-Match)."""
        parts: builtins.list[bytes] = []
        pin = None
        if not ranges:  # no bytes asked for, but of an object: a missing one is NotFoundError (a HEAD)
            _fault_point("head")
            yield None
        for start, end in ranges:
            data, pin = yield from self.range_plan(key, start, end, pin)
            if not parts:
                for other in ranges:
                    clip(*other, pin.size, key, self.name)
            parts.append(bytes(data))
        return parts

    def range_plan(self, key: str, start: int, end: int, pin: _Pin | None) -> _Plan[tuple[Any, _Pin]]:
        """The requests for the bytes ``[start, end)`` (a buffer) of the version ``pin`` (None: the
        current one), and that version. A range that needs no bytes costs a HEAD when no version is
        pinned yet; a range the server refuses is checked against the size (one HEAD), as servers answer
        a start at or past the end with an error (416) where the contract reads b"" or names the size."""
        options: dict[str, Any] = {} if pin is None else {"if_match": pin.token}
        refused: BaseError | None = None
        # obstore takes no bound past 2**64; no object reaches _PAST_ANY_END, so a start there has no bytes
        # (the HEAD below names the size) and an end there reads to the end of the object.
        if start < end and start < _PAST_ANY_END and (pin is None or start < pin.size):
            try:
                _fault_point("get")
                ranged = {**options, "range": (start, min(end, _PAST_ANY_END))}
                data, meta = yield cast("GetOptions", ranged)
                return data, self._same(key, _Pin(meta), pin)
            except (PreconditionError, FileNotFoundError) as exc:
                if pin is None and isinstance(exc, FileNotFoundError):
                    raise
                raise self._changed(key) from exc
            except BaseError as exc:
                if pin is not None:
                    raise
                refused = exc
        if pin is None:
            _fault_point("head")
            pin = _Pin((yield None))
        clip(start, end, pin.size, key, self.name)
        if refused is not None and start < pin.size:
            raise refused
        return b"", pin

    def _same(self, key: str, got: _Pin, pin: _Pin | None) -> _Pin:
        if pin is not None and got.token != pin.token:
            raise self._changed(key)
        return got

    def _changed(self, key: str) -> ObjectChangedError:
        return ObjectChangedError(
            f"changed while read: {key!r} on {self.name} was replaced or deleted since its first part was read",
            key=key,
            backend=self.name,
        )

    def open_source(self, key: str) -> _ObstoreSource:
        """One HEAD for the version (ETag and size); each read is then one ranged GET pinned to it."""
        with self.translated(key, "open_reader"):
            _fault_point("head")
            pin = _Pin(obstore.head(self._store, self.path(key)))
        return _ObstoreSource(self, key, pin)

    def get_buffer(self, key: str) -> memoryview:
        """obstore's own buffer of the body (``Bytes``, read-only), seen through a memoryview: no copy."""
        with self.translated(key, "read"):
            _fault_point("get")
            return memoryview(obstore.get(self._store, self.path(key)).bytes())

    def head_token(self, key: str) -> str:
        with self.translated(key, "head"):
            _fault_point("head")
            return str(obstore.head(self._store, self.path(key))["e_tag"])

    def list_pages(
        self, prefix: str, start_after: str | None = None
    ) -> Generator[builtins.list[ObjectInfo], None, None]:
        """obstore's listing stream in batches of LIST_PAGE: object_store asks S3 for pages of that size,
        so each batch is one ListObjectsV2 request, made when the batch is asked for. A short batch is
        the last (obstore fills every batch but the last), so no request follows it. ``start_after`` is
        object_store's offset (S3's StartAfter: the server resumes after that key in its own order)."""
        with self.translated(prefix, "list"):
            stream = iter(self.listing(prefix, start_after))
            while True:
                _fault_point("list")
                batch = next(stream, None)
                if batch is None or not batch.num_rows:
                    return
                yield self.infos(batch)
                if batch.num_rows < LIST_PAGE:
                    return

    def listing(self, prefix: str, start_after: str | None) -> Any:
        """obstore's lazy listing of ``prefix`` in Arrow batches of LIST_PAGE objects (see :meth:`infos`),
        from after ``start_after``: iterated by the sync driver, async-iterated by its twin. No request
        is made until the first batch is asked for."""
        return obstore.list(
            self._store,
            self.listed(prefix),
            offset=None if start_after is None else self.path(start_after),
            chunk_size=LIST_PAGE,
            return_arrow=True,
        )

    def list_dir(self, prefix: str) -> tuple[builtins.list[ObjectInfo], builtins.list[str]]:
        """One delimited list. With ``confirm_prefixes``, beside it (concurrently) the first page of the
        recursive listing: every prefix an object of that page lies under is confirmed by it, and when
        the page is the whole listing, every other reported prefix is empty; the prefixes left (beyond
        the first page) are confirmed by one single-object list each, REQUEST_WORKERS at a time."""
        base = self.listed(prefix)
        if not self._confirm_prefixes:
            result = self._delimited(prefix, base)
            reported = [p.rstrip("/") for p in result["common_prefixes"]]
        else:
            result, page = side_by_side(
                [partial(self._delimited, prefix, base), partial(self._first_page, prefix, base)]
            )
            common = [p.rstrip("/") for p in result["common_prefixes"]]
            reported = self._confirmed(prefix, base, common, page)
        return self.infos(result["objects"]), [self.relative(p) for p in reported]

    def _delimited(self, key: str, base: str | None) -> Any:
        with self.translated(key, "list_dir"):
            _fault_point("list_with_delimiter")
            return obstore.list_with_delimiter(self._store, base, return_arrow=True)

    def _first_page(self, key: str, base: str | None) -> Sequence[Any]:
        """The first LIST_PAGE objects of the recursive listing below ``base`` (one request on S3)."""
        with self.translated(key, "list_dir"):
            _fault_point("list")
            return next(iter(obstore.list(self._store, base, chunk_size=LIST_PAGE)), [])

    def _confirmed(
        self, key: str, base: str | None, reported: builtins.list[str], page: Sequence[Any]
    ) -> builtins.list[str]:
        """The ``reported`` child prefix paths of ``base`` that hold an object, given the first page of
        the recursive listing of ``base``."""
        start = len(base) + 1 if base else 0  # where a child's name begins in a path below base
        held: set[str] = set()
        for meta in page:
            end = meta["path"].find("/", start)
            if end >= 0:
                held.add(meta["path"][:end])
        if len(page) < LIST_PAGE:  # the whole listing: nothing it does not show holds an object
            return [p for p in reported if p in held]
        rest = [p for p in reported if p not in held]
        confirmed = dict(
            zip(rest, side_by_side([partial(self._has_objects, key, p) for p in rest]), strict=True)
        )
        return [p for p in reported if p in held or confirmed[p]]

    def _has_objects(self, key: str, path: str) -> bool:
        with self.translated(key, "list_dir"):
            _fault_point("list")
            return next(iter(obstore.list(self._store, path, chunk_size=1)), None) is not None

    def infos(self, listed: Any) -> builtins.list[ObjectInfo]:
        """The ObjectInfos of one of obstore's Arrow listings (a RecordBatch or a Table), built column by
        column (a listing's hot loop).

        The Arrow form is the lean one: obstore builds no dict and no datetime per object (which costs it
        about 1 µs each), and turning each column into Python values here costs no Python call per object.
        """
        count = listed.num_rows
        paths = listed.column("path").to_pylist()
        keys: Iterable[str] = paths
        if self._prefix:  # the root's prefix and its "/" cut off every path
            keys = map(operator.getitem, paths, itertools.repeat(slice(len(self._prefix) + 1, None)))
        # obstore lists times as UTC microseconds. Dividing by 1e6 leaves the float within 0.12 µs of the
        # exact instant (half an ulp at today's epoch seconds), and fromtimestamp rounds to the nearest
        # microsecond, so every time is exact; one C call per object instead of Arrow's datetime path.
        micros = listed.column("last_modified").cast(DataType.int64()).to_pylist()
        times = map(datetime.fromtimestamp, map(operator.truediv, micros, itertools.repeat(1e6)),
                    itertools.repeat(UTC))  # fmt: skip
        sizes = listed.column("size").to_pylist()
        tokens = listed.column("e_tag").to_pylist()
        return object_infos(count, keys, sizes, tokens, times)

    # -- mutations (memory and S3; local mutations go through LocalMutator) -------------------------------
    def put(self, key: str, data: bytes) -> str:
        with self.translated(key, "write"):
            _fault_point("put")
            return str(obstore.put(self._store, self.path(key), data)["e_tag"])

    def put_stream(self, key: str, chunks: Iterator[BytesLike]) -> str:
        """One PUT when the body ends within a part, else a multipart upload (object_store completes it
        only once the body ended, so the object appears whole; a body that raises is never completed)."""
        head, rest = _gathered(chunks, _PART)
        if rest is None:
            return self.put(key, head)
        with self.translated(key, "write"):
            _fault_point("put")
            body = _owned(itertools.chain([head], rest))
            return str(obstore.put(self._store, self.path(key), body, chunk_size=_PART)["e_tag"])

    def _one_request(self, key: str, chunks: Iterator[BytesLike], method: str) -> bytes:
        """A conditional streamed body, buffered for its one conditional PUT; UnsupportedOperationError,
        having written nothing, past ``capabilities.streamed_conditional_limit``."""
        body, rest = _gathered(chunks, self._conditional_limit)
        if rest is not None:
            raise UnsupportedOperationError(
                f"{method} of {key!r} on {self.name}: a streamed body over {self._conditional_limit} bytes "
                "cannot be written conditionally here (capabilities.streamed_conditional_limit)",
                key=key,
                backend=self.name,
            )
        return body

    def put_stream_if_absent(self, key: str, chunks: Iterator[BytesLike]) -> str | None:
        return self.put_if_absent(key, self._one_request(key, chunks, "write_if_absent"))

    def put_stream_if_match(self, key: str, chunks: Iterator[BytesLike], token: str) -> str | None:
        return self.put_if_match(key, self._one_request(key, chunks, "write_if_match"), token)

    def put_if_absent(self, key: str, data: bytes) -> str | None:
        """Native create: the new token, or None when the object already exists."""
        with self.translated(key, "write_if_absent"):
            try:
                _fault_point("put")
                return str(obstore.put(self._store, self.path(key), data, mode="create")["e_tag"])
            except AlreadyExistsError:
                return None
            except PreconditionError:
                # S3 answers a lost If-None-Match race with 412; object_store maps that to Precondition.
                return None

    def if_match_token(self, token: str) -> str:
        """The ETag to send in If-Match for ``token`` (a compatibility mode may rewrite it)."""
        return token

    def put_if_match(self, key: str, data: bytes, token: str) -> str | None:
        """Native update: the new token, or None when the object changed or is absent."""
        with self.translated(key, "write_if_match"):
            try:
                mode: Any = {"e_tag": self.if_match_token(token)}
                _fault_point("put")
                return str(obstore.put(self._store, self.path(key), data, mode=mode)["e_tag"])
            except (PreconditionError, FileNotFoundError):
                return None

    def delete(self, key: str) -> None:
        # Deletes are idempotent: a missing object (local raises, S3 and memory do not) is success.
        with self.translated(key, "delete"), suppress(FileNotFoundError):
            self._delete_path(self.path(key))

    def delete_many(self, keys: Sequence[str]) -> None:
        """One multi-object delete per DELETE_BATCH keys (S3 DeleteObjects; a missing key is no error).
        A batch that fails is not confirmed for any of its keys (S3 may have deleted some): every batch
        is attempted, then BatchDeleteError names the keys of the failed ones. Once the server refused
        the multi-object delete, single signed deletes instead, DELETE_WORKERS at a time."""
        failures: dict[str, StorageError] = {}
        for batch in chunked(keys, DELETE_BATCH):
            try:
                with self.translated(batch[0], f"delete (with {len(batch) - 1} more keys)"):
                    if self._multi_delete([self.path(key) for key in batch]):
                        continue
                delete_each(self.delete, batch, self.name)
            except BatchDeleteError as exc:
                failures.update(exc.errors)
            except StorageError as exc:
                failures.update(dict.fromkeys(batch, exc))
        if failures:
            raise BatchDeleteError.of(failures, self.name)

    def _multi_delete(self, paths: str | builtins.list[str]) -> bool:
        """One multi-object delete (object_store 0.13 sends POST ?delete even for one path). False,
        having deleted nothing, when the server refuses that request and the signed fallback is on; from
        then on it is never sent again."""
        if self._batch_delete_refused:
            return False
        try:
            _fault_point("delete")
            obstore.delete(self._store, paths)
            return True
        except GenericError as exc:
            if not self.falls_back_from(exc):
                raise
            return False

    def falls_back_from(self, exc: GenericError) -> bool:
        """Whether the failed multi-object delete ``exc`` is the server's refusal of that request and
        the signed fallback is on; if so it is never sent again. Otherwise (no fallback here, or not a
        refusal of the call itself: missing bucket, denied, ...) the error stands."""
        status = http_status(exc)
        refused = status is not None and status_error_class(status) in _REFUSALS
        if self._signed_delete_timeout_s is None or not refused:
            return False
        self._batch_delete_refused = True
        recovering("delete")
        return True

    def _delete_path(self, path: str) -> None:
        if self._multi_delete(path):
            return
        # Presigned for immediate use.
        _fault_point("sign")
        self.signed_delete(obstore.sign(self._store, "DELETE", path, timedelta(minutes=5)))

    def signed_delete(self, url: str) -> None:
        """One DeleteObject to the presigned ``url``: it answers 204, and urllib raises HTTPError
        otherwise."""
        _fault_point("signed_delete")
        urllib.request.urlopen(
            urllib.request.Request(url, method="DELETE"), timeout=self._signed_delete_timeout_s
        ).close()

    def rename(self, src: str, dst: str) -> None:
        """A copy then a delete (as object_store's own rename), the delete through :meth:`_delete_path`."""
        with self.translated(src, f"rename to {dst!r}"):
            _fault_point("copy")
            obstore.copy(self._store, self.path(src), self.path(dst))
            self._delete_path(self.path(src))

    def remove_orphans(self, min_age_s: float) -> int:
        """Crash leftovers to reclaim: none here (S3 multipart leftovers belong to bucket lifecycle rules)."""
        return 0


class ObstoreAsyncDriver(ThreadedAsyncDriver):
    """The :class:`~storage_adapter.registry.AsyncDriver` of an :class:`ObstoreBackend`: the same requests
    over obstore's async calls, on the caller's event loop, through the same translation (panics
    included) and fault points; the ranged reads follow the sync driver's own read plans. It shares its
    sync driver's store, paths and state (a refused multi-object delete is refused for both). In worker
    threads (inherited from ThreadedAsyncDriver): the presigned single delete (plain ``urllib``), the
    confirmed ``list_dir`` and the streamed writes, whose body is an iterator that may block and whose
    multipart uploads are the sync driver's."""

    def __init__(self, sync: ObstoreBackend) -> None:
        super().__init__(sync)
        self._sync = sync
        self._store = sync.store

    def _translated(self, key: str, action: str) -> Translation:
        return self._sync.translated(key, action)

    # -- reads ---------------------------------------------------------------------------------------
    async def get(self, key: str) -> bytes:
        """The whole object in ONE await (see :meth:`_whole`), copied into ``bytes``.

        The price: obstore gathers the body into one buffer that is then copied into the ``bytes``, so a
        large body is held twice for a moment (``get_versioned`` streams it into one copy); a large
        object is better read with ``read_buffer`` (no copy) or a reader."""
        return bytes(await self._whole(key))

    async def get_buffer(self, key: str) -> memoryview:
        """obstore's own buffer of the whole object (see :meth:`_whole`), seen through a memoryview."""
        return memoryview(await self._whole(key))

    async def _whole(self, key: str) -> Any:
        """obstore's buffer of the whole object in ONE await: a GET of the range from 0 past any end
        (which every store clamps to the object), where a plain GET takes two (the response, then its
        body), and each await is a round trip between obstore's runtime and the event loop that costs
        the loop more than a small GET does. The one object such a range cannot name is an empty one (a
        range must start before the end): the store refuses it, and the plain GET answers instead."""
        path = self._sync.path(key)
        with self._translated(key, "read"):
            _fault_point("get")
            try:
                return await obstore.get_range_async(self._store, path, start=0, end=_PAST_ANY_END)
            except GenericError:
                # The refused range of an empty object (416 on S3), or a failure obstore gives no class
                # (its retries spent): the plain GET reads the object or raises its own error. Every
                # classified error (missing, denied, ...) has already been raised, translated.
                pass
            _fault_point("get")
            return await (await obstore.get_async(self._store, path)).bytes_async()

    async def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]:
        """The sync driver's plan (:meth:`ObstoreBackend.ranges_plan`), its requests awaited."""
        with self._translated(key, "read_range"):
            return await _made_async(
                self._sync.ranges_plan(key, ranges), partial(self.request, self._sync.path(key))
            )

    async def request(self, path: str, options: GetOptions | None) -> Any:
        """:meth:`ObstoreBackend.request`'s twin: a HEAD's metadata, or a ranged GET's buffer and metadata."""
        if options is None:
            return await obstore.head_async(self._store, path)
        result = await obstore.get_async(self._store, path, options=options)
        return await result.bytes_async(), result.meta

    async def open_source(self, key: str) -> _ObstoreAsyncSource:
        """One HEAD for the version (ETag and size); each read is then one ranged GET pinned to it."""
        with self._translated(key, "open_reader"):
            _fault_point("head")
            pin = _Pin(await obstore.head_async(self._store, self._sync.path(key)))
        return _ObstoreAsyncSource(self, _ObstoreSource(self._sync, key, pin))

    async def get_versioned(self, key: str) -> tuple[bytes, str]:
        with self._translated(key, "read"):
            _fault_point("get")
            result = await obstore.get_async(self._store, self._sync.path(key))
            return await _whole_body_async(result), str(result.meta["e_tag"])

    async def head_token(self, key: str) -> str:
        with self._translated(key, "head"):
            _fault_point("head")
            return str((await obstore.head_async(self._store, self._sync.path(key)))["e_tag"])

    async def list_pages(
        self, prefix: str, start_after: str | None = None
    ) -> AsyncGenerator[builtins.list[ObjectInfo], None]:
        """As :meth:`ObstoreBackend.list_pages`: one request per page, made when it is asked for."""
        with self._translated(prefix, "list"):
            stream = self._sync.listing(prefix, start_after)
            while True:
                _fault_point("list")
                batch = await anext(stream, None)
                if batch is None or not batch.num_rows:
                    return
                yield self._sync.infos(batch)
                if batch.num_rows < LIST_PAGE:
                    return

    async def list_dir(self, prefix: str) -> tuple[builtins.list[ObjectInfo], builtins.list[str]]:
        """As :meth:`ObstoreBackend.list_dir`: one delimited list; where the server needs its prefixes
        confirmed, the sync driver's confirmation (the same requests) in a worker thread."""
        if self._sync.confirms_prefixes:
            return await in_thread(self._sync.list_dir, prefix)
        with self._translated(prefix, "list_dir"):
            _fault_point("list_with_delimiter")
            result = await obstore.list_with_delimiter_async(
                self._store, self._sync.listed(prefix), return_arrow=True
            )
        prefixes = [self._sync.relative(p.rstrip("/")) for p in result["common_prefixes"]]
        return self._sync.infos(result["objects"]), prefixes

    # -- mutations -----------------------------------------------------------------------------------
    async def put(self, key: str, data: bytes) -> str:
        with self._translated(key, "write"):
            _fault_point("put")
            return str((await obstore.put_async(self._store, self._sync.path(key), data))["e_tag"])

    async def put_if_absent(self, key: str, data: bytes) -> str | None:
        with self._translated(key, "write_if_absent"):
            try:
                _fault_point("put")
                put = await obstore.put_async(self._store, self._sync.path(key), data, mode="create")
                return str(put["e_tag"])
            except (AlreadyExistsError, PreconditionError):  # as the sync driver: a lost create
                return None

    async def put_if_match(self, key: str, data: bytes, token: str) -> str | None:
        with self._translated(key, "write_if_match"):
            try:
                mode: Any = {"e_tag": self._sync.if_match_token(token)}
                _fault_point("put")
                put = await obstore.put_async(self._store, self._sync.path(key), data, mode=mode)
                return str(put["e_tag"])
            except (FileNotFoundError, PreconditionError):  # as the sync driver: the object moved
                return None

    async def delete(self, key: str) -> None:
        with self._translated(key, "delete"), suppress(FileNotFoundError):
            await self._delete_path(self._sync.path(key))

    async def delete_many(self, keys: Sequence[str]) -> None:
        """As :meth:`ObstoreBackend.delete_many`: one multi-object delete per batch, single signed deletes
        (DELETE_WORKERS at a time) once the server refused it; BatchDeleteError names the failures."""
        failures: dict[str, StorageError] = {}
        for batch in chunked(keys, DELETE_BATCH):
            try:
                with self._translated(batch[0], f"delete (with {len(batch) - 1} more keys)"):
                    if await self._multi_delete([self._sync.path(key) for key in batch]):
                        continue
            except StorageError as exc:
                failures.update(dict.fromkeys(batch, exc))
                continue
            failures.update(await self._delete_each(batch))
        if failures:
            raise BatchDeleteError.of(failures, self._sync.name)

    async def _delete_each(self, keys: builtins.list[str]) -> dict[str, StorageError]:
        """``delete`` of every key, DELETE_WORKERS at a time; the keys that failed, with their errors."""
        slots = asyncio.Semaphore(DELETE_WORKERS)

        async def delete(key: str) -> StorageError | None:
            async with slots:
                try:
                    await self.delete(key)
                except StorageError as exc:
                    return exc
                return None

        outcomes = await asyncio.gather(*(delete(key) for key in keys))
        return {key: exc for key, exc in zip(keys, outcomes, strict=True) if exc is not None}

    async def _multi_delete(self, paths: str | builtins.list[str]) -> bool:
        if self._sync.batch_delete_refused:
            return False
        try:
            _fault_point("delete")
            await obstore.delete_async(self._store, paths)
            return True
        except GenericError as exc:
            if not self._sync.falls_back_from(exc):
                raise
            return False

    async def _delete_path(self, path: str) -> None:
        if await self._multi_delete(path):
            return
        _fault_point("sign")
        url = await obstore.sign_async(self._store, "DELETE", path, timedelta(minutes=5))
        await in_thread(self._sync.signed_delete, url)

    async def rename(self, src: str, dst: str) -> None:
        with self._translated(src, f"rename to {dst!r}"):
            _fault_point("copy")
            await obstore.copy_async(self._store, self._sync.path(src), self._sync.path(dst))
            await self._delete_path(self._sync.path(src))

    async def remove_orphans(self, min_age_s: float) -> int:
        return self._sync.remove_orphans(min_age_s)


class _ObstoreSource:
    """A reader's source on memory and S3: ranged GETs pinned to one version (If-Match on its ETag, and
    the answer's ETag compared): ObjectChangedError once that version is replaced or deleted."""

    def __init__(self, driver: ObstoreBackend, key: str, pin: _Pin) -> None:
        self.driver, self.key, self._pin = driver, key, pin
        self.size, self.token = pin.size, pin.token

    def plan(self, offset: int, length: int) -> _Plan[tuple[Any, _Pin]]:
        """The requests of one read: ``length`` bytes from ``offset``, of the opened version only."""
        return self.driver.range_plan(self.key, offset, offset + length, self._pin)

    def read_into(self, offset: int, buffer: memoryview) -> int:
        driver = self.driver
        with driver.translated(self.key, "read"):
            data, _ = _made(self.plan(offset, len(buffer)), partial(driver.request, driver.path(self.key)))
        return _filled(buffer, data)

    def close(self) -> None:
        """Nothing held open: each read is its own request."""


class _ObstoreAsyncSource:
    """A :class:`_ObstoreSource` for the async reader: the same reads, their requests awaited."""

    def __init__(self, twin: ObstoreAsyncDriver, source: _ObstoreSource) -> None:
        self._twin, self._source = twin, source
        self.size, self.token = source.size, source.token

    async def read_into(self, offset: int, buffer: memoryview) -> int:
        source = self._source
        with source.driver.translated(source.key, "read"):
            plan = source.plan(offset, len(buffer))
            data, _ = await _made_async(plan, partial(self._twin.request, source.driver.path(source.key)))
        return _filled(buffer, data)

    async def close(self) -> None:
        """Nothing held open: each read is its own request."""


def _filled(buffer: memoryview, data: Any) -> int:
    """``buffer`` filled from its start with ``data`` (a read's bytes, never longer): how many."""
    view = memoryview(data)
    buffer[: len(view)] = view
    return len(view)
