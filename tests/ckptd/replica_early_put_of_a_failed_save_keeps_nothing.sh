#!/usr/bin/env bash
# A replica's PUT begun beside the local write (decision 0204) of a save that then fails
# is given up, and leaves nothing on either node. Two ckptd on loopback, one durable
# root, --replicas 2 (a clique of both), level replicated: n1 begins sending its part
# to n0 as soon as it knows the clique, before its part is written. The coordinator n0
# is stopped (SIGSTOP) at that moment, before n1's part can be recorded, so the save
# can never commit: n1 takes n0 for dead after --dead-after and fails the save, which
# gives its early PUT up (its wait for n0 ends within a tenth of a second of the
# failure, not at the peer timeout). n0, resumed, hears the failure. Then: the callers
# hear it, with why; neither node holds a replica of the save, committed or pending;
# and the name saved again replicates whole.
. "$(dirname "$0")/replica_lib.sh"
pair --replicas 2 --peer-timeout 20 --part-timeout 30 --dead-after 2 --staging 160MiB

"$CKPT_SYNTH" "$SHARED" --name c --mesh 2 --tensors 3 --bytes 128MiB --world 2 \
    --daemon "$socks" --level replicated >"$WORK/save.out" 2>&1 &
saver=$!
# Polled every 10 ms: n1's part (64 MiB, staged, then written) is recorded long after.
begun="checkpoint c: its 1 data file\(s\) here go to 1 peer\(s\) of its clique"
for _ in $(seq 3000); do
    grep -qE "$begun" "$WORK/n1.log" && break
    sleep 0.01
done
kill -STOP "${PID[n0]}"
logged n1 "$begun" "n1 sends its part as it is written"
! grep -q "checkpoint c: copy committed" "$WORK/n0.log" "$WORK/n1.log" ||
    fail "a copy of c was committed before n0 stopped"
wait_log n1 "checkpoint c failed: .*coordinating engine n0 stopped beating" \
    "n1 fails the save without n0" 30
wait_log n1 "checkpoint c: its PUT begun beside the local write is given up: the save failed" \
    "n1 gives its early PUT up" 5
kill -CONT "${PID[n0]}"
for _ in $(seq 600); do kill -0 $saver 2>/dev/null || break; sleep 0.1; done
kill -0 $saver 2>/dev/null && fail "the save of c never ended"
wait $saver
rc=$?
sed 's/^/  save| /' "$WORK/save.out"
[ "$rc" -ne 0 ] || fail "the save of c succeeded without its coordinator"
grep -q "checkpoint c: the coordinating engine n0 stopped beating" "$WORK/save.out" ||
    fail "rank 1 was not told why the save failed"
wait_log n0 "checkpoint c failed" "n0 fails the save too" 30
# Nothing of c on either node: no replica, and no pending copy of one (n0's service,
# resumed, drops any PUT of c it had begun, as does n1's).
for _ in $(seq 100); do
    ls "$WORK"/n*.local/.replicas/*/.pending 2>/dev/null | grep -q '^c\.' || break
    sleep 0.1
done
for i in 0 1; do
    for src in 0 1; do
        [ ! -e "$WORK/n$i.local/.replicas/n$src/c" ] ||
            fail "n$i keeps a replica of n$src's part of the failed save"
        [ ! -d "$WORK/n$i.local/.replicas/n$src" ] || no_pending "$WORK/n$i.local/.replicas/n$src"
    done
done

echo "--- the name saved again replicates whole"
run "$CKPT_SYNTH" "$SHARED" --name c --mesh 2 --tensors 3 --bytes 12MiB --world 2 \
    --daemon "$socks" --level replicated
expect 0 "the save of c again"
said "rank 0: .*committed at level replicated$" "rank 0's level"
said "rank 1: .*committed at level replicated$" "rank 1's level"
run "$CKPT_VERIFY" "$WORK/n0.local/.replicas/n1" c --deep
expect 0 "n1's replica on n0 deep-verifies"
run "$CKPT_VERIFY" "$WORK/n1.local/.replicas/n0" c --deep
expect 0 "n0's replica on n1 deep-verifies"
for i in 0 1; do stop "n$i"; done
echo "PASS [$TEST_NAME]"
