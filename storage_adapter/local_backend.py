"""Deprecated: the old name of :mod:`storage_adapter.local_driver` (``LocalBackend`` is now
``LocalDriver``); forwarded, with a DeprecationWarning, for one release."""

from __future__ import annotations

import warnings
from typing import Any

from storage_adapter import local_driver


def __getattr__(name: str) -> Any:
    if name.startswith("__"):  # the import system's own questions (``__path__``): this is no package
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    new = {"LocalBackend": "LocalDriver"}.get(name, name)
    if not hasattr(local_driver, new):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"storage_adapter.local_backend.{name} is now storage_adapter.local_driver.{new}; the old name goes "
        "in the next release",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(local_driver, new)
