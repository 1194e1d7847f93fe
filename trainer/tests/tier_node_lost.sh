#!/usr/bin/env bash
# A node lost under a tiered save (issue 31): four ckptd on loopback (n0..n3), each with
# a local tier, one durable root, --replicas 2 (cliques {n0, n1}, {n2, n3}); shard-train
# on a 2x2 mesh, rank r saving through node nr's daemon (a wrapper picks CKPTD_SOCKET by
# rank, as each node's ranks find their node's daemon), every 2 steps at commit level
# replicated, every 4th replicated save drained to the durable root (--drain-every 4:
# step 8), killed (SIGKILL) after step 10. Then node n1 is lost: its daemon killed, its
# local tier deleted, and a replacement n1 starts on an empty disk. The run resumes
# through the daemons from step 10, the newest checkpoint (newer than the newest
# durable one, step 8; nothing of step 10 is in the durable root), rank 1's part
# fetched from n0's replica, and steps 11-14 have exactly the losses of an
# uninterrupted run.
#   tier_node_lost.sh SHARDRUN SHARD_TRAIN CKPTD
set -euo pipefail
shardrun=$1 train=$2 ckptd=$3
data=/usr/share/common-licenses/GPL-3
[ -r "$data" ] || { echo "skip: no corpus at $data (Debian's base-files)"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/var/tmp}/tier-node-lost.XXXXXX")
declare -A pid
cleanup() {
    for p in "${pid[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    rm -rf "$work"
}
trap cleanup EXIT
export OPENBLAS_NUM_THREADS=1 UCX_TLS=tcp
model=(--data "$data" --layers 2 --dim 32 --heads 2 --seq 32 --batch 12 --lr 3e-3 --warmup 4)
losses() { awk '$1 == "step" && $3 == "loss" { print $2, $4 }' "$@"; }
fail() { echo "FAILED: $*"; for f in "$work"/*.log; do echo "== $f"; tail -20 "$f"; done; exit 1; }

daemon() {   # daemon I: ckptd nI, its local tier, its peer service
    rm -f "$work/ck/.ckptd.n$1.peer"
    mkdir -p "$work/n$1.local"
    "$ckptd" --root "$work/ck" --id "n$1" --local-root "$work/n$1.local" \
        --peer-listen 127.0.0.1:0 --socket "$work/n$1.sock" --replicas 2 --peer-timeout 10 \
        --drain-every 4 --part-timeout 60 --foreground --log "$work/ckptd-n$1.log" &
    pid[n$1]=$!
    for _ in $(seq 200); do [ -s "$work/ck/.ckptd.n$1.peer" ] && return 0; sleep 0.05; done
    fail "ckptd n$1 did not start"
}
mkdir -p "$work/ck"
for i in 0 1 2 3; do daemon "$i"; done
printf '%s\n' '#!/bin/sh' \
    "CKPTD_NODES=4 CKPTD_SOCKET=$work/n\${OMPI_COMM_WORLD_RANK:-0}.sock exec \"\$@\"" \
    >"$work/node-socket"
chmod +x "$work/node-socket"

"$shardrun" --nproc-per-node 4 "$train" "${model[@]}" --mesh 2x2 --steps 14 \
    >"$work/straight.log" 2>&1 || fail "the straight run"
"$shardrun" --nproc-per-node 4 "$work/node-socket" "$train" "${model[@]}" --mesh 2x2 \
    --steps 14 --ckpt-root "$work/ck" --ckpt-every 2 --commit-level replicated \
    --kill-at-step 10 >"$work/killed.log" 2>&1 && fail "the run was not killed"
grep -q "kill-at-step 10: saved step-00000010" "$work/killed.log" || fail "no step 10 before the kill"
# The drain runs in the background, on the node whose copy holds the first data file.
for _ in $(seq 300); do [ -e "$work/ck/step-00000008" ] && break; sleep 0.1; done
[ -e "$work/ck/step-00000008" ] || fail "step 8, the 4th replicated save, was not drained"
grep -q "drain of step-00000008: committed in the durable root" "$work"/ckptd-n*.log ||
    fail "no daemon says it drained step 8"
for s in 00000002 00000004 00000006 00000010; do
    [ ! -e "$work/ck/step-$s" ] || fail "step-$s reached the durable root"
done
[ -d "$work/n0.local/.replicas/n1/step-00000010" ] || fail "n1's part of step 10 is not on n0"

kill -9 "${pid[n1]}"
wait "${pid[n1]}" 2>/dev/null || true
unset "pid[n1]"
rm -rf "$work/n1.local"
daemon 1

"$shardrun" --nproc-per-node 4 "$work/node-socket" "$train" "${model[@]}" --mesh 2x2 \
    --steps 14 --ckpt-root "$work/ck" --ckpt-every 2 --commit-level replicated --resume \
    >"$work/resumed.log" 2>&1 || fail "the resume after n1 was lost"
grep -q "resumed from step-00000010" "$work/resumed.log" || fail "did not resume from step 10"
grep -q "FETCH of step-00000010: .*from the copy of ckptd n1 at ckptd n0" "$work/ckptd-n1.log" ||
    fail "the replacement n1 did not fetch its part from n0's replica"
losses "$work/straight.log" | awk '$1 > 10' >"$work/want"
losses "$work/resumed.log" >"$work/got"
[ "$(wc -l <"$work/want")" -eq 4 ] || fail "the straight run's log"
diff -u "$work/want" "$work/got" || fail "steps 11-14 after the node loss differ from the straight run"
echo "ok: step 8 drained; n1 lost with its disk after step 10; resumed from the replicas," \
     "steps 11-14 identical"
