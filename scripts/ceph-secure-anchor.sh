#!/usr/bin/env bash
# ceph-secure-anchor.sh: Ceph's own msgr2 secure mode against its crc mode
# for 1 MiB messages with one in flight, on this machine, as the anchor for
# issue 14's "secure 1 MiB at >= 0.7x crc" target.
#
# It starts a throwaway cephx cluster (mon.a and a memstore osd.0; no mgr,
# which rados bench does not need and whose Python modules would add load)
# in a temp dir on free loopback ports, accepting both modes everywhere
# ("secure crc"), and runs `rados bench -b 1048576 -t 1` as client.admin,
# choosing the mode per run on the client (ms_client_mode and
# ms_mon_client_mode; the server picks the first of the client's modes it
# allows, so the OSD connection is in that mode; verified with debug_ms in
# the log the script keeps). Secure and crc runs alternate, ROUNDS times:
# write (objects removed after each run), then seq and rand reads of a set
# written once (NOBJ objects, default 1200). Each run is printed as one
# line: ops per second, mean latency, and per op the OSD's CPU time and
# minor page faults (from /proc/PID/stat) and the client's (/usr/bin/time,
# less its start-up measured on a `rados stat`); then medians per mode and
# workload with the ratio secure/crc of the rates, and the load average.
#
# Usage: scripts/ceph-secure-anchor.sh [ROUNDS] [SECONDS]   (default 3, 8)
# Env: KEEP=1 keeps the temp dir; OUT=FILE also writes the runs and the
# summary there; MALLOC_KEEP=1 runs the daemons and the client with glibc
# malloc told to keep freed memory (MALLOC_MMAP_THRESHOLD_=32 MiB,
# MALLOC_TRIM_THRESHOLD_=4 GiB), so a 1 MiB buffer is not a fresh mapping
# (256 page faults) each time; HOLD=SECONDS pauses with the cluster up
# before the runs (for perf record -p on the OSD).
# Needs ceph-mon, ceph-osd, ceph-authtool, monmaptool, ceph and rados (Ceph
# 16.2.x). Daemons are stopped by PID on exit (SIGTERM, SIGKILL after 15 s);
# every wait is bounded.
set -euo pipefail

ROUNDS=${1:-3}
SECS=${2:-8}
for p in ceph-mon ceph-osd ceph-authtool monmaptool ceph rados timeout ss bc /usr/bin/time; do
	command -v "$p" >/dev/null || { echo "ceph-secure-anchor: $p not found" >&2; exit 2; }
done

if [[ ${MALLOC_KEEP:-} == 1 ]]; then
	export MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296
