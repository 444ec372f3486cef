"""PySpark at the edge of the product: the session builder and the engine's Spark bulk load.

Needs the ``spark`` extra (PySpark, pyarrow). Nothing below this package imports it.
"""

from storage_adapter.spark.load import bulk_load
from storage_adapter.spark.session import spark_session

__all__ = ["bulk_load", "spark_session"]
