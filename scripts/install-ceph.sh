#!/usr/bin/env bash
# Install the Debian packages storage_adapter/servers/ceph.py needs for a single-host Ceph RGW (one mon, one memstore
# OSD, radosgw): about 270 MB with --no-install-recommends. Idempotent: does nothing when `radosgw` is
# already on PATH. Needs root (or sudo) and a Debian/Ubuntu apt; the provider never installs by itself.
set -euo pipefail

if command -v radosgw >/dev/null 2>&1; then
  echo "install-ceph: radosgw already installed ($(radosgw --version 2>/dev/null | head -n1))" >&2
  exit 0
fi

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

echo "install-ceph: installing radosgw ceph-mon ceph-osd ceph-common (apt, ~270 MB)" >&2
as_root apt-get update -qq
DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends \
  radosgw ceph-mon ceph-osd ceph-common >/dev/null
echo "install-ceph: $(radosgw --version | head -n1)" >&2