fi
T=$(mktemp -d /tmp/ceph-anchor.XXXXXX)
PIDS=()
cleanup() {
	local pid i
	for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do
		for ((i = 0; i < 150; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
	done
	if [[ ${KEEP:-} == 1 ]]; then echo "ceph-secure-anchor: kept $T" >&2; else rm -rf "$T"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# free_port prints a loopback TCP port nobody listens on, from 10000-32000
# (below the kernel's ephemeral range).
free_port() {
	local p i
	for ((i = 0; i < 100; i++)); do
		p=$((10000 + RANDOM % 22000))
		if ! ss -Hltn "sport = :$p" | grep -q .; then echo "$p"; return; fi
	done
	echo "ceph-secure-anchor: no free port" >&2; exit 1
}
MON2=$(free_port); MON1=$(free_port); BIND=$(free_port)
FSID=$(cat /proc/sys/kernel/random/uuid)
mkdir -p "$T/run" "$T/log" "$T/mon-a" "$T/osd-0"
MONHOST="[v2:127.0.0.1:$MON2,v1:127.0.0.1:$MON1]"
cat >"$T/ceph.conf" <<EOC
[global]
fsid = $FSID
mon host = $MONHOST
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind port min = $BIND
ms bind port max = $((BIND + 100))
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
mon warn on insecure global id reclaim allowed = false
ms mon client mode = secure crc
ms mon service mode = secure crc
ms mon cluster mode = secure crc
ms client mode = secure crc
ms service mode = secure crc
ms cluster mode = secure crc
mon data avail warn = 1
mon data avail crit = 0
mon warn on pool no redundancy = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
mon allow pool size one = true
run dir = $T/run
admin socket = $T/run/\$cluster-\$name.asok
log file = $T/log/\$cluster-\$name.log
mon cluster log file = $T/log/cluster.log
pid file = $T/run/\$cluster-\$name.pid
crash dir = $T/crash
[mon]
mon data = $T/mon-\$id
[osd]
osd data = $T/osd-\$id
keyring = $T/osd-\$id/keyring
osd objectstore = memstore
memstore device bytes = 4294967296
osd crush chooseleaf type = 0
[client]
keyring = $T/ceph.\$name.keyring
log file = $T/log/client.log
admin socket =
EOC
q() { "$@" >>"$T/log/setup.log" 2>&1; }
q ceph-authtool --create-keyring "$T/mkfs.keyring" --gen-key -n mon. --cap mon 'allow *'
q ceph-authtool --create-keyring "$T/ceph.client.admin.keyring" --gen-key -n client.admin \
	--cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *'
q ceph-authtool "$T/mkfs.keyring" --import-keyring "$T/ceph.client.admin.keyring"
q monmaptool --create --fsid "$FSID" --addv a "$MONHOST" "$T/monmap"
q timeout 60 ceph-mon -c "$T/ceph.conf" --mkfs -i a --monmap "$T/monmap" --keyring "$T/mkfs.keyring"
ceph-mon -c "$T/ceph.conf" -f -i a >"$T/log/mon.stdout" 2>&1 &
PIDS+=($!)
C=(timeout 30 ceph -c "$T/ceph.conf" -n client.admin)
for ((i = 0; ; i++)); do
	"${C[@]}" quorum_status >/dev/null 2>&1 && break
	((i < 60)) || { echo "ceph-secure-anchor: no quorum" >&2; tail "$T/log/ceph-mon.a.log" >&2; exit 1; }
	sleep 1
done
UUID=$(cat /proc/sys/kernel/random/uuid); SECRET=$(ceph-authtool --gen-print-key)
echo "{\"cephx_secret\": \"$SECRET\"}" >"$T/osd.json"
ID=$("${C[@]}" osd new "$UUID" -i "$T/osd.json")
[[ $ID == 0 ]] || { echo "ceph-secure-anchor: osd new gave $ID" >&2; exit 1; }
q ceph-authtool --create-keyring "$T/osd-0/keyring" --name osd.0 --add-key "$SECRET"
q timeout 60 ceph-osd -c "$T/ceph.conf" -i 0 --mkfs --osd-uuid "$UUID"
ceph-osd -c "$T/ceph.conf" -f -i 0 >"$T/log/osd.stdout" 2>&1 &
PIDS+=($!)
for ((i = 0; ; i++)); do
	[[ $("${C[@]}" osd stat -f json 2>/dev/null | grep -o '"num_up_osds":[0-9]*') == '"num_up_osds":1' ]] && break
	((i < 90)) || { echo "ceph-secure-anchor: osd not up" >&2; tail "$T/log/ceph-osd.0.log" >&2; exit 1; }
	sleep 1
done
q "${C[@]}" osd pool create bench 8 8
R=(rados -c "$T/ceph.conf" -n client.admin -p bench)
# Without a mgr `ceph pg stat` says nothing; a write that completes shows
# the PGs active.
for ((i = 0; ; i++)); do
	timeout 10 "${R[@]}" put probe "$T/ceph.conf" 2>/dev/null && break
	((i < 30)) || { echo "ceph-secure-anchor: pool not writable" >&2; exit 1; }
done

mode() { echo "--ms_client_mode=$1" "--ms_mon_client_mode=$1"; }

# Which mode the OSD connection used: one short run per mode at debug_ms 1,
# the client's log line for its session to osd.0 ("conn(... secure :-1
# s=READY ...).ready entity=osd.0").
for m in secure crc; do
	# shellcheck disable=SC2046
	timeout 60 "${R[@]}" $(mode $m) --debug_ms=1 --log_file="$T/log/check-$m.log" \
		bench 1 write -b 1048576 -t 1 --run-name check >/dev/null 2>&1 || true
	got=$(grep -m1 'ready entity=osd\.0' "$T/log/check-$m.log" | grep -o ' \(secure\|crc\) :' | tr -d ' :' || true)
	echo "# mode check: asked $m, osd.0 session in ${got:-(not logged)}"
	[[ $got == "$m" ]] || { echo "ceph-secure-anchor: mode $m not in effect" >&2; exit 1; }
done
# A set for the read runs, written once in crc mode: NOBJ objects, so seq
# reads do not run out of objects within SECS.
NOBJ=${NOBJ:-1200}
# shellcheck disable=SC2046
timeout 300 "${R[@]}" $(mode crc) bench 240 write -b 1048576 -t 1 --no-cleanup --max-objects "$NOBJ" \
	--run-name readset >"$T/log/readset.txt" 2>&1

if [[ -n ${HOLD:-} ]]; then
	echo "# holding the cluster ${HOLD}s: rados -c $T/ceph.conf -n client.admin -p bench; osd pid ${PIDS[1]}" >&2
	sleep "$HOLD" || true
fi
OSD=${PIDS[1]}
# osd_stat prints the OSD's CPU time (utime+stime, in clock ticks) and its
# minor page faults.
osd_stat() { awk '{print $14 + $15, $10}' "/proc/$OSD/stat"; }
TCK=$(getconf CLK_TCK)
# The client's own start-up and shutdown (CPU, page faults) in each mode,
# subtracted from each run's: a stat of one object over the same sessions.
declare -A BASECPU BASEFLT
for m in secure crc; do
	# shellcheck disable=SC2046
	read -r u sy f < <(/usr/bin/time -f '%U %S %R' "${R[@]}" $(mode $m) stat probe 2>&1 >/dev/null | tail -1)
	BASECPU[$m]=$(echo "($u + $sy) * 1000000" | bc -l); BASEFLT[$m]=$f
done
echo "# ceph-secure-anchor $(ceph-osd --version | awk '{print $3}'), ROUNDS=$ROUNDS SECS=$SECS MALLOC_KEEP=${MALLOC_KEEP:-0}, $(nproc) CPUs;" \
	"client start-up: secure ${BASECPU[secure]%.*} us CPU ${BASEFLT[secure]} faults, crc ${BASECPU[crc]%.*} us ${BASEFLT[crc]}"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# per op: rate (ops/s), mean latency, OSD CPU, OSD minor faults, client CPU and faults less start-up"
RES="$T/results.txt"
: >"$RES"
for ((r = 1; r <= ROUNDS; r++)); do
	for w in write seq rand; do
		for m in secure crc; do
			if [[ $w == write ]]; then args=(bench "$SECS" write -b 1048576 -t 1 --run-name "w$r$m"); else args=(bench "$SECS" "$w" -t 1 --run-name readset); fi
			read -r c0 f0 < <(osd_stat)
			# shellcheck disable=SC2046
			out=$(timeout $((SECS * 3 + 60)) /usr/bin/time -f 'CLIENT %U %S %R' "${R[@]}" $(mode $m) "${args[@]}" 2>&1) || { echo "$out" >&2; exit 1; }
			read -r c1 f1 < <(osd_stat)
			ops=$(awk -F: '/^Total (writes|reads) made/ {gsub(/ /, "", $2); print $2}' <<<"$out")
			secs=$(awk -F: '/^Total time run/ {gsub(/ /, "", $2); print $2}' <<<"$out")
			lat=$(awk -F: '/^Average Latency\(s\)/ {gsub(/ /, "", $2); print $2 * 1e6}' <<<"$out")
			read -r cu cs cf < <(awk '/^CLIENT/ {print $2, $3, $4}' <<<"$out")
			load=$(cut -d' ' -f1 /proc/loadavg)
			awk -v r="$r" -v w="$w" -v m="$m" -v ops="$ops" -v secs="$secs" -v lat="$lat" -v load="$load" \
				-v oc=$((c1 - c0)) -v of=$((f1 - f0)) -v tck="$TCK" -v cu="$cu" -v cs="$cs" -v cf="$cf" \
				-v bc="${BASECPU[$m]}" -v bf="${BASEFLT[$m]}" 'BEGIN {
				printf "round %d %-5s %-6s rate %7.1f /s  latency %6.0f us  osd cpu %5.0f us %4.0f faults  client cpu %5.0f us %4.0f faults  load %s\n",
					r, w, m, ops / secs, lat, oc * 1e6 / tck / ops, of / ops, ((cu + cs) * 1e6 - bc) / ops, (cf - bf) / ops, load
			}' | tee -a "$RES"
		done
	done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
med() { sort -n | awk '{a[NR] = $1} END {if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
col() { awk -v w="$1" -v m="$2" -v c="$3" '$3 == w && $4 == m {print $c}' "$RES" | med; }
for w in write seq rand; do
	printf 'median %-5s secure %7.1f /s %6.0f us (osd %5.0f, client %5.0f us CPU)  crc %7.1f /s %6.0f us (osd %5.0f, client %5.0f)  secure/crc %.2fx\n' \
		"$w" "$(col $w secure 6)" "$(col $w secure 9)" "$(col $w secure 13)" "$(col $w secure 19)" \
		"$(col $w crc 6)" "$(col $w crc 9)" "$(col $w crc 13)" "$(col $w crc 19)" \
		"$(echo "$(col $w secure 6) / $(col $w crc 6)" | bc -l)"
done | tee "$T/summary.txt"
if [[ -n ${OUT:-} ]]; then cat "$RES" "$T/summary.txt" >"$OUT"; fi
exit 0
