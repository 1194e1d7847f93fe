#!/usr/bin/env bash
# Saves that outrun their drains, with a small local tier (decision 0195): four ckptd
# on loopback, one durable root, --replicas 2 (cliques {n0, n1}, {n2, n3}),
# --drain-every 1, drains paced at 2 MiB/s (a 16 MiB save drains in about 8 s),
# --keep-local 1. Four saves at level replicated, back to back, while the first drains:
#   - step-1's drain runs from n0, which fetches n2's and n3's parts from them: every
#     node keeps its copies of step-1 beyond K while the drain is owed ("retention:
#     keeps step-1 ...: a drain to the durable tier is owed it, or stood by for"), and
#     the drain commits; no drain fails for a copy retention took;
#   - a newer save supersedes the drain still queued: it is done, not drained, and said
#     ("superseded by ..."); the nodes that stood by for it let it go (they hold at most
#     the oldest and the newest drain of a drainer beyond K);
#   - the last save, superseded by none, is drained; step-1 and step-4 deep-verify in
#     the durable root, and the superseded ones are not in it;
#   - once the drains ended, every local tier holds the copies of step-4 alone (K = 1).
# No wall-clock time is asserted: which save was drained, and why, is in the logs.
. "$(dirname "$0")/replica_lib.sh"
SHARED=$WORK/durable
mkdir -p "$SHARED"
socks=$WORK/n0.sock,$WORK/n1.sock,$WORK/n2.sock,$WORK/n3.sock
for i in 0 1 2 3; do
    daemon "n$i" --replicas 2 --drain-every 1 --drain-rate 2MiB --keep-local 1 \
        --peer-timeout 5 --dead-after 5
done

save() {
    run "$CKPT_SYNTH" "$SHARED" --name "$1" --mesh 4 --tensors 2 --bytes 16MiB --world 4 \
        --daemon "$socks" --level replicated --step "${1#step-}" --seed "${1#step-}"
    expect 0 "the save of $1"
    said "rank 3: .*committed at level replicated" "$1 is replicated"
}
save step-1
wait_log n0 "drain of step-1 to the durable root: started" "n0 drains step-1"
for s in 2 3 4; do
    save "step-$s"
done
wait_log n0 "drain of step-4: committed in the durable root" "n0 drains the last save" 120

# The first drain was owed its copies on every node while saves went past K.
wait_log n0 "drain of step-1: committed in the durable root" "n0 drains step-1"
for i in 0 1 2 3; do
    logged "n$i" "retention: keeps step-1 in .*: a drain to the durable tier is owed it, or stood by for" \
        "n$i keeps step-1 beyond K while its drain is owed"
done
! grep -hE "drain of [^ ]* failed: " "$WORK"/n?.log || fail "a drain failed"
grep -h "not drained: superseded by" "$WORK/n0.log" || fail "no queued drain was superseded"
# What was superseded is let go where it was stood by for: no daemon stands by for it.
for name in $(sed -n 's/.*drain of \(step-[0-9]*\): not drained: superseded by.*/\1/p' "$WORK/n0.log"); do
    [ ! -e "$SHARED/$name" ] || fail "$name, superseded, is in the durable root"
    for i in 1 2 3; do
        for _ in $(seq 100); do
            run "$CKPTCTL" drain --socket "$WORK/n$i.sock"
            grep -q "^$name: standing by" "$OUT" || break
            sleep 0.2
        done
        ! grep -q "^$name: standing by" "$OUT" || fail "n$i still stands by for the superseded $name"
    done
done
for name in step-1 step-4; do
    run "$CKPT_VERIFY" "$SHARED" "$name" --deep
    expect 0 "the durable $name deep-verifies"
    [ ! -e "$SHARED/$name/copy" ] || fail "the durable $name is a partial copy"
done
# K = 1 once nothing is owed: every local tier holds step-4's copies alone.
for i in 0 1 2 3; do
    for _ in $(seq 100); do
        left=$(cd "$WORK/n$i.local" && find . -mindepth 1 -maxdepth 3 -type d -name 'step-*' |
               grep -v '/step-4$' || true)
        [ -z "$left" ] && break
        sleep 0.2
    done
    [ -z "$left" ] || fail "n$i's local tier holds more than step-4 once the drains ended: $left"
    [ -d "$WORK/n$i.local/step-4" ] || fail "n$i lost its own copy of step-4"
done
for i in 0 1 2 3; do
    stop "n$i"
done
echo "PASS [$TEST_NAME]"
