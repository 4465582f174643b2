#!/usr/bin/env bash
# Installs what the tests need beyond Go: ceph-mon, ceph-osd, ceph-mgr and
# the ceph CLI with its tools (ceph-common: ceph, ceph-authtool,
# monmaptool, rados), for the interoperability tests against a throwaway
# cephx cluster, iproute2 (tc/ip/ss, for fault injection) and librsvg2-bin
# (rsvg-convert: the plot tests render ferry bench's SVG to PNG).
# Works on a fresh Debian 12 with only Go and apt. Does nothing if
# everything is already on PATH.
set -euo pipefail

progs="ceph-mon ceph-osd ceph-mgr ceph ceph-authtool monmaptool ss ip rsvg-convert"

missing=
for p in $progs; do
	command -v "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -z "$missing" ]; then
	exit 0
fi

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	SUDO=sudo
fi

echo "install-deps: missing:$missing; installing ceph-mon, ceph-osd, ceph-mgr, ceph-common, iproute2, librsvg2-bin" >&2
$SUDO apt-get update
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
	ceph-mon ceph-osd ceph-mgr ceph-common iproute2 librsvg2-bin

for p in $progs; do
	if ! command -v "$p" >/dev/null 2>&1; then
		echo "install-deps: $p still not on PATH after install" >&2
		exit 1
	fi
done
