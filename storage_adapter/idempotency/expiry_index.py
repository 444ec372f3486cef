"""Where an IdempotencyStore keeps things, and the purge's expiry index (the one definition of both).

Under the store's prefix::

    records/<slot>.json                        the record of (realm, key): reserve and the transitions
    expiry/<slot>/<expires_at>                 an index entry (empty): written and deleted by purge only
    attachments/<slot>/<reservation>-<sha256>  an outcome's attachment: written by finalize before the
                                               record names it; deleted by finalize when the record does
                                               not land, else by purge with the record (or as an orphan)

``<slot>`` is ``<sha256(realm)[:40]>/<sha256(key)[:40]>``, ``<expires_at>`` the record's expiry in UTC as
``YYYYMMDDTHHMMSS.ffffffZ``, ``<reservation>`` the 32 hex digits of the reservation that wrote the
attachment and ``<sha256>`` the 64 of its content's digest. Every part is fixed width, so key order and S3
servers' segment-by-segment order agree: a slot's records, entries and attachments come out of their
listings in the same slot order, and :func:`joined` pairs them while holding one page of each.

An entry only ever lets purge skip a read; it never decides anything about a record. Why skipping is
sound is in ``IdempotencyStore.purge_expired`` and docs/idempotency.md, with why deleting an attachment
is.

Records, entries and attachments are known by the exact shape of their names (above): any other object
under the prefix is another tool's, and purge neither reads nor deletes it (:func:`joined` leaves it out).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TypeVar

from storage_adapter.types import ObjectInfo

_HEX40 = "[0-9a-f]{40}"
_RECORD_TAIL = re.compile(rf"({_HEX40}/{_HEX40})\.json")
_ENTRY_TAIL = re.compile(
    rf"({_HEX40}/{_HEX40})/([0-9]{{4}})([0-9]{{2}})([0-9]{{2}})T([0-9]{{2}})([0-9]{{2}})([0-9]{{2}})"
    r"\.([0-9]{6})Z"
)
_ATTACHMENT_TAIL = re.compile(rf"({_HEX40}/{_HEX40})/[0-9a-f]{{32}}-[0-9a-f]{{64}}")


@dataclass(frozen=True)
class Entry:
    """A listed index entry. ``expires_at`` is None when it carries no valid expiry (a date that does not
    exist): such an entry is garbage and never lets a read be skipped. ``slot`` is None only for the
    marker :func:`_ordered` ends a stream out of slot order with."""

    key: str
    slot: str | None
    expires_at: datetime | None


@dataclass(frozen=True)
class Listing:
    """A listed attachment. ``slot`` is None only for the marker :func:`_ordered` ends a stream out of
    slot order with."""

    key: str
    slot: str | None


@dataclass(frozen=True)
class Layout:
    """The object keys of a store under ``prefix``."""

    prefix: str

    @property
    def records(self) -> str:
        """The prefix every record is under."""
        return f"{self.prefix}/records"

    @property
    def index(self) -> str:
        """The prefix every index entry is under."""
        return f"{self.prefix}/expiry"

    @property
    def attachments(self) -> str:
        """The prefix every attachment is under."""
        return f"{self.prefix}/attachments"

    def slot_of(self, realm: str, key: str) -> str:
        """The slot of (realm, key): where its record, entries and attachments are."""
        return f"{_digest(realm)}/{_digest(key)}"

    def record(self, realm: str, key: str) -> str:
        """The record's object key. Realm and key are hashed: any realm or key format is a safe object key,
        and the realm is part of the location so realms never share a record."""
        return self.record_at(self.slot_of(realm, key))

    def record_at(self, slot: str) -> str:
        """The object key of the record in ``slot``."""
        return f"{self.records}/{slot}.json"

    def attachment(self, slot: str, reservation_id: str, sha256: str) -> str:
        """The object key of the attachment that reservation ``reservation_id`` wrote in ``slot`` with
        content of digest ``sha256``: a reservation's own name (no other reservation ever writes it), and
        a name of one content (a write of it never changes what a record naming it describes)."""
        return f"{self.attachments}/{slot}/{reservation_id}-{sha256}"

    def entry(self, slot: str, expires_at: datetime) -> str | None:
        """The index entry saying the record in ``slot`` expires at ``expires_at``; None when the expiry
        has no UTC stamp (within an offset of the ends of year 1 and year 9999)."""
        try:
            utc = expires_at.astimezone(UTC)
        except OverflowError:
            return None
        return (
            f"{self.index}/{slot}/{utc.year:04d}{utc.month:02d}{utc.day:02d}T{utc.hour:02d}{utc.minute:02d}"
            f"{utc.second:02d}.{utc.microsecond:06d}Z"
        )

    def slot(self, record_key: str) -> str | None:
        """The slot of a record's object key; None for any other key found under the records prefix."""
        match = _RECORD_TAIL.fullmatch(_tail(record_key, self.records))
        return None if match is None else match[1]

    def parse_entry(self, entry_key: str) -> Entry | None:
        """What an object found under the index prefix says; None when its name is not of an entry's
        shape (another tool's object: never an entry, never deleted). Never raises: an entry whose date
        does not exist has no expiry (it then stands for no knowledge at all)."""
        match = _ENTRY_TAIL.fullmatch(_tail(entry_key, self.index))
        if match is None:
            return None
        year, month, day, hour, minute, second, micro = (int(part) for part in match.groups()[1:])
        try:
            expires_at = datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)
        except ValueError:  # month 13, February 30th, ...
            expires_at = None
        return Entry(entry_key, match[1], expires_at)

    def parse_attachment(self, attachment_key: str) -> Listing | None:
        """The slot of an object found under the attachments prefix; None when its name is not of an
        attachment's shape (another tool's object: never read, never deleted)."""
        match = _ATTACHMENT_TAIL.fullmatch(_tail(attachment_key, self.attachments))
        return None if match is None else Listing(attachment_key, match[1])


