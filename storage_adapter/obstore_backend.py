"""Deprecated: the old home of the obstore driver. Its names moved (storage_adapter.obstore_driver, the
error boundary to storage_adapter.translation); this module forwards them, with a DeprecationWarning,
for one release."""

from __future__ import annotations

import warnings
from typing import Any

from storage_adapter import obstore_driver, translation

_RENAMED = {"ObstoreBackend": "ObstoreDriver"}


def __getattr__(name: str) -> Any:
    if name.startswith("__"):  # the import system's own questions (``__path__``): this is no package
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    new = _RENAMED.get(name, name)
    home = obstore_driver if hasattr(obstore_driver, new) else translation
    if not hasattr(home, new):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"storage_adapter.obstore_backend.{name} is now {home.__name__}.{new}; the old name goes in the "
        "next release",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(home, new)
