#!/usr/bin/env bash
# The tests: the SeaweedFS contract stage (ci/contract-stage), the wheel stage (ci/wheel-stage: the built
# sdist and wheel, and the installed wheel running check and the plugin), then the project's test suite. Extra
# arguments go to pytest. Tiers (docs/ci.md):
#   bash scripts/test.sh              the default tier: every promise on memory, local and SeaweedFS (the
#                                     contract on each, its async, wrapped-store and fsspec twins, races in
#                                     threads, processes and Spark, engine, recovery, idempotency, mypy, ruff)
#   bash scripts/test.sh -m stress    campaigns sized for proof (races, crashes, chaos, mutation, benches)
#   bash scripts/test.sh -m servers   a second real S3 server: Ceph RGW (installed here with apt) and moto
# The caller's AWS_*, AZURE_* and STORAGE_ADAPTER_* variables are unset first: every stage is hermetic.
# Each stage's time is printed; pytest ends with its wall time and the slowest tests, and writes every
# test's duration to results/test-durations.json (ci/durations.py makes docs/ci.md's tables from it).
set -euo pipefail
cd "$(dirname "$0")/.."
# Hermetic: the caller's client settings (AWS_*, AZURE_*, AZURITE_*, STORAGE_ADAPTER_*: the prefixes of
# storage_adapter.servers.server.CLIENT_SETTING_PREFIXES) reach no stage; tests/conftest.py scrubs them
# again for a pytest run started by hand. A test about the environment sets it itself.
for name in $(compgen -e); do
  case "$name" in AWS_* | AZURE_* | AZURITE_* | STORAGE_ADAPTER_*) unset "$name" ;; esac
done
stage_started=$SECONDS
took() { echo "test: $1 took $((SECONDS - stage_started)) s" >&2; stage_started=$SECONDS; }

bash scripts/bootstrap.sh
took "bootstrap"
case " $* " in
  *servers*)
    # Ceph RGW is the second real S3 server of the servers tier. Where its Debian packages cannot be
    # installed, those tests skip with that reason instead of failing the run.
    if ! bash scripts/install-ceph.sh; then
      echo "test: Ceph RGW packages could not be installed; the Ceph tests will skip" >&2
    fi
    took "Ceph RGW install"
    ;;
esac
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
ci/contract-stage seaweedfs
took "the SeaweedFS contract stage"
# The artifacts a user installs: the sdist and the wheel built, checked, and the wheel installed in a clean
# venv running the main job and the pytest plugin (ci/wheel-stage; about 1.5 minutes).
ci/wheel-stage
took "the wheel stage"
# The default tier runs on three pytest-xdist workers on two cores (measured, docs/ci.md: the suite waits
# on spawned processes, Spark jobs and servers more than it computes); a tier chosen with -m, or a worker
# count given with -n, runs as asked (the stress campaigns are sized for a machine of their own).
workers=(-n 3 --dist worksteal)
for arg in "$@"; do
  case "$arg" in -m* | -n* | --numprocesses*) workers=() ;; esac
done
exec .venv/bin/python -m pytest tests "${workers[@]}" --durations-json results/test-durations.json "$@"