@dataclass(frozen=True)
class Listed:
    """A listed record, the index entries and the attachments (keys) listed for its slot. ``slot`` is None
    when the listings could not be paired for it (a listing out of slot order): its entries and
    attachments are then unknown, and purge reads it and leaves the index and the attachments alone."""

    info: ObjectInfo
    slot: str | None
    entries: tuple[Entry, ...] = ()
    attachments: tuple[str, ...] = ()

    def expiry(self) -> datetime | None:
        """The earliest expiry its entries claim; None when there is no entry or one carries no expiry."""
        claimed = [entry.expires_at for entry in self.entries]
        if not claimed or None in claimed:
            return None
        return min(moment for moment in claimed if moment is not None)


def joined(
    layout: Layout,
    records: Iterable[ObjectInfo],
    index: Iterable[ObjectInfo],
    garbage: list[str],
    attachments: Iterable[ObjectInfo] = (),
    strays: list[Listing] | None = None,
) -> Iterator[Listed]:
    """Each listed record with its entries and attachments, from three listings in slot order, holding one
    page of each. Objects of no listing's shape (another tool's) are left out: never read, never garbage.

    Appends to ``garbage`` the key of every entry whose slot no listed record has (deleting an entry is
    always safe: it costs the next purge one read at most), and to ``strays`` every attachment whose slot
    no listed record has (whether one can be deleted is the caller's to find out: the record may have been
    created after its listing passed the slot). Should the records or the entries step back in slot order
    (no known server does), pairing stops there: every later record comes with ``slot=None``, and no
    later entry or attachment is garbage or a stray; should only the attachments step back, pairing stops
    for them alone."""
    entries = _ordered(entry for info in index if (entry := layout.parse_entry(info.key)) is not None)
    attached = _ordered(
        item for info in attachments if (item := layout.parse_attachment(info.key)) is not None
    )
    pending = next(entries, None)
    waiting = next(attached, None)
    previous = ""
    paired = True
    for info in records:
        slot = layout.slot(info.key)
        if slot is None:
            continue  # another tool's object under the records prefix: not a record
        if paired and (slot <= previous or (pending is not None and pending.slot is None)):
            paired = False  # a step back in either listing
        if not paired:
            yield Listed(info, None)
            continue
        previous = slot
        found: list[Entry] = []
        while pending is not None and pending.slot is not None and pending.slot <= slot:
            if pending.slot == slot:
                found.append(pending)
            else:
                garbage.append(pending.key)
            pending = next(entries, None)
        held: list[str] = []
        while waiting is not None and waiting.slot is not None and waiting.slot <= slot:
            if waiting.slot == slot:
                held.append(waiting.key)
            elif strays is not None:
                strays.append(waiting)
            waiting = next(attached, None)
        yield Listed(info, slot, tuple(found), tuple(held))
    while paired and pending is not None and pending.slot is not None:
        garbage.append(pending.key)
        pending = next(entries, None)
    while paired and waiting is not None and waiting.slot is not None:
        if strays is not None:
            strays.append(waiting)
        waiting = next(attached, None)


S = TypeVar("S", Entry, Listing)


def _ordered(items: Iterator[S]) -> Iterator[S]:
    """The entries (or attachments) in order. A step back in slot order ends the stream with one item
    whose slot is None: the sign on which :func:`joined` stops pairing."""
    previous = ""
    for item in items:
        assert item.slot is not None  # parse_entry and parse_attachment give every item its slot
        if item.slot < previous:
            yield replace(item, slot=None)
            return
        previous = item.slot
        yield item


def _tail(key: str, prefix: str) -> str:
    return key[len(prefix) + 1 :] if key.startswith(f"{prefix}/") else ""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]
