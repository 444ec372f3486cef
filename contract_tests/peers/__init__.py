"""Peer adapters: the ObjectStorageAdapter API over other Python storage stacks, for comparison.

They exist so that ``storage-adapter check`` can run the same contract clauses against fsspec
(local and memory filesystems) and s3fs, and show side by side which promises those stacks keep. Each
mutation is implemented the way the stack naturally offers it (see :mod:`contract_tests.peers.fsspec_adapter`);
they are not meant for production use. Requires the ``peers`` extra (fsspec, s3fs).

Factory (usable as ``--storage-factory contract_tests.peers:open_peer``)::

    open_peer("memory://name/prefix")   # fsspec MemoryFileSystem
    open_peer("file:///abs/dir")        # fsspec LocalFileSystem
    open_peer("s3://bucket/prefix", endpoint=..., access_key_id=..., ...)   # s3fs
"""

from contract_tests.peers.fsspec_adapter import FsspecAdapter, open_peer, peer_of

__all__ = ["FsspecAdapter", "open_peer", "peer_of"]
