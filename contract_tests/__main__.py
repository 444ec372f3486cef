"""``python -m contract_tests``: the ``storage-adapter`` command line (see :mod:`contract_tests.cli`)."""

from contract_tests.cli import main

raise SystemExit(main())
