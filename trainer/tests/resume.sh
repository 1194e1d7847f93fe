#!/usr/bin/env bash
# Resume tests of shard-train, through shardrun (real MPI ranks).
#   resume.sh MODE SHARDRUN SHARD_TRAIN CKPT_CONSOLIDATE CKPTD CKPT_VERIFY
# MODE:
#   kill9-same-mesh   20 steps straight vs 10 steps, SIGKILL of every rank, resume to 20
#                     on the same 2x2 mesh: the losses of steps 11-20 are identical
#   kill9-daemon      the same, saving through a ckptd process
#   two-daemons       the same through two ckptd on one root (ids A and B, ranks 0-1 at A,
#                     2-3 at B: a wrapper picks CKPTD_SOCKET by OMPI_COMM_WORLD_RANK, as
#                     each node's ranks would find their node's daemon); step 10 passes
#                     ckpt-verify --deep and equals the one-daemon save of step 10
#   across-meshes     4 ranks 2x2 to step 10, 2 ranks 1x2 to 15, 3 ranks (1-D) to 20:
#                     every loss within 1e-5 relative of the straight 2x2 run
#   lazy-equals-copy  2 ranks, 12 steps: without checkpoints, with a lazy save every 3
#                     steps (the default mode) and with a copying one: the same
#                     losses, and every checkpoint of the lazy run bit for bit the one
#                     of the copying run (a lazy copy never sees a stepped optimizer)
#   keep-last-owns-its-names
#                     2 ranks save steps 2 and 4; copies of step 4 named best-model
#                     and step-00000004-2x8 (a reshard's default name) are planted;
#                     resumed to step 8 with --keep-last 2: it resumes from step 4,
#                     keeps steps 6 and 8 and never touches the two foreign names
#   consolidate       a trained checkpoint through ckpt-consolidate to safetensors,
#                     loaded into a 1-rank model: the same loss on a fixed batch as
#                     the checkpoint loaded directly on 1 and on 3 ranks
set -euo pipefail
mode=$1 shardrun=$2 train=$3 consolidate=$4 ckptd=$5 verify=${6:-}
data=/usr/share/common-licenses/GPL-3
[ -r "$data" ] || { echo "skip: no corpus at $data (Debian's base-files)"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/var/tmp}/trainer-test.XXXXXX")
daemon_pid=
cleanup() {
    for p in $daemon_pid; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    rm -rf "$work"
}
trap cleanup EXIT
export OPENBLAS_NUM_THREADS=1
model=(--data "$data" --layers 2 --dim 32 --heads 2 --seq 32 --batch 12 --lr 3e-3 --warmup 4)

run() {   # run NPROC LOG ARGS...: a training run; its log; fails unless it exits 0
    local n=$1 log=$2; shift 2
    "$shardrun" --nproc-per-node "$n" "$train" "${model[@]}" "$@" >"$log" 2>&1 || {
        echo "FAILED: $n ranks: $*"; cat "$log"; exit 1; }
}
losses() { awk '$1 == "step" && $3 == "loss" { print $2, $4 }' "$@"; }

save=()
if [ "$mode" = kill9-daemon ]; then
    [ -x "$ckptd" ] || { echo "skip: ckptd is not built"; exit 77; }
    mkdir -p "$work/ck"
    "$ckptd" --root "$work/ck" --foreground --log "$work/ckptd.log" &
    daemon_pid=$!
    for _ in $(seq 100); do [ -S "$work/ck/.ckptd.sock" ] && break; sleep 0.05; done
    save=(--daemon "$work/ck/.ckptd.sock")
    mode=kill9-same-mesh
