#!/usr/bin/env bash
# A clique peer lost during a tiered save (issue 31, part 2) leaves the save committed at
# level "local", said to the callers that asked for "replicated", never FAILED, never a
# hang, and never a replica that is not whole. Four ckptd on loopback, one durable root,
# --replicas 2 (cliques {n0, n1} and {n2, n3}), every wait bounded (--peer-timeout 2,
# --part-timeout 5).
#   1. n1 serves no peers (no --peer-listen): n0's copy cannot reach its clique. Every
#      rank hears level local, and why (n0's replica at ckptd n1); n1's part, whose peer
#      n0 is up, is replicated; n2 and n3 replicate each other.
#   2. n1 stops (SIGSTOP) as soon as its own copy is committed, in the middle of the
#      replication, and is killed once the callers have their answer: the ranks it does
#      not serve hear level local; n0 keeps no part of a replica of n1 that is not whole
#      (none, or a replica that deep-verifies), and no pending debris.
. "$(dirname "$0")/replica_lib.sh"
SHARED=$WORK/durable
mkdir -p "$SHARED"
opts=(--replicas 2 --peer-timeout 2 --part-timeout 5)
# plain ID: a daemon with a local tier and no peer service.
plain() {
    mkdir -p "$WORK/$1.local"
    "$CKPTD" --root "$SHARED" --id "$1" --local-root "$WORK/$1.local" --foreground \
        --log "$WORK/$1.log" --staging 64MiB --socket "$WORK/$1.sock" "${opts[@]}" &
    PID[$1]=$!
    for _ in $(seq 400); do [ -S "$WORK/$1.sock" ] && return 0; sleep 0.05; done
    fail "ckptd $1 did not start"
}
# settled ID NAME: waits (30 s at most) for daemon ID to say NAME's levels are final.
settled() {
    for _ in $(seq 600); do
        grep -q "checkpoint $2: final level" "$WORK/$1.log" && return 0
        sleep 0.05
    done
    fail "ckptd $1 never settled $2"
}
socks=$WORK/n0.sock,$WORK/n1.sock,$WORK/n2.sock,$WORK/n3.sock

echo "--- 1. a clique peer that serves no peers"
daemon n0 "${opts[@]}"
plain n1
daemon n2 "${opts[@]}"
daemon n3 "${opts[@]}"
run "$CKPT_SYNTH" "$SHARED" --name step-1 --mesh 4 --tensors 3 --bytes 12MiB --world 4 \
    --daemon "$socks" --level replicated
expect 0 "a save whose replication fails is committed"
for r in 0 1 2 3; do
    said "rank $r: .*committed at level local: not replicated: .*replica of step-1 (at|for) ckptd n1" \
        "rank $r hears level local and why"
done
for i in 0 1 2 3; do settled "n$i" step-1; done
logged n0 "checkpoint step-1: final level local: not replicated" "n0's final level"
[ -d "$WORK/n0.local/.replicas/n1/step-1" ] || fail "n1's part was not replicated on n0"
[ -d "$WORK/n3.local/.replicas/n2/step-1" ] && [ -d "$WORK/n2.local/.replicas/n3/step-1" ] ||
    fail "n2 and n3 did not replicate each other"
[ ! -e "$WORK/n1.local/.replicas" ] || fail "n1 keeps a replica though it serves no peers"
for i in 0 1 2 3; do stop "n$i"; done

echo "--- 2. a clique peer stopped mid-replication, then killed"
for i in 0 1 2 3; do daemon "n$i" "${opts[@]}"; done
"$CKPT_SYNTH" "$SHARED" --name step-2 --mesh 4 --tensors 3 --bytes 96MiB --world 4 \
    --daemon "$socks" --level replicated >"$WORK/save2.out" 2>&1 &
saver=$!
for _ in $(seq 2000); do
    grep -q "checkpoint step-2: copy committed" "$WORK/n1.log" && break
    sleep 0.005
done
kill -STOP "${PID[n1]}"
grep -q "checkpoint step-2: copy committed" "$WORK/n1.log" || fail "n1 never committed its copy"
for _ in $(seq 600); do
    [ "$(grep -c "committed at level" "$WORK/save2.out")" -ge 3 ] && break
    sleep 0.05
done
sed "s|$WORK|\$WORK|g; s/^/  | /" "$WORK/save2.out"
for r in 0 2 3; do
    grep -qE "rank $r: .*committed at level local: not replicated" "$WORK/save2.out" ||
        fail "rank $r did not hear level local with the reason"
done
crash n1
kill "$saver" 2>/dev/null
wait "$saver" 2>/dev/null
rep=$WORK/n0.local/.replicas/n1
if [ -e "$rep/step-2" ]; then
    run "$CKPT_VERIFY" "$rep" step-2 --deep
    expect 0 "the replica of n1's part that n0 kept is whole"
fi
for _ in $(seq 100); do [ -z "$(ls -A "$rep/.pending" 2>/dev/null)" ] && break; sleep 0.05; done
no_pending "$rep"
for i in 0 2 3; do stop "n$i"; done
echo "PASS [$TEST_NAME]"
