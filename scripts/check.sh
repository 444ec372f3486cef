#!/usr/bin/env bash
# The main job: the conformance check of the embedded defaults (memory, a temporary local directory and
# an embedded SeaweedFS S3 server), with peer adapters side by side. Extra arguments go to
# `storage-adapter check` (for example an s3:// URL, or --report results/check).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/storage-adapter check "$@"
