#!/usr/bin/env bash
# A save whose parts cannot all arrive ends with a clear error on every rank, not a
# hang. shard-train on two real hosts (network namespaces, tests/launch/netns_lib.sh),
# 2 x 2 ranks, embedded saves every 2 steps into one shared root, --ckpt-timeout 3.
# On host B, rank 3's storage hangs for step 4's part (stall_open.so: the open() of
# its file never returns). Then:
#  - the job ends (the test's bound is generous, and never asserted as a time);
#  - each of the 4 ranks prints the error naming step-00000004, rank 3 and host B;
#  - step-00000002 is committed and deep-verifies; step-00000004 is not visible, nor
#    anything but committed checkpoints, the catalog and .pending debris.
#   netns_part_stuck.sh SHARDRUN SHARD_TRAIN CKPT_VERIFY STALL_OPEN_SO
set -uo pipefail
shardrun=$1 train=$2 verify=$3 shim=$4
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../tests/launch/netns_lib.sh"
data=/usr/share/common-licenses/GPL-3
[ -r "$data" ] || { echo "skip: no corpus at $data (Debian's base-files)"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/var/tmp}/netns-stuck.XXXXXX")
cleanup() { netns_cleanup; rm -rf "$work"; }
trap cleanup EXIT
export NETNS_TIMEOUT=240 OPENBLAS_NUM_THREADS=1
netns_setup "$work"
A=${NETNS_HOSTS[0]} B=${NETNS_HOSTS[1]}

# The preloaded library is not the sanitizer's runtime: ASan builds must allow it.
netns_launch "$shardrun" 29441 2 "$work/run.log" env LD_PRELOAD="$shim" \
    STALL_OPEN='*/.pending/step-00000004.*/rank-00003.dat' \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
    "$train" --data "$data" --layers 1 --dim 32 --heads 2 --seq 32 --batch 8 --mesh 2x2 \
    --steps 40 --ckpt-root "$work/ck" --ckpt-every 2 --ckpt-timeout 3
netns_wait
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] ||
    { echo "FAILED: the job exited $rc (124: it hung until the test's bound)"; cat "$work"/run.log.*; exit 1; }
for r in 0 1 2 3; do
    grep -q "shard-train: rank $r: checkpoint step-00000004: rank 3 on host $B did not write its part within 3 s" "$work/run.log.0" ||
        { echo "FAILED: rank $r did not say that rank 3 on $B never wrote its part"; cat "$work"/run.log.*; exit 1; }
done
"$verify" --deep "$work/ck" step-00000002 >"$work/verify.log" 2>&1 ||
    { echo "FAILED: step-00000002 does not verify"; cat "$work/verify.log"; exit 1; }
for d in "$work"/ck/* "$work"/ck/.[!.]*; do
    case $(basename "$d") in
    catalog.mdb|catalog.mdb-lock|.pending|step-00000002) ;;
    *) echo "FAILED: unexpected $(basename "$d") in the root"; ls -la "$work/ck"; exit 1 ;;
    esac
done
echo "ok: a part that never arrived (rank 3 on $B, step 4) failed the save on all 4 ranks" \
     "with the error naming it; step-00000002 committed and verifies, nothing else visible"
grep -m1 "shard-train: rank 0:" "$work/run.log.0"
