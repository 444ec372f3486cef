#!/usr/bin/env bash
# The tests: the SeaweedFS contract stage (ci/contract-stage), then the project's whole test suite
# (contract on memory/local/SeaweedFS, concurrency proofs with threads, processes and Spark, engine,
# recovery crash campaigns, idempotency). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
ci/contract-stage seaweedfs
exec .venv/bin/python -m pytest tests "$@"
