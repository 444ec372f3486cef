"""Secrets are never printed: the one mechanism that keeps credentials out of reprs, messages, logs and reports.

A secret is the value of an option its backend declares ``Option(secret=True)`` (S3:
``secret_access_key``, ``session_token``; Azure: ``account_key``, ``sas_token``, ``token``,
``client_secret``), whether passed as an option or read from the option's environment variable, and the
userinfo (``user:password@``) of a URL. The rules, each enforced once:

* **URLs carry no credentials.** :func:`reject_userinfo` refuses userinfo in any URL, whatever its scheme,
  naming the URL with the userinfo masked (:func:`redact_url`). ``config.parse_url`` calls it first, and
  so does everything that derives a name from a URL (the CLI's target names).
* **Reprs mask secrets.** ``AdapterConfig`` shows secret options as ``***``; a message about a bad
  option value never quotes a secret's value.
* **Errors are scrubbed at the adapter's boundary.** Every exception leaving an adapter passes a
  :class:`Redactor` holding its config's secret values: a secret quoted in the message (or its notes) is
  masked in place, and every link of the ``__cause__``/``__context__`` chain that quotes one is replaced
  by a :class:`RedactedError` stand-in with the same type name and masked text, so a traceback explains
  the failure without the credential.
* **The CLI and its reports** mask the secret values found in the environment (:func:`~storage_adapter.registry.redact_environment`,
  which knows the registered backends' secret options).

Values shorter than ``MIN_SECRET_CHARS`` are not searched for in free text (masking every ``b`` would
garble messages); they are still never echoed, as nothing quotes an option's value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Literal

from storage_adapter.errors import ConfigurationError

MASK = "***"


class SecretText(str):
    """A secret option's value: the str itself to every use (obstore, signing, comparison, pickling), but
    masked in its repr, so printing the options (a tuple, a dict, a traceback's locals) never shows it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(MASK)


MIN_SECRET_CHARS = 8
# The authority of "scheme://authority/...": what urlsplit calls the netloc, userinfo included.
_AUTHORITY = re.compile(r"[^/?#]*//([^/?#]*)")
# urlsplit drops these anywhere and strips leading C0 controls and spaces: look at the URL as it does.
_DROPPED = str.maketrans("", "", "\t\r\n")
_LEADING = "".join(map(chr, range(0x21)))


def _as_split(url: str) -> str:
    return url.lstrip(_LEADING).translate(_DROPPED)


def _userinfo_end(url: str) -> int | None:
    """The index of the ``@`` that ends the userinfo of ``url`` (already in urlsplit's view), or None."""
    match = _AUTHORITY.match(url)
    if match is None or "@" not in match.group(1):
        return None
    return match.start(1) + match.group(1).rindex("@")


def redact_url(url: str) -> str:
    """``url`` (as urlsplit reads it) with its userinfo, if any, replaced by ``***``."""
    url = _as_split(url)
    end = _userinfo_end(url)
    if end is None:
        return url
    match = _AUTHORITY.match(url)
    assert match is not None  # _userinfo_end found an authority
    return url[: match.start(1)] + MASK + url[end:]


def reject_userinfo(url: str, *, names_location: bool = False) -> None:
    """Raise ConfigurationError, naming the URL with the userinfo masked, if ``url`` carries userinfo.
    With ``names_location`` (a scheme whose userinfo names a location, Azure's
    ``abfs://container@account.dfs.core.windows.net``) a userinfo without a ``:`` passes: a password
    never does."""
    split = _as_split(url)
    end = _userinfo_end(split)
    if end is not None and not (names_location and ":" not in split[:end].rpartition("//")[2]):
        shown = redact_url(url)
        raise ConfigurationError(
            f"URL {shown!r} carries credentials (user:password@): give them as options or through the "
            "backend's environment variables (for S3, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)",
            key=shown,
        )


class RedactedError(Exception):
    """Stands in a ``__cause__``/``__context__`` chain for an exception whose text quoted a secret: its
    message is the original's type name and text, with every secret masked."""


class Redactor:
    """Masks known secret values in text and in exceptions. As a context manager, scrubs (in place) every
    exception leaving its block and lets it propagate."""

    __slots__ = ("_secrets",)

    def __init__(self, secrets: Iterable[object]) -> None:
        found = {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_CHARS}
        # Longest first: a secret that contains another is masked whole.
        self._secrets = tuple(sorted(found, key=len, reverse=True))

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def text(self, text: str) -> str:
        """``text`` with every secret replaced by ``***``."""
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        return text

    def _quotes(self, exc: BaseException) -> bool:
        shown = f"{exc}{exc.args!r}{getattr(exc, '__notes__', '')!r}"
        return any(secret in shown for secret in self._secrets)

    def scrub(self, exc: BaseException) -> None:
        """Mask every secret in ``exc``'s arguments and notes, in place, and replace each link of its
        chain that quotes one by a :class:`RedactedError` (whose own chain is scrubbed the same way)."""
        if not self._secrets:
            return
        self._scrub_chain(exc, {id(exc): exc})
        exc.args = tuple(self.text(a) if isinstance(a, str) else a for a in exc.args)
        notes = getattr(exc, "__notes__", None)
        if notes is not None:
            exc.__notes__ = [self.text(str(note)) for note in notes]

    def _scrub_chain(self, exc: BaseException, done: dict[int, BaseException]) -> None:
        """Replace ``exc``'s cause and context by their clean versions; ``done`` maps each exception
        already visited to its replacement (a cause is usually the context too; chains may loop)."""
        suppress = exc.__suppress_context__  # assigning __cause__ would set it
        if exc.__cause__ is not None:
            exc.__cause__ = self._clean(exc.__cause__, done)
        if exc.__context__ is not None:
            exc.__context__ = self._clean(exc.__context__, done)
        exc.__suppress_context__ = suppress

    def _clean(self, exc: BaseException, done: dict[int, BaseException]) -> BaseException:
        if id(exc) in done:
            return done[id(exc)]
        done[id(exc)] = exc  # while its own chain is cleaned (a loop back here keeps it)
        self._scrub_chain(exc, done)
        if self._quotes(exc):
            stand_in = RedactedError(
                f"{type(exc).__module__}.{type(exc).__qualname__}: {self.text(str(exc))}"
            )
            stand_in.__cause__, stand_in.__context__ = exc.__cause__, exc.__context__
            stand_in.__suppress_context__ = exc.__suppress_context__
            stand_in.__traceback__ = exc.__traceback__
            done[id(exc)] = stand_in
        return done[id(exc)]

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        if exc is not None:
            self.scrub(exc)
        return False
