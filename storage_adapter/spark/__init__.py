"""PySpark at the edge of the product: the ``storage_adapter`` data source, Spark loads, the native-writer
path (``write``: Spark's own Parquet writer, one engine commit), the native read (``read``: Spark's own
Parquet reader over one snapshot's files) and the session builder (docs/spark.md).

Needs the ``spark`` extra (PySpark, pyarrow). Nothing below this package imports it.
"""

from storage_adapter.spark.datasource import (
    SHORT_NAME,
    StorageAdapterDataSource,
    register,
    relayed_error,
    schema_from_spark,
    schema_to_spark,
    typed_errors,
)
from storage_adapter.spark.load import BulkLoad, SparkInputError, bulk_load, write_tables
from storage_adapter.spark.native import write
from storage_adapter.spark.native_read import read
from storage_adapter.spark.session import spark_session

__all__ = [
    "SHORT_NAME",
    "BulkLoad",
    "SparkInputError",
    "StorageAdapterDataSource",
    "bulk_load",
    "read",
    "register",
    "relayed_error",
    "schema_from_spark",
    "schema_to_spark",
    "spark_session",
    "typed_errors",
    "write",
    "write_tables",
]
