#!/usr/bin/env bash
# Prefetching changes when all-gathers run, never what they compute: shard-train on a
# 2x2 mesh (HSDP: reduce-scatters and replica all-reduces) for 10 steps, with the
# implicit prefetch and with --no-prefetch, prints the same losses to the last digit.
#   prefetch_changes_no_bits.sh SHARDRUN SHARD_TRAIN
set -euo pipefail
shardrun=$1 train=$2
data=/usr/share/common-licenses/GPL-3
[ -r "$data" ] || { echo "skip: no corpus at $data (Debian's base-files)"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/var/tmp}/trainer-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1
model=(--data "$data" --layers 3 --dim 32 --heads 2 --seq 32 --batch 12 --lr 3e-3
       --warmup 4 --steps 10 --mesh 2x2)
for p in prefetch no-prefetch; do
    flag=()
    [ "$p" = no-prefetch ] && flag=(--no-prefetch)
    "$shardrun" --nproc-per-node 4 "$train" "${model[@]}" "${flag[@]}" >"$work/$p.log" 2>&1 ||
        { echo "FAILED: the run with $p"; cat "$work/$p.log"; exit 1; }
    awk '$1 == "step" && $3 == "loss" { print $2, $4 }' "$work/$p.log" >"$work/$p.losses"
done
[ "$(wc -l <"$work/prefetch.losses")" -eq 10 ] ||
    { echo "FAILED: expected 10 losses"; cat "$work/prefetch.log"; exit 1; }
diff -u "$work/prefetch.losses" "$work/no-prefetch.losses" ||
    { echo "FAILED: the losses differ with and without prefetching"; exit 1; }
echo "ok: 10 losses identical with and without prefetching on a 2x2 mesh"
