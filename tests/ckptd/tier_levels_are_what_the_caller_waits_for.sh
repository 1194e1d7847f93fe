#!/usr/bin/env bash
# The commit level a caller waits for (issue 31; decision 0175) is what it gets:
#   1. without --local-root, every level is today's save: committed in the durable root,
#      said as level durable;
#   2. one ckptd with a local tier: a save commits a complete copy in it (no NAME/copy),
#      level local; a caller that asks for durable returns once the drain committed a
#      complete copy in the durable root (decision 0176), there when it returns;
#   3. four ckptd, --replicas 2: a caller that asks for "replicated" returns only once
#      every replica is committed: looked at the moment the caller returns, with no
#      wait, each node's part is whole (deep-verified) on both nodes of its clique;
#   4. the same four, level durable: every rank hears durable once one node drained
#      the save (whatever --drain-every), and the durable copy is whole when it returns;
#   5. a drain that cannot commit (the durable root holds another save of the name)
#      leaves the save at replicated, every rank told why, exit 0: never "failed".
. "$(dirname "$0")/replica_lib.sh"

echo "--- 1. no local tier: durable, as always"
mkdir -p "$WORK/plain"
"$CKPTD" --root "$WORK/plain" --id p --foreground --log "$WORK/p.log" --staging 64MiB \
    --socket "$WORK/p.sock" &
PID[p]=$!
for _ in $(seq 400); do [ -S "$WORK/p.sock" ] && break; sleep 0.05; done
run "$CKPT_SYNTH" "$WORK/plain" --name s1 --mesh 2 --tensors 2 --bytes 1MiB --world 2 \
    --daemon "$WORK/p.sock" --level local
expect 0 "a save through a daemon without a local tier"
said "rank 0: .*committed at level durable$" "the level of today's save"
[ -f "$WORK/plain/s1/manifest.mdb" ] && [ ! -e "$WORK/plain/s1/copy" ] ||
    fail "s1 is not a complete checkpoint in the root"
stop p

echo "--- 2. one daemon, a local tier"
SHARED=$WORK/durable
mkdir -p "$SHARED"
daemon solo
run "$CKPT_SYNTH" "$SHARED" --name s2 --mesh 2 --tensors 2 --bytes 1MiB --world 2 \
    --daemon "$WORK/solo.sock"
expect 0 "a save into the local tier"
said "rank 1: .*committed at level local$" "the default level with a local tier"
[ -f "$WORK/solo.local/s2/manifest.mdb" ] && [ ! -e "$WORK/solo.local/s2/copy" ] ||
    fail "s2 is not a complete copy in the local tier"
[ ! -e "$SHARED/s2" ] || fail "s2 reached the durable root"
run "$CKPT_VERIFY" "$WORK/solo.local" s2 --deep
expect 0 "the local copy deep-verifies"
run "$CKPT_SYNTH" "$SHARED" --name s3 --mesh 2 --tensors 2 --bytes 1MiB --world 2 \
    --daemon "$WORK/solo.sock" --level durable
expect 0 "a save at level durable through one daemon with a local tier"
for r in 0 1; do said "rank $r: .*committed at level durable$" "rank $r's level"; done
[ -f "$SHARED/s3/manifest.mdb" ] && [ ! -e "$SHARED/s3/copy" ] ||
    fail "s3 is not a complete checkpoint in the durable root when the caller returned"
run "$CKPT_VERIFY" "$SHARED" s3 --deep
expect 0 "the durable copy deep-verifies"
stop solo

echo "--- 3. replicated: the replicas are there when the caller returns"
for i in 0 1 2 3; do daemon "n$i" --replicas 2 --peer-timeout 5 --part-timeout 30; done
run "$CKPT_SYNTH" "$SHARED" --name s4 --mesh 4 --tensors 3 --bytes 24MiB --world 4 \
    --daemon "$WORK/n0.sock,$WORK/n1.sock,$WORK/n2.sock,$WORK/n3.sock" --level replicated
expect 0 "the save at level replicated"
for r in 0 1 2 3; do said "rank $r: .*committed at level replicated$" "rank $r's level"; done
for i in 0 1 2 3; do
    p=$(( i ^ 1 ))      # F = 2, J = 1: cliques {n0, n1}, {n2, n3}
    [ -f "$WORK/n$p.local/.replicas/n$i/s4/rank-0000$i.dat" ] ||
        fail "n$i's part is not yet replicated on n$p when the caller returned"
done
for i in 0 1 2 3; do
    p=$(( i ^ 1 ))
    run "$CKPT_VERIFY" "$WORK/n$p.local/.replicas/n$i" s4 --deep
    expect 0 "n$p's replica of n$i's part deep-verifies"
done

echo "--- 4. durable: drained by one node, heard by every rank"
run "$CKPT_SYNTH" "$SHARED" --name s5 --mesh 4 --tensors 3 --bytes 8MiB --world 4 \
    --daemon "$WORK/n0.sock,$WORK/n1.sock,$WORK/n2.sock,$WORK/n3.sock" --level durable
expect 0 "the save at level durable"
for r in 0 1 2 3; do said "rank $r: .*committed at level durable$" "rank $r's level"; done
[ -f "$SHARED/s5/manifest.mdb" ] && [ ! -e "$SHARED/s5/copy" ] ||
    fail "s5 is not a complete checkpoint in the durable root when the caller returned"
run "$CKPT_VERIFY" "$SHARED" s5 --deep
expect 0 "the durable copy of s5 deep-verifies"
n=$(grep -l "drain of s5: committed in the durable root" "$WORK"/n?.log | wc -l)
[ "$n" -eq 1 ] || fail "s5 was drained by $n daemons, not one"

echo "--- 5. a drain that fails leaves the save replicated, said"
run "$CKPT_SYNTH" "$SHARED" --name s6 --mesh 2 --tensors 1 --bytes 1MiB --world 2
expect 0 "another save of s6, straight into the durable root"
run "$CKPT_SYNTH" "$SHARED" --name s6 --mesh 4 --tensors 3 --bytes 8MiB --world 4 \
    --daemon "$WORK/n0.sock,$WORK/n1.sock,$WORK/n2.sock,$WORK/n3.sock" --level durable
expect 0 "a save whose drain fails is no failed save"
for r in 0 1 2 3; do
    said "rank $r: .*committed at level replicated.*not durable: .*another save of s6" \
        "rank $r's level and why"
done
for i in 0 1 2 3; do stop "n$i"; done
echo "PASS [$TEST_NAME]"
