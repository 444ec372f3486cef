"""Deprecated: the old name of :mod:`storage_adapter.local_files`; forwarded, with a DeprecationWarning,
for one release."""

from __future__ import annotations

import warnings
from typing import Any

from storage_adapter import local_files


def __getattr__(name: str) -> Any:
    if name.startswith("__"):  # the import system's own questions (``__path__``): this is no package
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not hasattr(local_files, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"storage_adapter.local_mutation.{name} is now storage_adapter.local_files.{name}; the old name goes "
        "in the next release",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(local_files, name)
