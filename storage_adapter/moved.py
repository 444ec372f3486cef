"""Names that moved keep their old import path for one release: the one mechanism behind every old path
(``storage_adapter.obstore_backend``, ``.local_backend``, ``.local_mutation``, ``registry.Driver``...)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from types import ModuleType
from typing import Any


def forwarding(
    old: str,
    homes: Sequence[ModuleType],
    renamed: Mapping[str, str] | None = None,
    only: Collection[str] | None = None,
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for the old module ``old``: a name (``renamed`` to its new one) is looked
    up in ``homes`` in turn and returned with a DeprecationWarning naming its new place; ``only`` limits
    the names forwarded. Anything else, and the import system's own questions (``__path__``: the old
    module is no package), is an AttributeError."""

    def __getattr__(name: str) -> Any:
        new = (renamed or {}).get(name, name)
        home = next((h for h in homes if hasattr(h, new)), None)
        if name.startswith("__") or home is None or (only is not None and name not in only):
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(
            f"{old}.{name} is now {home.__name__}.{new}; the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(home, new)

    return __getattr__
