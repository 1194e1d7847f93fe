#!/usr/bin/env bash
# tier-stall - the training stall with tiers on and off (issue 31): the GPT trainer
# (shard-train) on a 2x2 mesh of 4 ranks, one ckptd per rank on loopback (node ni
# serves rank i, CKPTD_NODES=4, as on four nodes), saving every EVERY steps, four ways:
#   none        no checkpoints: the step time without any
#   durable     the daemons without local tiers: today's save into the durable root
#   local       --local-root, --replicas 2: each save committed in the local tiers
#   replicated  the same, the ranks waiting for level replicated
# Each run prints, from rank 0's log, over the saves after the first: the median stall
# (ck_client_submit: the copy into staging), the median fence (what the next step's
# optimizer waited for the save to let go of the parameters), and the median step
# time over every step after the first two, beside the run without checkpoints. One
# run of each way, in turn, RUNS times. MODE=copy (env) saves with --ckpt-mode copy (the
# stall is the copy of every shard into staging); the default, lazy, copies during the
# next forward and backward (the stall is near nothing, and the fence what is left).
#   [MODE=lazy|copy] bench/tier-stall.sh [BUILDDIR] [RUNS] [DIM] [STEPS] [EVERY]
set -uo pipefail
b=$(realpath "${1:-build}")
runs=${2:-2}
dim=${3:-256}
steps=${4:-24}
every=${5:-2}
mode=${MODE:-lazy}
data=/usr/share/common-licenses/GPL-3
work=$(mktemp -d "${TMPDIR:-/var/tmp}/tier-stall.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    rm -rf "$work"
}
trap cleanup EXIT
export OPENBLAS_NUM_THREADS=1 UCX_TLS=tcp OMPI_MCA_rmaps_base_oversubscribe=1
model=(--data "$data" --layers 4 --dim "$dim" --heads 4 --seq 64 --batch 8 --lr 3e-3
       --warmup 4 --mesh 2x2 --steps "$steps" --log-every 1 --ckpt-mode "$mode")
printf '%s\n' '#!/bin/sh' \
    "CKPTD_NODES=4 CKPTD_SOCKET=$work/n\${OMPI_COMM_WORLD_RANK:-0}.sock exec \"\$@\"" \
    >"$work/node-socket"
chmod +x "$work/node-socket"

# daemons plain|tiered: four ckptd on one durable root, fresh.
daemons() {
    local i extra
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    pids=()
    rm -rf "$work/ck" "$work"/n?.local
    mkdir -p "$work/ck"
    for i in 0 1 2 3; do
        extra=()
        [ "$1" = plain ] || { mkdir -p "$work/n$i.local"
            extra=(--local-root "$work/n$i.local" --peer-listen 127.0.0.1:0 --replicas 2); }
        "$b/ckptd/ckptd" --root "$work/ck" --id "n$i" --socket "$work/n$i.sock" "${extra[@]}" \
            --foreground --log "$work/n$i.log" &
        pids+=($!)
    done
    for i in 0 1 2 3; do
        for _ in $(seq 200); do [ -S "$work/n$i.sock" ] && break; sleep 0.05; done
    done
}

# median: of the numbers on stdin.
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'; }

# run WAY [shard-train options]: one run; prints its line.
run() {
    local way=$1 log=$work/$1.log
    shift
    if ! "$b/tools/shardrun" --nproc-per-node 4 "$work/node-socket" "$b/trainer/shard-train" \
            "${model[@]}" "$@" >"$log" 2>&1; then
        echo "$way: the run failed:"; tail -5 "$log"; return 1
    fi
    local stall fence step
    stall=$(awk '$1 == "step" && $2 > '"$every"' && $2 % '"$every"' == 0 {
                 for (i = 1; i < NF; i++) if ($i == "stall_ms") print $(i + 1) }' "$log" | median)
    fence=$(awk '$1 == "step" && $2 > '"$every"' + 1 && ($2 - 1) % '"$every"' == 0 {
                 for (i = 1; i < NF; i++) if ($i == "fence_ms") print $(i + 1) }' "$log" | median)
    step=$(awk '$1 == "step" && $2 > 2 { for (i = 1; i < NF; i++) if ($i == "tok/s") print $(i + 1) }' \
               "$log" | median)
    printf '%-11s stall %8s ms   fence %8s ms   %8s tok/s (median)\n' "$way" "$stall" "$fence" "$step"
}

echo "tier-stall: shard-train 2x2, 4 ranks, 4 ckptd on loopback, dim $dim, 4 layers," \
     "save every $every steps ($mode), $steps steps"
for r in $(seq "$runs"); do
    echo "-- run $r"
    daemons plain
    run none
    run durable --ckpt-root "$work/ck" --ckpt-every "$every"
    daemons tiered
    run local --ckpt-root "$work/ck" --ckpt-every "$every" --commit-level local
    daemons tiered
    run replicated --ckpt-root "$work/ck" --ckpt-every "$every" --commit-level replicated
done
ls -d "$work"/n0.local/step-* >/dev/null 2>&1 &&
    echo "a save: $(du -scb "$work"/n?.local/$(ls "$work/n0.local" | grep '^step-' | tail -1) |
                    tail -1 | cut -f1) bytes (the four nodes' own copies of the last)"
