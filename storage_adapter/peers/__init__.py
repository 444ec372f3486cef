"""Peer adapters: the ObjectStorageAdapter API over other Python storage stacks, for comparison.

They exist so that ``storage-adapter check`` can run the same contract clauses against fsspec
(local and memory filesystems) and s3fs, and show side by side which promises those stacks keep. Each
mutation is implemented the way the stack naturally offers it (see :mod:`storage_adapter.peers.fsspec_adapter`);
they are not meant for production use. Requires the ``peers`` extra (fsspec, s3fs).

Factory (usable as ``--storage-factory storage_adapter.peers:open_peer``)::

    open_peer("memory://name/prefix")   # fsspec MemoryFileSystem
    open_peer("file:///abs/dir")        # fsspec LocalFileSystem
    open_peer("s3://bucket/prefix", endpoint=..., access_key_id=..., ...)   # s3fs
"""

from storage_adapter.peers.fsspec_adapter import PEER_NAMES, FsspecAdapter, open_peer

__all__ = ["PEER_NAMES", "FsspecAdapter", "open_peer"]
