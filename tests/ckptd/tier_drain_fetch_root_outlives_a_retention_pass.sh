#!/usr/bin/env bash
# A drain's fetch keeps the root it fetches into while a retention pass runs (issue 31;
# the failure of CI at stop 33 and again at stop 34's first run). A drain fetches the
# data files its node lacks into a new root LOCAL/.fetched/N, which stays empty until
# the GET's copy begins; retention drops fetched roots left empty, and a pass runs
# after every commit, on another thread. So a commit during that window took the root
# away, and the drain failed ("LOCAL/.fetched/N: the checkpoint root: No such file or
# directory"). Here the window is made long: the holder of the other part (peer_tool
# serve-slow, as daemon n1, which refuses to write a part of a drain, so that n0 drains
# alone and fetches, decision 0197) answers the drain's GET 8 s late, and meanwhile a save
# through n0 commits and its retention pass runs. The root must still be there, and
# the drain must commit a whole copy in the durable root.
. "$(dirname "$0")/replica_lib.sh"
SHARED=$WORK/durable
TRUTH=$WORK/truth
mkdir -p "$SHARED" "$TRUTH"
run "$CKPT_SYNTH" "$TRUTH" --name s1 --mesh 2 --tensors 2 --bytes 8MiB
expect 0 "s1"
for i in 0 1; do
    mkdir -p "$WORK/n$i.local"
    run "$COPY_PARTIAL" "$TRUTH" s1 "$WORK/n$i.local" "n$i" "rank-0000$i.dat"
    expect 0 "n$i's own part of s1"
done
"$PEER_TOOL" serve-slow "$SHARED" n1 "$WORK/n1.local" 8 >"$WORK/slow.out" 2>&1 &
PID[slow]=$!
for _ in $(seq 200); do grep -q "^serving" "$WORK/slow.out" && break; sleep 0.05; done
grep -q "^serving" "$WORK/slow.out" || fail "the slow holder did not start: $(cat "$WORK/slow.out")"
daemon n0 --peer-timeout 20

run "$CKPTCTL" drain --socket "$WORK/n0.sock" s1
expect 0 "asking n0 to drain s1"
for _ in $(seq 200); do grep -q "^answering a GET" "$WORK/slow.out" && break; sleep 0.05; done
grep -q "^answering a GET" "$WORK/slow.out" || fail "the drain did not ask n1 for its part"
fetched=$(ls -d "$WORK"/n0.local/.fetched/* 2>/dev/null | head -1)
[ -n "$fetched" ] || fail "the drain made no fetched root"

passes=$(grep -c "retention: pass done" "$WORK/n0.log")
run "$CKPT_SYNTH" "$SHARED" --name x1 --mesh 1 --tensors 1 --bytes 64KiB --world 1 \
    --daemon "$WORK/n0.sock"
expect 0 "a save through n0 while the drain waits on n1"
for _ in $(seq 100); do
    [ "$(grep -c "retention: pass done" "$WORK/n0.log")" -gt "$passes" ] && break
    sleep 0.05
done
[ "$(grep -c "retention: pass done" "$WORK/n0.log")" -gt "$passes" ] ||
    fail "no retention pass ran after the save's commit"
grep -q "drain of s1: committed" "$WORK/n0.log" &&
    fail "the drain ended before the retention pass: the window was not tested"
[ -d "$fetched" ] || fail "the retention pass removed $fetched, which the drain's fetch was to fill"

for _ in $(seq 300); do grep -q "drain of s1: committed" "$WORK/n0.log" && break; sleep 0.05; done
logged n0 "drain of s1: committed in the durable root" "the drain, once n1 answered"
run "$CKPT_VERIFY" "$SHARED" s1 --deep
expect 0 "the durable copy of s1 deep-verifies"
kill "${PID[slow]}"
wait "${PID[slow]}" 2>/dev/null
unset "PID[slow]"
stop n0
echo "PASS [$TEST_NAME]"
