#!/usr/bin/env bash
# Retention never removes a checkpoint being restored (decision 0183): n0 keeps the 2
# newest checkpoints of its local tier (--keep-local 2) and holds step-8 and step-12.
#   - a loader restores step-8 through n0 (RESOLVE and FETCH pin it) and stays
#     connected, as one still reading;
#   - step-16 arrives and a commit through n0 runs a pass: step-8 is past the 2 newest
#     but kept, the log saying it is being read;
#   - the loader disconnects; a commit's pass after the daemon saw it go removes step-8.
. "$(dirname "$0")/replica_lib.sh"
SHARED=$WORK/durable
TRUTH=$WORK/truth
for s in 8 12 16; do
    synth "$TRUTH" "step-$s" --mesh 2 --placements 'S(0)' --step "$s" --seed "$s"
done
mkdir -p "$SHARED" "$WORK/n0.local"
# own STEP: n0's copy of TRUTH's step-STEP, every data file.
own() {
    run "$COPY_PARTIAL" "$TRUTH" "step-$1" "$WORK/n0.local" n0 rank-00000.dat rank-00001.dat
    expect 0 "n0's copy of step-$1"
}
own 8
own 12
daemon n0 --keep-local 2
# passes N: waits for N retention passes in n0's log.
passes() {
    for _ in $(seq 200); do
        [ "$(grep -c 'retention: pass done' "$WORK/n0.log")" -ge "$1" ] && return 0
        sleep 0.05
    done
    fail "ckptd n0 did only $(grep -c 'retention: pass done' "$WORK/n0.log") of $1 retention passes"
}
# commit NAME: a save committed through n0 (into its local tier, at step 0, older than
# the steps it keeps), which runs a pass.
commit() {
    run "$CKPT_SYNTH" "$SHARED" --name "$1" --mesh 2 --tensors 2 --bytes 1MiB --world 2 \
        --daemon "$WORK/n0.sock"
    expect 0 "$1 saved through n0"
}
passes 1
"$TIER_LOAD" "$WORK/n0.sock" "$SHARED" "$TRUTH" step-8 --hold "$WORK/release" >"$WORK/load.txt" 2>&1 &
loader=$!
for _ in $(seq 400); do
    grep -q '^holding' "$WORK/load.txt" && break
    kill -0 "$loader" 2>/dev/null || break
    sleep 0.05
done
grep -q '^rank 0: 3 tensors equal to the saved data' "$WORK/load.txt" ||
    { cat "$WORK/load.txt"; fail "the loader did not restore step-8"; }
own 16
commit x-1
passes 2
[ -d "$WORK/n0.local/step-8" ] || fail "retention removed step-8 while it was being read"
logged n0 "retention: keeps step-8 in $WORK/n0.local \(.*\): it is being read" "the pin, said"
touch "$WORK/release"
wait "$loader" || fail "the loader failed: $(cat "$WORK/load.txt")"
# The daemon drops the loader's pins once it has seen the loader's connection close, on
# its event loop: a commit that comes first may still find step-8 pinned, so up to
# three commits are made, each followed by its pass.
gone="retention: removed step-8 \(step 8\) from $WORK/n0.local"
for k in 2 3 4; do
    commit "x-$k"
    passes $((k + 1))
    grep -qE "$gone" "$WORK/n0.log" && break
done
[ ! -e "$WORK/n0.local/step-8" ] || fail "step-8 stays once nobody reads it"
[ -d "$WORK/n0.local/step-12" ] && [ -d "$WORK/n0.local/step-16" ] || fail "the 2 newest went"
logged n0 "$gone" "the removal after the reader left"
stop n0
echo "PASS [$TEST_NAME]"
