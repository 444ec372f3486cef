"""Environment variables set for the duration of a block: how a started server's endpoint (and switches
such as compatibility modes) reach the worker processes a run spawns, which inherit the environment."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def scoped_environment(values: dict[str, str]) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` for the block; restore every variable (or its absence) after."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
