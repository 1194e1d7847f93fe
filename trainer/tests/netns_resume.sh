#!/usr/bin/env bash
# shard-train across two real hosts (network namespaces, tests/launch/netns_lib.sh),
# killed and resumed on one host, with the losses of a straight run.
#   netns_resume.sh MODE SHARDRUN SHARD_TRAIN CKPT_VERIFY [CKPTD]
# MODE:
#   embedded  every rank writes its own file into the one shared root, rank 0 commits
#   ckptd     one ckptd per host on the same root (--id node0, node1; each host's
#             ranks reach their own: CKPTD_SOCKET with %n, CKPTD_NODES 2 from
#             shardrun); node0's daemon commits, node1's writes host B's parts
# 1. straight: 2 hosts x 2 ranks (mesh 2x2), 50 steps, no checkpoints;
# 2. killed: the same run saving every 5 steps, SIGKILL to node 0's shardrun once a
#    checkpoint is committed (mid-training: the run must not have ended);
# 3. resumed: 1 host x 2 ranks (mesh 1x2) from the newest committed checkpoint to step
#    50: every loss after it within 1e-5 relative of the straight run, and every
#    committed checkpoint deep-verifies.
set -uo pipefail
mode=$1 shardrun=$2 train=$3 verify=$4 ckptd=${5:-}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../tests/launch/netns_lib.sh"
data=/usr/share/common-licenses/GPL-3
[ -r "$data" ] || { echo "skip: no corpus at $data (Debian's base-files)"; exit 77; }
export NETNS_TIMEOUT=240 OPENBLAS_NUM_THREADS=1
netns_start resume
steps=${NETNS_STEPS:-50}
model=(--data "$data" --layers 2 --dim 64 --heads 4 --seq 64 --batch 16 --lr 3e-3 --warmup 4
       --steps "$steps")
losses() { awk '$1 == "step" && $3 == "loss" { print $2, $4 }' "$@"; }
committed() { find "$work/ck" -mindepth 1 -maxdepth 1 -name 'step-*' 2>/dev/null | sort; }

case $mode in
embedded) ;;
ckptd)
    [ -x "$ckptd" ] || { echo "skip: ckptd is not built"; exit 77; }
    mkdir -p "$work/ck"
    # One daemon per host, each with its own socket and staging, on the one root.
    netns_ckptd 0 "$ckptd" "$work/ck" "$work"
    netns_ckptd 1 "$ckptd" "$work/ck" "$work"
    export CKPTD_SOCKET="$work/ckptd-%n.sock"
    ;;
*) echo "usage: netns_resume.sh embedded|ckptd SHARDRUN SHARD_TRAIN CKPT_VERIFY [CKPTD]"; exit 2 ;;
esac

netns_launch "$shardrun" 29431 2 "$work/straight.log" "$train" "${model[@]}" --mesh 2x2
netns_wait || { echo "FAILED: the straight run"; cat "$work"/straight.log.*; exit 1; }

netns_launch "$shardrun" 29432 2 "$work/killed.log" "$train" "${model[@]}" --mesh 2x2 \
    --ckpt-root "$work/ck" --ckpt-every 5
for _ in $(seq 1200); do [ -n "$(committed)" ] && break; sleep 0.1; done
[ -n "$(committed)" ] || { echo "FAILED: no checkpoint within 120 s"; cat "$work"/killed.log.*; exit 1; }
master=
for p in $(netns_alive "$A"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = shardrun ] && master=$p
done
[ -n "$master" ] || { echo "FAILED: the run ended before it could be killed"; exit 1; }
kill -9 "$master"
netns_wait && { echo "FAILED: the killed run exited 0"; cat "$work"/killed.log.*; exit 1; }
grep -q "^done:" "$work/killed.log.0" &&
    { echo "FAILED: the run ended before it was killed"; exit 1; }
killed_at=$(losses "$work/killed.log.0" | tail -1 | cut -d' ' -f1)

if [ "$mode" = ckptd ]; then
    grep -q "checkpoint step-[0-9]*: joined daemon node0's save" "$work/ckptd-1.log" &&
        grep -q "committed by daemon node0: 2 ranks written here" "$work/ckptd-1.log" ||
        { echo "FAILED: host B's daemon did not write its ranks' parts"; cat "$work/ckptd-1.log"; exit 1; }
fi

# Resumed on host A alone, 2 ranks: no second node, no rendezvous.
netns_on "$A" "$shardrun" --nproc-per-node 2 "$train" "${model[@]}" --mesh 1x2 \
    --ckpt-root "$work/ck" --resume --ckpt-every 50 >"$work/resumed.log" 2>&1 ||
    { echo "FAILED: the resumed run"; cat "$work/resumed.log"; exit 1; }
from=$(sed -n 's/.*resumed from step-0*\([0-9]*\).*/\1/p' "$work/resumed.log" | head -1)
[ -n "$from" ] && grep -q "saved on mesh 2x2, loaded onto mesh 1x2" "$work/resumed.log" ||
    { echo "FAILED: did not resume across meshes"; cat "$work/resumed.log"; exit 1; }
losses "$work/straight.log.0" | awk -v f="$from" '$1 > f' >"$work/want"
losses "$work/resumed.log" >"$work/got"
paste "$work/want" "$work/got" | awk -v n="$((steps - from))" -v from="$from" -v mode="$mode" -v at="$killed_at" '
    { k++; if ($1 != $3) { print "FAILED: step order", $1, $3; bad = 1; next }
      rel = ($2 - $4) / $2; if (rel < 0) rel = -rel; if (rel > worst) worst = rel
      if (rel > 1e-5) { printf "FAILED: step %d: %s vs straight %s (%.2e)\n", $1, $4, $2, rel; bad = 1 } }
    END { if (k != n || n < 1) { print "FAILED: " k " steps compared, wanted " n; bad = 1 }
          if (!bad) printf "ok (%s): 2 hosts x 2 ranks killed at step %s, after step-%08d committed; resumed on 1 host x 2 ranks: steps %d-%d within %.2e relative of the straight run\n", mode, at, from, from + 1, from + n, worst
          exit bad }' || { cat "$work/resumed.log"; exit 1; }
for d in $(committed); do
    "$verify" --deep "$work/ck" "$(basename "$d")" >/dev/null ||
        { echo "FAILED: $(basename "$d") does not deep-verify"; exit 1; }
done
echo "$(committed | wc -l) committed checkpoints deep-verify"
