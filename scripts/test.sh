#!/usr/bin/env bash
# The tests: the SeaweedFS contract stage (ci/contract-stage), then the project's whole test suite
# (contract on memory/local/SeaweedFS, the check against Ceph RGW and moto, concurrency proofs with
# threads, processes and Spark, engine, recovery crash campaigns, idempotency, mypy and ruff).
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
# Ceph RGW is the second real S3 server (tests/test_ceph_rgw.py, tests/test_check_servers.py). Where its
# Debian packages cannot be installed, those tests skip with that reason instead of failing the run.
if ! bash scripts/install-ceph.sh; then
  echo "test: Ceph RGW packages could not be installed; the Ceph tests will skip" >&2
fi
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
ci/contract-stage seaweedfs
exec .venv/bin/python -m pytest tests "$@"
