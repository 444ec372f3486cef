"""IdempotencyStore: one record per (realm, Idempotency-Key) in object storage, through the adapter only.

Concurrency rules (the reasons are in docs/idempotency.md):

* ``reserve`` creates the record with ``write_if_absent``: exactly one of any number of concurrent
  reservers owns a key, and it learns the record's token from that one request.
* Every later state change is a ``write_if_match`` (CAS) on a version the caller has just seen carrying
  its own ``reservation_id`` (fencing): a former owner whose lease was taken over can never heartbeat,
  finalize or cancel over its successor. Takeover of a stale lease is itself a CAS that mints a new
  reservation id.
* Nothing overwrites or deletes a record another party may own. ``purge_expired`` first turns an expired
  record into a tombstone by CAS, and only the purger whose CAS won deletes it. It reads only the records
  its own expiry index (storage_adapter.idempotency.expiry_index) does not show to be not yet due.
* An outcome's attachment is written as its own object before the finalize CAS that names it, under a
  name of its reservation and content, so a record naming one always finds it whole. It is deleted only
  when no record can ever name it: by finalize when the CAS did not land (LostOwnership, NotFound,
  Cancelled, or another outcome already stored), by purge after deleting its record, or as an orphan
  once its slot's record is seen gone (docs/idempotency.md: "Attachments").

Every storage request runs under a per-call deadline; a slow or unavailable backend raises
:class:`StoreUnavailableError` instead of hanging the caller.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, TypeVar

from storage_adapter.batch import DELETE_BATCH
from storage_adapter.errors import NotFoundError, StorageError
from storage_adapter.idempotency.deadline import call_with_deadline
from storage_adapter.idempotency.errors import (
    AttachmentTooLargeError,
    CorruptRecordError,
    StoreUnavailableError,
    SummaryTooLargeError,
)
from storage_adapter.idempotency.expiry_index import Entry, Layout, Listing, joined
from storage_adapter.idempotency.iso8601 import iso8601_duration
from storage_adapter.idempotency.keyformat import UUID_KEYS, KeyFormat
from storage_adapter.idempotency.records import (
    ATTACHMENT_SIZE_BOUND,
    Attachment,
    IdempotencyRecord,
    RecordStatus,
    canonical_json,
    decode_record,
    encode_record,
)
from storage_adapter.protocol import StorageAdapter

T = TypeVar("T")

# A transition re-reads and retries only when its own cached token went stale (the record still carries
# our reservation id); more than this many misses in a row means something else keeps rewriting it.
MAX_CAS_ATTEMPTS = 5


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Stored:
    """A decoded record with the version token of exactly the bytes it was decoded from."""

    record: IdempotencyRecord
    token: str


@dataclass(frozen=True)
class Owned:
    """The caller owns the reservation ``record.reservation_id``. ``token`` is the version of ``record`` as
    the caller last wrote it (from the reserve's ``write_if_absent`` or the latest CAS), so the next
    transition is a single CAS. ``previous`` is the cancelled or stale record this reservation replaced,
    if any: its attempt may have had an effect, so the owner must reconcile before running again."""

    record: IdempotencyRecord
    token: str
    previous: IdempotencyRecord | None = None


@dataclass(frozen=True)
class Duplicate:
    """Another reservation holds the key (in progress, finalized, or being purged)."""

    record: IdempotencyRecord
    token: str


@dataclass(frozen=True)
class Updated:
    """Heartbeat stored; keep using ``owned`` (it carries the new token and lease)."""

    owned: Owned


@dataclass(frozen=True)
class Finalized:
    """The record is finalized under the caller's reservation (by this call or an earlier one)."""

    record: IdempotencyRecord


@dataclass(frozen=True)
class Cancelled:
    """The record is cancelled under the caller's reservation; the key may be reserved again."""

    record: IdempotencyRecord


@dataclass(frozen=True)
class NotFound:
    """The record no longer exists (purged)."""


@dataclass(frozen=True)
class LostOwnership:
    """Another reservation (a successor after takeover, or a purger) holds the record: nothing was written."""

    record: IdempotencyRecord


Transition = Updated | Finalized | Cancelled | NotFound | LostOwnership


class IdempotencyStore:
    """Idempotency records under ``prefix`` of ``adapter``.

    ``lifetime``: how long a record is kept (and replayed) after creation; advertise it with
    ``lifetime_iso8601``. ``lease``: how long an owner holds an in-progress record without a heartbeat.
    ``skew_grace``: clock skew tolerated between parties; a lease is stale only when it expired more than
    this long ago by the reader's clock. ``call_timeout``: per-request deadline (None: none).
    ``tombstone_grace``: how long a purger's tombstone is left alone before another purge adopts it.
    ``max_summary_bytes``: the most an outcome's summary and headers may take in the record.
    ``max_attachment_bytes``: the largest outcome attachment ``finalize`` writes and ``attachment`` reads
    (64 MiB by default, at most ATTACHMENT_SIZE_BOUND, 4 GiB); it does not count against the summary's.
    """

    def __init__(
        self,
        adapter: StorageAdapter,
        *,
        lifetime: timedelta = timedelta(hours=24),
        lease: timedelta = timedelta(seconds=30),
        clock: Callable[[], datetime] = utc_now,
        key_format: KeyFormat = UUID_KEYS,
        skew_grace: timedelta = timedelta(seconds=5),
        call_timeout: timedelta | None = timedelta(seconds=5),
        max_summary_bytes: int = 16 * 1024,
        tombstone_grace: timedelta = timedelta(minutes=10),
        executor_id: str | None = None,
        prefix: str = "idempotency",
        max_attachment_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        if lease <= timedelta(0) or lifetime <= lease:
            raise ValueError(f"need 0 < lease < lifetime, got lease={lease}, lifetime={lifetime}")
        if type(max_attachment_bytes) is not int or not 0 <= max_attachment_bytes <= ATTACHMENT_SIZE_BOUND:
            raise ValueError(
                f"max_attachment_bytes must be an int in 0..{ATTACHMENT_SIZE_BOUND}, got {max_attachment_bytes!r}"
            )
        self.adapter = adapter
        self.lifetime = lifetime
        self.lease = lease
        self.clock = clock
        self.key_format = key_format
        self.skew_grace = skew_grace
        self.call_timeout = None if call_timeout is None else call_timeout.total_seconds()
        self.max_summary_bytes = max_summary_bytes
        self.max_attachment_bytes = max_attachment_bytes
        self.tombstone_grace = tombstone_grace
        self.executor_id = executor_id or f"{socket.gethostname()}:{os.getpid()}"
        self.prefix = prefix
        self.layout = Layout(prefix)

    @property
    def lifetime_iso8601(self) -> str:
        """The record lifetime as an ISO-8601 duration, e.g. ``PT24H`` -> ``P1D``."""
        return iso8601_duration(self.lifetime)

    # -- locations and requests -----------------------------------------------------------------------
    def location(self, realm: str, key: str) -> str:
        """Object key of the record for (realm, key). Both are hashed: any realm or key format is a safe
        object key, and the realm is part of the location so realms never share a record."""
        return self.layout.record(realm, key)

    def _request(self, what: str, call: Callable[[], T]) -> T:
        return call_with_deadline(call, self.call_timeout, what)

    def _read(self, location: str) -> Stored | None:
        try:
            versioned = self._request(f"read {location}", lambda: self.adapter.read_versioned(location))
        except NotFoundError:
            return None
        return Stored(decode_record(versioned.data, location), versioned.token)

    def _read_for(self, realm: str, key: str) -> Stored | None:
        """Read the record of (realm, key), refusing one that names another realm or key (misplaced)."""
        location = self.location(realm, key)
        stored = self._read(location)
        if stored is not None and (stored.record.realm, stored.record.key) != (realm, key):
            raise CorruptRecordError(
                f"corrupt idempotency record {location!r}: it names realm {stored.record.realm!r} key "
                f"{stored.record.key!r}, expected {realm!r} {key!r} (left in place)",
                key=location,
            )
        return stored

    def _cas(self, location: str, record: IdempotencyRecord, token: str) -> str | None:
        body = encode_record(record)
        return self._request(
            f"write_if_match {location}", lambda: self.adapter.write_if_match(location, body, token)
        )

    # -- time -----------------------------------------------------------------------------------------
    def is_lease_stale(self, record: IdempotencyRecord) -> bool:
        """True when an in-progress record's lease expired more than ``skew_grace`` ago by our clock."""
        return (
            record.status is RecordStatus.IN_PROGRESS
            and self.clock() > record.lease_expires_at + self.skew_grace
        )

    # -- reservation ----------------------------------------------------------------------------------
    def reserve(
        self, realm: str, key: str, *, operation: str, resource: str, fingerprint: str
    ) -> Owned | Duplicate:
        """Reserve (realm, key) for one request. Exactly one concurrent caller gets Owned.

        A cancelled record with the same binding (operation, resource, fingerprint) is taken over by CAS
        (``Owned.previous`` is set); every other existing record comes back as Duplicate. A create that
        misses its deadline (or fails as unavailable) is settled by a read where the record exists: Duplicate,
        or Owned when the record is this call's own (the create landed, its answer was late). Raises
        InvalidIdempotencyKeyError, CorruptRecordError (record left in place), StoreUnavailableError; and,
        before any request, TypeError/ValueError when ``realm``, ``operation``, ``resource`` or
        ``fingerprint`` is not a str the record can hold.
        """
        key = self.key_format.validate(key)
        if not isinstance(realm, str) or not realm:
            raise ValueError(f"realm must be a non-empty str, got {realm!r}")
        location = self.location(realm, key)
        now = self.clock()
        fresh = IdempotencyRecord(
            realm=realm,
            key=key,
            operation=operation,
            resource=resource,
            fingerprint=fingerprint,
            status=RecordStatus.IN_PROGRESS,
            reservation_id=_new_id(),
            executor_id=self.executor_id,
            revision=0,
            created_at=now,
            heartbeat_at=now,
            lease_expires_at=now + self.lease,
            expires_at=now + self.lifetime,
        )
        body = encode_record(fresh)
        for _ in range(MAX_CAS_ATTEMPTS):
            late: StoreUnavailableError | None = None
            try:
                created = self._request(
                    f"write_if_absent {location}", lambda: self.adapter.write_if_absent(location, body)
                )
            except StoreUnavailableError as exc:
                # The create did not answer in time (or failed as unavailable): where the record exists, a
                # read settles it. SeaweedFS serializes concurrent creates of one key about a second apart,
                # so the losers of a race of tens wait many seconds for the refusal a read gives at once.
                created, late = None, exc
            if created is not None:
                return Owned(fresh, created)
            stored = self._read_for(realm, key)
            if stored is None:
                if late is not None:
                    raise late  # absent: ours may still land (a late reservation, whose lease goes stale)
                continue  # purged between the two requests: try to create it again
            if stored.record.reservation_id == fresh.reservation_id:
                return Owned(stored.record, stored.token)  # our create landed; its answer was late
            existing = stored.record
            if existing.status is not RecordStatus.CANCELLED or existing.binding != fresh.binding:
                return Duplicate(existing, stored.token)
            successor = self._successor_of(existing)
            token = self._cas(location, successor, stored.token)
            if token is not None:
                return Owned(successor, token, previous=existing)
        raise StorageError(f"could not reserve {location!r}: the record kept changing", key=location)

    def takeover(self, stale: Duplicate) -> Owned | None:
        """Take over an in-progress record whose lease is stale, by CAS from exactly ``stale``'s version.

        Returns Owned (with ``previous`` = the stale record) or None when the record changed meanwhile
        (its owner heartbeated or finalized, or another party took over first). Raises ValueError when the
        lease is not stale by this store's clock.
        """
        if not self.is_lease_stale(stale.record):
            raise ValueError(f"lease of {stale.record.key!r} in realm {stale.record.realm!r} is not stale")
        successor = self._successor_of(stale.record)
        location = self.location(stale.record.realm, stale.record.key)
        token = self._cas(location, successor, stale.token)
        return None if token is None else Owned(successor, token, previous=stale.record)

    def _successor_of(self, record: IdempotencyRecord) -> IdempotencyRecord:
        now = self.clock()
        return record.next(
            status=RecordStatus.IN_PROGRESS,
            reservation_id=_new_id(),
            executor_id=self.executor_id,
            heartbeat_at=now,
            lease_expires_at=now + self.lease,
            finalized_at=None,
            http_status=None,
            error_subtype=None,
            summary=None,
            headers=(),
            attachment=None,
        )

    # -- fenced transitions ---------------------------------------------------------------------------
    def heartbeat(self, owned: Owned) -> Transition:
        """Extend the lease. Updated(new handle) | Finalized | Cancelled | NotFound | LostOwnership."""

        def extend(record: IdempotencyRecord) -> IdempotencyRecord:
            now = self.clock()
            return record.next(heartbeat_at=now, lease_expires_at=now + self.lease)

        return self._transition(
            owned, extend, lambda record, token: Updated(Owned(record, token, owned.previous))
        )

    def finalize(
        self,
        owned: Owned,
        *,
        http_status: int,
        summary: Any,
        headers: tuple[tuple[str, str], ...] = (),
        error_subtype: str | None = None,
        attachment: bytes | None = None,
    ) -> Transition:
        """Store the terminal outcome. Finalized | NotFound | LostOwnership (fenced: nothing written).

        ``attachment``: an outcome body of any size up to ``max_attachment_bytes`` (a table's metadata),
        kept as its own object beside the record and read back with :meth:`attachment`. It is written
        first, whole, under a name of this reservation and of its content; then the record is finalized
        by the usual fenced CAS, naming it (``record.attachment``). So a record naming an attachment
        always finds it whole. When the record does not land with it (NotFound, LostOwnership, Cancelled,
        or another outcome this reservation already stored), the object is deleted again (best effort:
        what is left is removed by ``purge_expired``). When the CAS raises, the object is kept: that CAS
        may have landed, or may still land (a request past its deadline keeps running); it then goes with
        the record. One more request (a PUT) than a finalize without one.

        Raises, before any request (nothing written): SummaryTooLargeError when summary + headers exceed
        the limit, AttachmentTooLargeError (a SummaryTooLargeError) when the attachment is over
        ``max_attachment_bytes``; TypeError/ValueError for an outcome the record could not hold
        (``http_status`` not an int, headers not (str, str) pairs, ``error_subtype`` not a str or None, a
        summary that is not JSON within the bounds of storage_adapter.stored_json, an attachment that is
        not bytes).
        """
        described: Attachment | None = None
        if attachment is not None:
            if not isinstance(attachment, bytes):
                raise TypeError(f"an attachment must be bytes, not {type(attachment).__name__}")
            if len(attachment) > self.max_attachment_bytes:
                raise AttachmentTooLargeError(
                    f"attachment of {owned.record.key!r} is {len(attachment)} bytes, over the limit of "
                    f"{self.max_attachment_bytes} (max_attachment_bytes)",
                    key=owned.record.key,
                )
            described = Attachment.of(owned.record.reservation_id, attachment)

        def settle(record: IdempotencyRecord) -> IdempotencyRecord:
            return record.next(
                status=RecordStatus.FINALIZED,
                finalized_at=self.clock(),
                http_status=http_status,
                summary=summary,
                headers=tuple(headers),
                error_subtype=error_subtype,
                attachment=described,
            )

        encode_record(settle(owned.record))  # the outcome is checked now, not after a request
        size = self.outcome_size(summary, headers, error_subtype)
        if size > self.max_summary_bytes:
            raise SummaryTooLargeError(
                f"response summary of {owned.record.key!r} is {size} bytes, over the limit of "
                f"{self.max_summary_bytes}: store a pointer, not the result",
                key=owned.record.key,
            )
        if attachment is None or described is None:
            return self._transition(owned, settle, lambda record, token: Finalized(record))
        name = self._attachment_name(owned.record, described)
        self._request(f"write {name}", partial(self.adapter.write, name, attachment))
        # An exception from here on leaves the object: the CAS may have landed or may land late.
        outcome = self._transition(owned, settle, lambda record, token: Finalized(record))
        if not (isinstance(outcome, Finalized) and outcome.record.attachment == described):
            # No record names it, and none ever will: the record left this reservation (LostOwnership,
            # NotFound), or it is terminal under it without this object (Cancelled, or Finalized with
            # another outcome). The name is this reservation's and this content's own: nobody else
            # writes it.
            self._delete_quietly(name)
        return outcome

    def attachment(self, record: IdempotencyRecord) -> bytes | None:
        """The attachment ``record`` names (None when it names none), read with one ranged GET of at most
        its recorded size + 1 bytes and verified against its size and SHA-256.

        Raises CorruptRecordError naming the object when it is missing, of another size or content, or
        described as larger than this store's ``max_attachment_bytes`` (then before any request);
        StoreUnavailableError. Nothing is written: the record and the object stay as they are."""
        described = record.attachment
        if described is None:
            return None
        name = self._attachment_name(record, described)

        def corrupt(reason: str) -> CorruptRecordError:
            return CorruptRecordError(
                f"corrupt attachment {name!r} of idempotency record "
                f"{self.location(record.realm, record.key)!r}: {reason} (left in place)",
                key=name,
            )

        if described.size > self.max_attachment_bytes:
            raise corrupt(
                f"the record says {described.size} bytes, over this store's max_attachment_bytes "
                f"({self.max_attachment_bytes}): not read"
            )
        try:
            data = self._request(f"read {name}", lambda: self.adapter.read_range(name, 0, described.size + 1))
        except NotFoundError:
            raise corrupt("missing") from None
        if len(data) != described.size:
            longer = "more than " if len(data) > described.size else ""
            raise corrupt(f"{longer}{len(data)} bytes, the record says {described.size}")
        if hashlib.sha256(data).hexdigest() != described.sha256:
            raise corrupt(f"its SHA-256 is not the record's {described.sha256}")
        return data

    def attachment_location(self, record: IdempotencyRecord) -> str | None:
        """The object key of the attachment ``record`` names; None when it names none."""
        return None if record.attachment is None else self._attachment_name(record, record.attachment)

    def _attachment_name(self, record: IdempotencyRecord, described: Attachment) -> str:
        slot = self.layout.slot_of(record.realm, record.key)
        return self.layout.attachment(slot, described.reservation_id, described.sha256)

    def _delete_quietly(self, name: str) -> None:
        """Delete an object nobody can need (best effort: a failure leaves it to the purge)."""
        with contextlib.suppress(StorageError):
            self._request(f"delete {name}", partial(self.adapter.delete, name))

    def outcome_size(
        self, summary: Any, headers: tuple[tuple[str, str], ...] = (), error_subtype: str | None = None
    ) -> int:
        """The bytes an outcome counts against ``max_summary_bytes`` (what ``finalize`` checks), so a
        caller can tell before finalizing whether it fits. Raises ValueError for a non-JSON summary."""
        return len(canonical_json([summary, [list(h) for h in headers], error_subtype]))

    def cancel(self, owned: Owned, *, error_subtype: str | None = None) -> Transition:
        """Give the key up (nothing to replay). Cancelled | Finalized | NotFound | LostOwnership.

        ``error_subtype`` is kept on the cancelled record: the request handler marks an attempt whose
        effect may have happened (``idempotency_outcome_unsettled``: a failure after the reservation, a
        handler that raised anything but NoEffect, an invalid or unstorable result) so no retry runs it
        unreconciled."""

        def give_up(record: IdempotencyRecord) -> IdempotencyRecord:
            return record.next(
                status=RecordStatus.CANCELLED,
                finalized_at=self.clock(),
                error_subtype=error_subtype,
                attachment=None,
            )

        return self._transition(owned, give_up, lambda record, token: Cancelled(record))

    def _transition(
        self,
        owned: Owned,
        change: Callable[[IdempotencyRecord], IdempotencyRecord],
        done: Callable[[IdempotencyRecord, str], Transition],
    ) -> Transition:
        mine = owned.record
        location = self.location(mine.realm, mine.key)
        current = mine
        token: str | None = owned.token  # None once a CAS missed: re-read before the next attempt
        for _ in range(MAX_CAS_ATTEMPTS):
            if token is None:
                stored = self._read(location)
                if stored is None:
                    return NotFound()
                current, token = stored.record, stored.token
                if current.reservation_id != mine.reservation_id:
                    return LostOwnership(current)
                if current.status is RecordStatus.FINALIZED:
                    return Finalized(current)
                if current.status is RecordStatus.CANCELLED:
                    return Cancelled(current)
            new = change(current)
            new_token = self._cas(location, new, token)
            if new_token is not None:
                return done(new, new_token)
            token = None  # our cached version is stale: re-read, re-check the fence, retry
        raise StorageError(
            f"record {location!r} kept changing under reservation {mine.reservation_id}", key=location
        )

    # -- inspection and retention ---------------------------------------------------------------------
    def load(self, realm: str, key: str) -> Stored | None:
        """The record for (realm, key) with its token, or None. Raises CorruptRecordError (record kept)."""
        return self._read_for(realm, self.key_format.validate(key))

    def purge_expired(self, before: datetime) -> int:
        """Delete records whose ``expires_at`` is before ``before``; return how many were deleted.

        Never deletes an in-progress record whose lease is live (by this store's clock, with skew grace):
        each candidate is first turned into a tombstone by CAS from the exact version judged expired, so
        an owner's concurrent heartbeat or finalize makes the CAS fail and the record survives. Only the
        purger whose CAS won deletes the tombstone, and only if it is still within half the tombstone
        grace (a slower purger leaves it for a later purge to adopt). Corrupt records are left in place;
        after the rest are purged, CorruptRecordError names them (its ``purged`` attribute has the count).

        Only records, index entries and attachments are touched, known by the shapes of their names
        (expiry_index): another tool's object under the prefix is neither read nor deleted.

        Attachments go with their records: those listed in the slot of a record this purge deleted are
        deleted after it; those listed in a slot no listed record has are deleted once an existence check
        of the slot's record, made after listing them, finds none (a record always exists when its
        attachment is written, and a record naming one is removed only by purge: once the slot's record
        is gone, no record will ever name it). Those of a live record's slot, named or not, stay.

        Every judgement comes from a fresh read of the record. Purge keeps an expiry index (one empty
        object per record it read and kept, see storage_adapter.idempotency.expiry_index) only to skip
        the reads of records its entries say expire at or after ``before``: with N records, E of them due,
        A attachments, a purge costs 2 x ceil(N/1000) + ceil(A/1000) listing requests, one read per record
        due, new since the last purge or unindexed, one index write per record read and kept, a CAS and a
        DELETE per purged record and an existence check per slot of orphaned attachments; stale entries
        and the attachments deleted go in batches of 1000 (docs/idempotency.md).
        """
        purged = 0
        corrupt: list[str] = []
        # Index entries and attachments to delete: garbage, entries of records purged or rewritten,
        # attachments of records purged and orphans.
        doomed: list[str] = []
        strays: list[Listing] = []  # attachments listed in a slot without a listed record
        # The listings are streamed (one page of each held at a time) and paired slot by slot. The
        # deadline bounds the calls that open them; pages are then taken as they come.
        records = self._request("list records", lambda: self.adapter.list_pages(self.layout.records))
        index = self._request("list expiry index", lambda: self.adapter.list_pages(self.layout.index))
        attachments = self._request(
            "list attachments", lambda: self.adapter.list_pages(self.layout.attachments)
        )
        listed_records = (info for page in records for info in page)
        listed_entries = (info for page in index for info in page)
        listed_attachments = (info for page in attachments for info in page)
        for listed in joined(self.layout, listed_records, listed_entries, doomed, listed_attachments, strays):
            self._orphans(strays, doomed)
            # Skipping the read is sound: a record's expires_at is set once, by reserve's write_if_absent
            # (no transition, takeover or tombstone changes it), and a record is removed only by a purge,
            # once expires_at < before; with before not ahead of the clocks, a record created later in the
            # slot expires later. So an entry never claims a later expiry than the record now in its slot
            # has: a stale one can only make purge read a record it need not, never skip one that is due.
            # Every entry of the slot counts (the earliest wins) and one without a valid expiry stands for
            # no knowledge, so a read is skipped only when all entries say "not due".
            expiry = listed.expiry()
            if expiry is not None and expiry >= before:
                continue
            key = listed.info.key
            try:
                stored = self._read(key)
            except CorruptRecordError:
                corrupt.append(key)
                stored = None
            if stored is not None and self._purgeable(stored.record, before):
                if self._tombstone_and_delete(key, stored):
                    purged += 1
                    # Listed before the record was deleted, so written while it (or an earlier record of
                    # the slot) existed: no later record names any of them.
                    doomed.extend(listed.attachments)
                stored = None  # purged, or changed since we judged it: either way the next purge reads it
            if listed.slot is not None:
                self._reindex(listed.slot, listed.entries, stored, before, doomed)
            if len(doomed) >= DELETE_BATCH:
                self._delete_doomed(doomed)
        self._orphans(strays, doomed)
        self._delete_doomed(doomed)
        if corrupt:
            error = CorruptRecordError(
                f"purge left {len(corrupt)} corrupt record(s) in place: {corrupt}", key=corrupt[0]
            )
            error.purged = purged  # type: ignore[attr-defined]
            raise error
        return purged

    def _tombstone_and_delete(self, location: str, stored: Stored) -> bool:
        """Turn the record judged purgeable into our tombstone by CAS from exactly the version judged,
        then delete it. True when deleted; False when it changed meanwhile or we were too slow."""
        tombstoned_at = self.clock()
        tombstone = stored.record.next(
            status=RecordStatus.PURGING,
            reservation_id=_new_id(),
            executor_id=self.executor_id,
            heartbeat_at=tombstoned_at,
        )
        if self._cas(location, tombstone, stored.token) is None:
            return False  # changed since we judged it: someone owns it now
        if self.clock() - tombstoned_at > self.tombstone_grace / 2:
            return False  # too slow to be sure nobody adopted it yet: leave it to the next purge
        self._request(f"delete {location}", partial(self.adapter.delete, location))
        return True

    def _reindex(
        self, slot: str, entries: tuple[Entry, ...], kept: Stored | None, before: datetime, stale: list[str]
    ) -> None:
        """Leave the slot of a record purge just read with at most the one entry its kept record's expiry
        gives (a tombstone gets none: a tombstone is adopted whatever its expiry), writing it only when
        missing and useful (expiry at or after ``before``); every other entry of the slot goes to
        ``stale``."""
        wanted, useful = None, False
        if kept is not None and kept.record.status is not RecordStatus.PURGING:
            wanted = self.layout.entry(slot, kept.record.expires_at)
            useful = kept.record.expires_at >= before
        listed = [entry.key for entry in entries]
        stale.extend(key for key in listed if key != wanted)
        if wanted is not None and useful and wanted not in listed:
            self._request(f"write {wanted}", partial(self.adapter.write, wanted, b""))

    def _delete_doomed(self, keys: list[str]) -> None:
        """Delete the index entries and attachments ``keys`` (batched) and empty the list."""
        if keys:
            self._request(
                f"delete {len(keys)} index entries and attachments",
                partial(self.adapter.delete_many, list(keys)),
            )
            keys.clear()

    def _orphans(self, strays: list[Listing], doomed: list[str]) -> None:
        """Move to ``doomed`` the listed attachments of ``strays`` whose slot's record is gone, by one
        existence check per slot made now, after they were listed; empty ``strays``.

        Sound: an attachment is written by the owner of a reservation while it holds the record, and only
        a record of that reservation (finalized, then its purge's tombstone) ever names it. Once the slot
        holds no record, that record has been deleted (by a purge: nothing else deletes records), and any
        record created there later has a new reservation: no record names the attachment again. A slot
        whose record exists (created after its listing passed the slot) keeps its attachments."""
        checked: dict[str, bool] = {}
        for stray in strays:
            slot = stray.slot
            assert slot is not None  # joined hands over only paired attachments
            if slot not in checked:
                location = self.layout.record_at(slot)
                checked[slot] = self._request(f"exists {location}", partial(self.adapter.exists, location))
            if not checked[slot]:
                doomed.append(stray.key)
        strays.clear()

    def _purgeable(self, record: IdempotencyRecord, before: datetime) -> bool:
        now = self.clock()
        if record.status is RecordStatus.PURGING:
            return now > record.heartbeat_at + self.tombstone_grace  # its purger died: adopt it
        if record.expires_at >= before:
            return False
        return record.status is not RecordStatus.IN_PROGRESS or self.is_lease_stale(record)


def _new_id() -> str:
    return uuid.uuid4().hex
