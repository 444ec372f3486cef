"""The error hierarchy of storage-adapter.

Every failure the adapter reports is a :class:`StorageError`. Backend exceptions (obstore's, the OS's)
never leak: they are translated at the boundary and chained with ``raise ... from exc`` so the original
stays available as ``__cause__``. Every message names the key (or URL) and the backend, and never a
credential.
"""

from __future__ import annotations


class StorageError(Exception):
    """Root of every error raised by storage-adapter.

    ``key`` is the object key (relative to the adapter's root) or URL the failure concerns, when there is
    one; ``backend`` is the backend's display name (``local``, ``s3``, ``memory``).
    """

    def __init__(self, message: str, *, key: str | None = None, backend: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.backend = backend


class NotFoundError(StorageError, FileNotFoundError):
    """The object does not exist. Also a :class:`FileNotFoundError`."""


class InvalidKeyError(StorageError, ValueError):
    """The key (or prefix) is not a safe, portable object key. Raised before any I/O. Also a ValueError."""


class InvalidRangeError(StorageError, ValueError):
    """A byte range is not ``0 <= start <= end`` (ints), or starts past the object's end. Raised before
    any I/O when the range alone is wrong; ``size`` is the object's size when it was the reason, else
    None. Also a ValueError."""

    def __init__(
        self, message: str, *, key: str | None = None, backend: str | None = None, size: int | None = None
    ) -> None:
        super().__init__(message, key=key, backend=backend)
        self.size = size


class InvalidBodyError(StorageError, TypeError):
    """A write's body is neither bytes/str, a binary file object nor an iterable of bytes-like chunks,
    or the stream is closed or yields something that is not bytes-like. Nothing is written. Also a
    TypeError."""


class ObjectChangedError(StorageError):
    """The object was replaced or deleted while it was being read in parts (``read_ranges``, a reader):
    the parts would have mixed versions, so none is returned. Reading again sees the new version."""


class ConfigurationError(StorageError, ValueError):
    """The URL or an option is not supported, or a required setting is missing."""


class PermissionDeniedError(StorageError, PermissionError):
    """The backend refused the request: bad or missing credentials, or no permission on the object."""


class BackendUnavailableError(StorageError):
    """Transient: the backend could not be reached or kept failing after retries (connection refused,
    timeouts, 5xx). Safe to retry; the outcome of a mutation that raised this is unknown."""


class UnsupportedOperationError(StorageError, NotImplementedError):
    """The backend cannot honour this operation's guarantee (see ``adapter.capabilities``). Raised instead
    of silently degrading to a weaker operation."""


class InvalidArgumentError(StorageError, ValueError, TypeError):
    """An argument other than a key is outside its domain or of the wrong type (a listing's ``limit``
    that is not an int >= 0, ``delete_many`` given one str). Raised before any I/O, naming the backend.
    Also a ValueError and a TypeError, the two Python raises for such arguments."""


class InvalidTokenError(InvalidArgumentError):
    """A ``write_if_match`` token that no read or write returned: not a non-empty str of an ETag's
    visible ASCII characters, or HTTP's wildcard ``*`` (which would match any version). Raised before any
    I/O, naming the key and backend."""


class BatchDeleteError(StorageError):
    """``delete_many`` could not confirm that some keys were deleted. ``errors`` maps each such key to
    its error; every key of the call that is not in it is deleted. ``key`` is the first failed key."""

    def __init__(self, message: str, errors: dict[str, StorageError], *, backend: str | None = None) -> None:
        super().__init__(message, key=next(iter(errors), None), backend=backend)
        self.errors = errors

    def __reduce__(self) -> tuple[object, ...]:
        # Errors cross processes (a worker's failure re-raised by its pool): rebuilt from the message and
        # ``errors``, which Exception's own pickling (the message alone) would not pass back.
        return (type(self), (self.args[0], self.errors), self.__dict__)

    @classmethod
    def of(cls, errors: dict[str, StorageError], backend: str) -> BatchDeleteError:
        """The error naming ``errors``' keys (the first ten in the message, all in ``errors``)."""
        shown = ", ".join(repr(key) for key in list(errors)[:10])
        more = f" and {len(errors) - 10} more" if len(errors) > 10 else ""
        first = next(iter(errors.values()))
        # As retryable (or as denied) as the failures it gathers, when they all agree.
        kind = next((k for s, k in _SPECIFIC.items() if all(isinstance(e, s) for e in errors.values())), cls)
        return kind(
            f"delete_many: {len(errors)} key(s) not deleted on {backend}: {shown}{more} (first error: {first})",
            errors,
            backend=backend,
        )


class BatchDeleteUnavailableError(BatchDeleteError, BackendUnavailableError):
    """Every key ``delete_many`` could not confirm failed transiently: retrying them may succeed."""


class BatchDeleteDeniedError(BatchDeleteError, PermissionDeniedError):
    """The backend refused the deletion of every key ``delete_many`` could not confirm."""


_SPECIFIC: dict[type[StorageError], type[BatchDeleteError]] = {
    BackendUnavailableError: BatchDeleteUnavailableError,
    PermissionDeniedError: BatchDeleteDeniedError,
}
