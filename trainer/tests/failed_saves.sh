#!/usr/bin/env bash
# A failed save never stops a training run that goes on, unless --max-failed-saves says
# so, and then every rank stops at the same step with the same error.
#   trains-on  2 ranks of shard-train save every 2 steps through ckptd (CKPTD_TIMEOUT=2);
#              after step 2 ckptd is sent SIGSTOP, and SIGCONT once two saves have
#              failed. The run reaches its last step and exits 0 on every rank; the
#              failures are logged, naming ckptd's socket and pid and the 2 s wait,
#              and counted; a save after SIGCONT commits and deep-verifies.
#   stops      the same run through a ckptd whose staging (4 KiB) no part fits, so that
#              every save fails: with --max-failed-saves 3 both ranks stop once the
#              third (step 6's) is known to have failed (a lazy save's failure shows at
#              the next step: no step 8), both exit non-zero saying the same error,
#              and nothing is committed.
# Times are printed, never asserted.
#   failed_saves.sh MODE SHARDRUN SHARD_TRAIN CKPTD CKPT_VERIFY
set -uo pipefail
mode=$1 shardrun=$2 train=$3 ckptd=$4 verify=$5
data=/usr/share/common-licenses/GPL-3
[ -r "$data" ] || { echo "skip: no corpus at $data (Debian's base-files)"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/var/tmp}/failed-saves.XXXXXX")
daemon= run=
cleanup() {
    [ -z "$daemon" ] || { kill -CONT "$daemon"; kill -9 "$daemon"; wait "$daemon"; } 2>/dev/null
    [ -z "$run" ] || { kill -9 "$run"; wait "$run"; } 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAILED: $*"; cat "$work"/run.log "$work"/status.* 2>/dev/null; echo "FAILED: $*"; exit 1; }
export OPENBLAS_NUM_THREADS=1 CKPTD_TIMEOUT=2
mkdir -p "$work/ck"
staging=512MiB
[ "$mode" = stops ] && staging=4KiB
"$ckptd" --root "$work/ck" --foreground --log "$work/ckptd.log" --staging "$staging" &
daemon=$!
for _ in $(seq 200); do [ -S "$work/ck/.ckptd.sock" ] && break; sleep 0.05; done
sock=$work/ck/.ckptd.sock
model=(--data "$data" --layers 2 --dim 64 --heads 4 --seq 64 --batch 8 --ckpt-root "$work/ck"
       --ckpt-every 2 --daemon "$sock")

# Each rank's exit status lands in status.RANK (the wrapper's own status says nothing).
launch() {
    "$shardrun" --nproc-per-node 2 bash -c '"$@"; echo $? >"'"$work"'/status.$RANK"' rank \
        "$train" "${model[@]}" "$@" >"$work/run.log" 2>&1 &
    run=$!
}
failures() { grep -c "training goes on" "$work/run.log" 2>/dev/null; }

t0=$(date +%s.%N)
if [ "$mode" = trains-on ]; then
    steps=120
    launch --steps $steps
    for _ in $(seq 1200); do grep -q "^step 2 " "$work/run.log" && break; sleep 0.05; done
    grep -q "^step 2 " "$work/run.log" || fail "no step 2"
    kill -STOP "$daemon"
    for _ in $(seq 1200); do [ "$(failures)" -ge 2 ] && break; sleep 0.05; done
    kill -CONT "$daemon"
    wait "$run"; run=
    echo "the run took $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s;" \
         "$(failures) save(s) failed while ckptd was stopped"
    [ "$(failures)" -ge 2 ] || fail "fewer than 2 failed saves were logged while ckptd was stopped"
    for r in 0 1; do [ "$(cat "$work/status.$r" 2>/dev/null)" = 0 ] || fail "rank $r did not exit 0"; done
    grep -q "^done: step $steps" "$work/run.log" || fail "the run did not reach step $steps"
    grep "training goes on" "$work/run.log" | grep -q "ckptd at $sock (pid $daemon).*2.0 s" ||
        fail "no failure names ckptd's socket, its pid $daemon and the 2 s wait"
    grep -q "save(s) failed, .* training went on" "$work/run.log" || fail "no count of the failed saves"
    last=$(printf 'step-%08d' $steps)
    "$verify" --deep "$work/ck" "$last" >/dev/null || fail "$last, saved after SIGCONT, does not verify"
    grep -m2 "training goes on" "$work/run.log"
else
    launch --steps 20 --max-failed-saves 3
    wait "$run"; run=
    for r in 0 1; do
        s=$(cat "$work/status.$r" 2>/dev/null)
        [ -n "$s" ] && [ "$s" != 0 ] || fail "rank $r exited '${s:-(killed)}', not an error of its own"
    done
    said=$(sed -n 's/^shard-train: rank [01]: \(checkpoint step-00000006 failed: .*\)/\1/p' "$work/run.log" | sort | uniq -c)
    [ "$(echo "$said" | wc -l)" -eq 1 ] && [ "$(echo "$said" | awk '{ print $1 }')" -eq 2 ] ||
        fail "the 2 ranks did not both stop on step 6's save with one error: $said"
    echo "$said" | grep -q "3 saves in a row failed: --max-failed-saves 3" || fail "the error does not say why the run stopped"
    [ "$(failures)" -eq 2 ] || fail "$(failures) failed saves logged as going on, expected 2"
    grep -q "^step 8 " "$work/run.log" && fail "a step ran after the third failed save"
    ls "$work/ck" | grep -q '^step-' && fail "a checkpoint is visible"
    echo "$said"
fi
kill "$daemon"; wait "$daemon" || fail "ckptd did not stop cleanly"; daemon=
echo "ok: $mode"
