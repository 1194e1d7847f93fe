#!/usr/bin/env bash
# restore-tiers.sh - restore time from each tier after a node loss, beside the link's raw
# bandwidth and the raw reads (docs/BENCHMARKS.md, "Issue 31: restore"). Run by hand, as
# root, from the source tree after scripts/build:
#
#   [LINK=BPS] bench/restore-tiers.sh [BUILD [SIZE [RATE]]]
#
# BUILD: the build directory (default build); SIZE: the checkpoint's bytes (default 2GiB,
# two ranks, half each); RATE: the durable tier's read limit in bytes/s (default 200000000).
# LINK: the link's bandwidth in bytes/s, both ways (a tbf qdisc on each host's device:
# tc qdisc ... tbf rate BPSbps), for a link slower than this machine's cores can hash
# and its disk can write, as a cluster's is against its nodes' (default: the veth as it
# is, which on two vCPUs is faster than one core's SHA-256).
#
# Two hosts: network namespaces joined by a veth pair (tests/launch/netns_lib.sh, through
# tests/ckptd/replica_lib.sh, which the restore tests use), a ckptd on each with a local
# tier of its own, UCX on TCP (UCX_TLS=tcp: the bytes cross the veth as a cluster's
# network). The durable tier is a slow shared file system, emulated: an ext4 file system
# on a loop device, read by the restoring process in a blkio cgroup whose
# blkio.throttle.read_bps_device limits the loop device to RATE (cgroup v1, as Debian 12
# mounts it here; under a pure cgroup v2 machine io.max "MAJ:MIN rbps=RATE" is the same).
#   step-12, the newest, is only in the local tiers: n0 (host A) holds rank 0's file and
#   n1's replica of rank 1's (ckptctl peer put, across the veth); n1 (host B) its own.
#   step-8, as large, is only in the durable tier.
#   n1 is lost with its disk; n1' starts on host B with an empty local tier and restores
#   rank 1 through ckptd (tests/ckptd/tier_load: RESOLVE, FETCH, a load that checks every
#   block's SHA-256, timed before it compares with the saved data):
#     replicas: step-12, rank-00001.dat fetched from n0's replica across the veth;
#     durable:  step-8, read in place from the throttled durable tier.
# Beside them: the link's raw bandwidth (one TCP stream across the veth, Python sockets,
# 4 MiB sends), the raw local read (dd iflag=direct of the replica's file on the local
# disk), the raw local write as a fetch makes it (dd, then fsync; and O_DIRECT) and the
# throttled durable tier's raw read (dd iflag=direct in the cgroup). Every
# file is dropped from the page cache before it is read (dd iflag=nocache count=0; the
# durable file system is mounted again), so that reads reach the disk or the throttle.
# And SHA-256 on one core (openssl speed): a fetch checks every block as it arrives, and
# the load checks it again.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-build}" && pwd) || exit 2
SIZE=${2:-2GiB}
RATE=${3:-200000000}
[ "$(id -u)" = 0 ] || { echo "restore-tiers: needs root (namespaces, loop device, cgroup)"; exit 2; }
export CKPTD=$build/ckptd/ckptd CKPTCTL=$build/ckptd/ckptctl CKPT_SYNTH=$build/tools/ckpt-synth \
    CKPT_VERIFY=$build/tools/ckpt-verify CKPT_INSPECT=$build/tools/ckpt-inspect \
    COPY_PARTIAL=$build/tests/ckptd/copy_partial PEER_TOOL=$build/tests/ckptd/peer_tool \
    TIER_LOAD=$build/tests/ckptd/tier_load TEST_NAME=restore-tiers CMD_TIMEOUT=900
export TMPDIR=${TMPDIR:-/var/tmp}
. "$src/tests/ckptd/replica_lib.sh"
. "$src/tests/ckptd/tier_lib.sh"
. "$src/tests/launch/netns_lib.sh"
netns_hosts_up
LOOP= CG=
bench_cleanup() {
    mountpoint -q "$SHARED" && umount "$SHARED"
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    [ -n "$CG" ] && rmdir "$CG" 2>/dev/null
}
trap 'netns_cleanup; bench_cleanup; cleanup' EXIT

# The durable tier: ext4 on a loop device, its reads limited to RATE in cgroup CG.
mkdir -p "$SHARED"
truncate -s 12G "$WORK/durable.img" && mkfs.ext4 -q -F "$WORK/durable.img" ||
    fail "making the durable tier's file system"
LOOP=$(losetup -f --show "$WORK/durable.img") || fail "losetup"
mount "$LOOP" "$SHARED" || fail "mounting $LOOP"
CG=/sys/fs/cgroup/blkio/ckbench.$$
mkdir "$CG" || fail "no blkio cgroup (cgroup v1) to throttle the durable tier in"
echo "$(cat "/sys/block/$(basename "$LOOP")/dev") $RATE" >"$CG/blkio.throttle.read_bps_device" ||
    fail "setting blkio.throttle.read_bps_device"
