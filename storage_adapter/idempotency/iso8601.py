"""ISO-8601 durations, for advertising the record lifetime (Iceberg's ``idempotency-key-lifetime``)."""

from __future__ import annotations

from datetime import timedelta


def iso8601_duration(duration: timedelta) -> str:
    """``timedelta(hours=1, minutes=30)`` -> ``"PT1H30M"``; days stay days (``P1DT2H``). Positive only."""
    if duration <= timedelta(0):
        raise ValueError(f"duration must be positive, got {duration}")
    hours, rest = divmod(duration.seconds, 3600)
    minutes, secs = divmod(rest, 60)
    seconds = (
        f"{secs}.{duration.microseconds:06d}".rstrip("0").rstrip(".") if duration.microseconds else str(secs)
    )
    time_part = "".join(
        f"{value}{unit}"
        for value, unit in ((hours, "H"), (minutes, "M"), (seconds, "S"))
        if value not in (0, "0")
    )
    return "P" + (f"{duration.days}D" if duration.days else "") + (f"T{time_part}" if time_part else "")
