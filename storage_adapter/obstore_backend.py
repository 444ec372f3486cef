"""Deprecated: the old home of the obstore driver (now :mod:`storage_adapter.obstore_driver`, its error
boundary :mod:`storage_adapter.translation`); its names are forwarded for one release."""

from storage_adapter import obstore_driver, translation
from storage_adapter.moved import forwarding

__getattr__ = forwarding(__name__, (obstore_driver, translation), renamed={"ObstoreBackend": "ObstoreDriver"})