fi
if [ "$mode" = two-daemons ]; then
    [ -x "$ckptd" ] && [ -x "$verify" ] || { echo "skip: ckptd or ckpt-verify is not built"; exit 77; }
    mkdir -p "$work/ck" "$work/one"
    for id in A B; do
        "$ckptd" --root "$work/ck" --id $id --socket "$work/$id.sock" --foreground \
            --log "$work/ckptd-$id.log" &
        daemon_pid="$daemon_pid $!"
    done
    "$ckptd" --root "$work/one" --id one --socket "$work/one.sock" --foreground \
        --log "$work/ckptd-one.log" &
    daemon_pid="$daemon_pid $!"
    for s in A B one; do
        for _ in $(seq 100); do [ -S "$work/$s.sock" ] && break; sleep 0.05; done
    done
    # Ranks 0-1 are node A's, 2-3 node B's: each talks to its own node's ckptd.
    printf '%s\n' '#!/bin/sh' \
        'if [ "${OMPI_COMM_WORLD_RANK:-0}" -lt 2 ]; then s=A; else s=B; fi' \
        "CKPTD_NODES=2 CKPTD_SOCKET=$work/\$s.sock exec \"\$@\"" >"$work/node-socket"
    chmod +x "$work/node-socket"
    run 4 "$work/straight.log" --mesh 2x2 --steps 20
    CKPTD_SOCKET="$work/one.sock" run 4 "$work/one.log" --mesh 2x2 --steps 10 --schedule-steps 20 \
        --ckpt-root "$work/one" --ckpt-every 10
    "$shardrun" --nproc-per-node 4 "$work/node-socket" "$train" "${model[@]}" --mesh 2x2 --steps 20 \
        --ckpt-root "$work/ck" --ckpt-every 10 --kill-at-step 10 >"$work/killed.log" 2>&1 &&
        { echo "FAILED: the run was not killed"; cat "$work/killed.log"; exit 1; }
    grep -q "kill-at-step 10: saved step-00000010" "$work/killed.log" ||
        { echo "FAILED: no committed step 10 before the kill"; cat "$work/killed.log" "$work"/ckptd-*.log; exit 1; }
    grep -q "coordinating 2 daemons" "$work/ckptd-A.log" && grep -q "joined daemon A" "$work/ckptd-B.log" ||
        { echo "FAILED: step 10 did not go through both daemons"; cat "$work"/ckptd-*.log; exit 1; }
    "$verify" --deep "$work/ck" step-00000010 >"$work/verify.log" 2>&1 &&
        "$verify" "$work/ck" step-00000010 --against "$work/one/step-00000010" >>"$work/verify.log" 2>&1 ||
        { echo "FAILED: step 10 of two daemons does not verify or differs from one daemon's"; cat "$work/verify.log"; exit 1; }
    "$shardrun" --nproc-per-node 4 "$work/node-socket" "$train" "${model[@]}" --mesh 2x2 --steps 20 \
        --ckpt-root "$work/ck" --ckpt-every 10 --resume >"$work/resumed.log" 2>&1 ||
        { echo "FAILED: the resume through two daemons"; cat "$work/resumed.log"; exit 1; }
    grep -q "resumed from step-00000010" "$work/resumed.log" && [ -d "$work/ck/step-00000020" ] ||
        { echo "FAILED: did not resume from step 10 and save step 20"; cat "$work/resumed.log"; exit 1; }
    losses "$work/straight.log" | awk '$1 > 10' >"$work/want"
    losses "$work/resumed.log" >"$work/got"
    diff -u "$work/want" "$work/got" ||
        { echo "FAILED: steps 11-20 after the resume differ from the straight run"; exit 1; }
    echo "ok: two daemons on one root: step 10 verifies and equals one daemon's; steps 11-20" \
         "identical after kill -9 and resume"
    exit 0
fi

case $mode in
kill9-same-mesh)
    run 4 "$work/straight.log" --mesh 2x2 --steps 20
    # The run dies by SIGKILL after step 10 (its checkpoint committed): mpirun fails.
    "$shardrun" --nproc-per-node 4 "$train" "${model[@]}" --mesh 2x2 --steps 20 \
        --ckpt-root "$work/ck" --ckpt-every 10 --kill-at-step 10 "${save[@]}" >"$work/killed.log" 2>&1 &&
        { echo "FAILED: the run was not killed"; cat "$work/killed.log"; exit 1; }
    grep -q "kill-at-step 10: saved step-00000010" "$work/killed.log" ||
        { echo "FAILED: no committed step 10 before the kill"; cat "$work/killed.log"; exit 1; }
    run 4 "$work/resumed.log" --mesh 2x2 --steps 20 --ckpt-root "$work/ck" --ckpt-every 10 --resume \
        "${save[@]}"
    grep -q "resumed from step-00000010" "$work/resumed.log" ||
        { echo "FAILED: did not resume from step 10"; cat "$work/resumed.log"; exit 1; }
    losses "$work/straight.log" | awk '$1 > 10' >"$work/want"
    losses "$work/resumed.log" >"$work/got"
    [ "$(wc -l <"$work/want")" -eq 10 ] || { echo "FAILED: straight run log"; exit 1; }
    if ! diff -u "$work/want" "$work/got"; then
        echo "FAILED: steps 11-20 after the resume differ from the straight run"; exit 1
    fi
    echo "ok: steps 11-20 identical after kill -9 and resume on 2x2 ${save[*]}"
    ;;
across-meshes)
    run 4 "$work/straight.log" --mesh 2x2 --steps 20
    common=(--ckpt-root "$work/ck" --ckpt-every 5 --schedule-steps 20)
    run 4 "$work/a.log" --mesh 2x2 --steps 10 "${common[@]}"
    run 2 "$work/b.log" --mesh 1x2 --steps 15 "${common[@]}" --resume
    run 3 "$work/c.log" --mesh 3 --steps 20 "${common[@]}" --resume
    grep -q "saved on mesh 2x2, loaded onto mesh 1x2" "$work/b.log" &&
        grep -q "saved on mesh 1x2, loaded onto mesh 3" "$work/c.log" ||
        { echo "FAILED: the resumes did not cross meshes"; cat "$work/b.log" "$work/c.log"; exit 1; }
    losses "$work/straight.log" >"$work/want"
    losses "$work/a.log" "$work/b.log" "$work/c.log" >"$work/got"
    paste "$work/want" "$work/got" | awk '
        { n++; if ($1 != $3) { print "FAILED: step order", $1, $3; bad = 1; next }
          rel = ($2 - $4) / $2; if (rel < 0) rel = -rel; if (rel > worst) worst = rel
          if (rel > 1e-5) { printf "FAILED: step %d: %s vs straight %s (%.2e)\n", $1, $4, $2, rel; bad = 1 } }
        END { if (n != 20) { print "FAILED: " n " steps logged"; bad = 1 }
              if (!bad) printf "ok: 2x2 -> 1x2 -> 3 within %.2e relative of the straight run\n", worst
              exit bad }'
    ;;
