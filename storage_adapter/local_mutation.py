"""Deprecated: the old name of :mod:`storage_adapter.local_files`; forwarded for one release."""

from storage_adapter import local_files
from storage_adapter.moved import forwarding

__getattr__ = forwarding(__name__, (local_files,))