# $WORK/throttled CMD...: CMD in the cgroup (a script: run's timeout execs it).
printf '#!/bin/sh\necho $$ >%s/cgroup.procs && exec "$@"\n' "$CG" >"$WORK/throttled"
chmod +x "$WORK/throttled"
uncache() { local f; for f in "$@"; do dd if="$f" iflag=nocache count=0 status=none; done; }
remount() { umount "$SHARED" && mount "$LOOP" "$SHARED" || fail "mounting the durable tier again"; }

echo "== checkpoints: $SIZE each, 2 ranks, 8 tensors, 4 MiB hash blocks"
for s in 8 12; do
    synth "$TRUTH" "step-$s" --mesh 2 --placements 'S(0)' --step "$s" --seed "$s" \
        --tensors 8 --bytes "$SIZE" --block-size 4MiB
done
cp -a "$TRUTH/step-8" "$SHARED/step-8" || fail "copying step-8 into the durable tier"
run "$CKPT_INSPECT" "$SHARED" --rebuild-catalog
expect 0 "the durable tier's catalog"
two_hosts 30
if [ -n "${LINK:-}" ]; then
    for h in "$A" "$B"; do
        dev=$(ip -n "$h" -o link show | awk -F': ' '$2 !~ /^lo/ { sub(/@.*/, "", $2); print $2; exit }')
        ip netns exec "$h" tc qdisc add dev "$dev" root tbf rate "${LINK}bps" burst 4mb \
            latency 100ms || fail "shaping $dev on $h to $LINK B/s"
    done
fi

echo "== node n1 lost with its disk; n1' restores rank 1"
LISTEN=${NETNS_ADDRS[1]} lose n1 30
replica=$WORK/n0.local/.replicas/n1/step-12/rank-00001.dat
uncache "$replica"
run "$WORK/on-$B" "$TIER_LOAD" "$WORK/n1.sock" "$SHARED" "$TRUTH" step- --newest --mesh 2 --rank 1
expect 0 "rank 1 restored from n0's replica"
said "^reads rank-00001.dat from $WORK/n1.local/.fetched/" "the file fetched across the veth"
from_replica=$(sed -n 's/^restored //p' "$OUT")
remount
run "$WORK/throttled" "$WORK/on-$B" "$TIER_LOAD" "$WORK/n1.sock" "$SHARED" "$TRUTH" step-8 --mesh 2 --rank 1
expect 0 "rank 1 restored from the durable tier"
said "^reads rank-00001.dat from $SHARED/step-8$" "the durable tier's file, in place"
from_durable=$(sed -n 's/^restored //p' "$OUT")

echo "== raw references"
rate() { sed -n 's/.* copied, \([0-9.]*\) s, \(.*\)$/\2 (\1 s)/p' "$OUT"; }
uncache "$replica"
run dd if="$replica" of=/dev/null bs=4M iflag=direct
local_read=$(rate)
remount
run "$WORK/throttled" dd if="$SHARED/step-8/rank-00001.dat" of=/dev/null bs=4M iflag=direct
durable_read=$(rate)
# A fetch commits its copy durably in the local tier: written, then fsynced.
count=$(( $(stat -c %s "$replica") >> 22 ))
run dd if=/dev/zero of="$WORK/n1.local/raw" bs=4M count="$count" conv=fsync
local_write=$(rate)
run dd if=/dev/zero of="$WORK/n1.local/raw" bs=4M count="$count" oflag=direct
local_direct=$(rate)
rm -f "$WORK/n1.local/raw"
link_bytes=$(stat -c %s "$replica")
"$WORK/on-$A" python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7599)); s.listen(1); c, _ = s.accept(); left = int(sys.argv[2])
while left > 0:
    b = c.recv(1 << 22)
    if not b: break
    left -= len(b)
c.sendall(b"k")' "${NETNS_ADDRS[0]}" "$link_bytes" &
srv=$!
sleep 1
run "$WORK/on-$B" python3 -c '
import socket, sys, time
n = int(sys.argv[2]); buf = bytes(4 << 20); s = socket.create_connection((sys.argv[1], 7599))
t = time.monotonic(); left = n
while left > 0:
    k = min(left, len(buf)); s.sendall(buf[:k]); left -= k
s.recv(1); dt = time.monotonic() - t
print("link: %d bytes in %.3f s, %.2f GB/s" % (n, dt, n / dt / 1e9))' "${NETNS_ADDRS[0]}" "$link_bytes"
link=$(sed -n 's/^link: //p' "$OUT")
wait "$srv"
# SHA-256 on one core: every block fetched is checked on arrival, and again when loaded.
sha=$(openssl speed -seconds 2 -bytes 4194304 sha256 2>/dev/null |
      awk '/^sha256/ { sub(/k$/, "", $2); printf "%.2f GB/s", $2 * 1000 / 1e9 }')
stop n0
stop n1
echo
echo "== Issue 31: restore of rank 1 ($(numfmt --to=iec "$link_bytes")) after the loss of its node"
echo "from the replica (veth${LINK:+ shaped to $LINK B/s}, UCX over TCP): $from_replica"
echo "from the durable tier (throttled to $RATE B/s): $from_durable"
echo "raw: link $link; local read $local_read; throttled durable read $durable_read;"
echo "     local write then fsync $local_write; local write O_DIRECT $local_direct;"
echo "     SHA-256 on one core $sha (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
