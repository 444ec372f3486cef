"""The executable storage contract: one suite for every backend, shipped as a pytest plugin.

Run it against your bucket::

    pytest --pyargs contract_tests --storage-url s3://bucket/prefix

or subclass :class:`AdapterContract` to run it against your own adapter (override the ``adapter``
fixture; it must return an object with the ObjectStorageAdapter API that pickles).
"""

from contract_tests.clauses import AdapterContract

__all__ = ["AdapterContract"]