lazy-equals-copy)
    run 2 "$work/none.log" --steps 12
    run 2 "$work/lazy.log" --steps 12 --ckpt-root "$work/ck-lazy" --ckpt-every 3
    run 2 "$work/copy.log" --steps 12 --ckpt-root "$work/ck-copy" --ckpt-every 3 --ckpt-mode copy
    for m in lazy copy; do
        [ "$(grep -c ' saved step-' "$work/$m.log")" -ge 3 ] ||
            { echo "FAILED: the $m run did not save"; cat "$work/$m.log"; exit 1; }
    done
    losses "$work/none.log" >"$work/want"
    [ "$(wc -l <"$work/want")" -eq 12 ] || { echo "FAILED: the run without saves"; exit 1; }
    for m in lazy copy; do
        losses "$work/$m.log" >"$work/got-$m"
        diff -u "$work/want" "$work/got-$m" ||
            { echo "FAILED: the losses with $m saves differ from those without saves"; exit 1; }
    done
    [ -x "$verify" ] || { echo "skip: ckpt-verify is not built"; exit 77; }
    for s in 3 6 9 12; do
        name=$(printf 'step-%08d' "$s")
        "$verify" "$work/ck-lazy" "$name" --against "$work/ck-copy/$name" >"$work/cmp.log" 2>&1 ||
            { echo "FAILED: $name saved lazily differs from $name copied"; cat "$work/cmp.log"; exit 1; }
    done
    echo "ok: 12 losses identical without saves, with lazy and with copying saves; the lazy" \
         "checkpoints of steps 3, 6, 9, 12 bit for bit the copied ones"
    ;;
keep-last-owns-its-names)
    run 2 "$work/a.log" --steps 4 --schedule-steps 8 --ckpt-root "$work/ck" --ckpt-every 2
    for n in best-model step-00000004-2x8; do cp -a "$work/ck/step-00000004" "$work/ck/$n"; done
    run 2 "$work/b.log" --steps 8 --schedule-steps 8 --ckpt-root "$work/ck" --ckpt-every 2 \
        --keep-last 2 --resume
    grep -q "resumed from step-00000004" "$work/b.log" ||
        { echo "FAILED: did not resume from step 4"; cat "$work/b.log"; exit 1; }
    got=$(cd "$work/ck" && ls -d step-* best-model | tr '\n' ' ')
    [ "$got" = "best-model step-00000004-2x8 step-00000006 step-00000008 " ] ||
        { echo "FAILED: --keep-last 2 left: $got"; exit 1; }
    echo "ok: --keep-last 2 kept steps 6 and 8 and left best-model and step-00000004-2x8"
    ;;
consolidate)
    [ -x "$consolidate" ] || { echo "skip: ckpt-consolidate is not built"; exit 77; }
    run 4 "$work/train.log" --mesh 2x2 --steps 8 --ckpt-root "$work/ck"
    "$consolidate" "$work/ck" step-00000008 -o "$work/st" >"$work/cons.log" 2>&1 ||
        { echo "FAILED: ckpt-consolidate"; cat "$work/cons.log"; exit 1; }
    run 1 "$work/e1.log" --eval --safetensors "$work/st/model.safetensors"
    run 1 "$work/e2.log" --eval --resume --ckpt-root "$work/ck"
    run 3 "$work/e3.log" --eval --resume --ckpt-root "$work/ck"
    st=$(awk '$1 == "eval" { print $3 }' "$work/e1.log")
    ck1=$(awk '$1 == "eval" { print $3 }' "$work/e2.log")
    ck3=$(awk '$1 == "eval" { print $3 }' "$work/e3.log")
    echo "eval loss: safetensors $st, checkpoint on 1 rank $ck1, on 3 ranks $ck3"
    [ -n "$st" ] && [ "$st" = "$ck1" ] || { echo "FAILED: safetensors and checkpoint differ"; exit 1; }
    awk -v a="$st" -v b="$ck3" 'BEGIN { r = (a - b) / a; if (r < 0) r = -r; exit r > 1e-6 }' ||
        { echo "FAILED: 3 ranks differ by more than 1e-6"; exit 1; }
    echo "ok: consolidated safetensors give the checkpoint's loss"
    ;;
*)
    echo "usage: resume.sh kill9-same-mesh|kill9-daemon|two-daemons|across-meshes|lazy-equals-copy|keep-last-owns-its-names|consolidate SHARDRUN SHARD_TRAIN CONSOLIDATE CKPTD [CKPT_VERIFY]"
    exit 2 ;;
esac
