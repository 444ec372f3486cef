"""``python -m storage_adapter``: the ``storage-adapter`` command line (see :mod:`storage_adapter.cli`)."""

from storage_adapter.cli import main

raise SystemExit(main())
