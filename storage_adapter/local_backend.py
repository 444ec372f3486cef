"""Deprecated: the old name of :mod:`storage_adapter.local_driver` (``LocalBackend`` is now
``LocalDriver``); forwarded for one release."""

from storage_adapter import local_driver
from storage_adapter.moved import forwarding

__getattr__ = forwarding(__name__, (local_driver,), renamed={"LocalBackend": "LocalDriver"})
