#!/usr/bin/env bash
# Installs what the tests need beyond Go: ceph-mon and the ceph CLI (for the
# interoperability tests) and iproute2 (tc/ip, for fault injection).
# Does nothing if they are all already on PATH.
set -euo pipefail

if command -v ceph-mon >/dev/null 2>&1 && command -v ceph >/dev/null 2>&1 &&
	command -v ss >/dev/null 2>&1 && command -v ip >/dev/null 2>&1; then
	exit 0
fi

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	SUDO=sudo
fi

echo "install-deps: installing ceph-mon, ceph-common, iproute2" >&2
$SUDO apt-get update
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
	ceph-mon ceph-common iproute2

for p in ceph-mon ceph monmaptool ss ip; do
	if ! command -v "$p" >/dev/null 2>&1; then
		echo "install-deps: $p still not on PATH after install" >&2
		exit 1
	fi
done
