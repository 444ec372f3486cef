"""Peak resident-set growth of one call, for the memory-bound workers run in their own process."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def status_bytes(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_growth(action: Callable[[], T]) -> tuple[T, int]:
    """``action()``'s result and how far the process's peak RSS rose above its RSS before the call."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset VmHWM to the current resident set
    before = status_bytes("VmRSS")
    result = action()
    return result, status_bytes("VmHWM") - before
