#!/usr/bin/env bash
# A peer that dies or stops answering mid-transfer (issue 31) fails the transfer within
# its bound and leaves no copy: only the pending directory of a receiver that died
# itself, which its restart's recovery removes.
#   1. a PUT's sender killed after its first acknowledgement: the receiver fails the
#      PUT at once (UCX reports the peer gone), removes what it wrote;
#   2. a PUT's sender stopped (SIGSTOP): the receiver fails it after --peer-timeout;
#   3. the receiver killed mid-PUT: its pending copy is debris; restarting it removes it;
#   4. a GET's sender (the service) killed mid-GET: the requester fails at once;
#   5. a GET's sender stopped: the requester fails after its own timeout.
# The copy is bigger than a window (8 MiB: replica_lib.sh's daemons state the least)
# and a chunk, so "mid-transfer" is certain.
# No wall-clock time is asserted: the messages say which bound ended the wait, and the
# test's own timeouts catch a wait that has none.
. "$(dirname "$0")/replica_lib.sh"

synth "$WORK/src" c1 --bytes 48MiB
mkdir -p "$WORK/A.local" "$WORK/C.local"
run "$COPY_PARTIAL" "$WORK/src" c1 "$WORK/A.local" A rank-00000.dat rank-00002.dat
expect 0 "making A's part of c1 (24 MiB)"
daemon B --peer-timeout 2
replicas=$WORK/B.local/.replicas/A

echo "--- 1. the sender of a PUT killed"
run "$PEER_TOOL" put "$(addr B)" "$WORK/A.local" c1 A kill
expect 137 "the sender killed itself"
wait_log B "PUT of c1 failed: .*(connection|send) failed.*nothing of it is kept" "a dead sender"
[ ! -e "$replicas/c1" ] && no_pending "$replicas"

echo "--- 2. the sender of a PUT stopped"
"$PEER_TOOL" put "$(addr B)" "$WORK/A.local" c1 A stop >"$WORK/stopped.out" 2>&1 &
sender=$!
wait_log B "silent for 2 s \(--peer-timeout\): PUT of c1;" "a stopped sender"
kill -9 "$sender"
wait "$sender" 2>/dev/null
[ ! -e "$replicas/c1" ] && no_pending "$replicas"

echo "--- 3. the receiver killed mid-PUT"
"$PEER_TOOL" put "$(addr B)" "$WORK/A.local" c1 A stop >"$WORK/stopped3.out" 2>&1 &
sender=$!
for _ in $(seq 300); do
    grep -q "acting: stop" "$WORK/stopped3.out" && break
    sleep 0.1
done
grep -q "acting: stop" "$WORK/stopped3.out" || fail "the sender never got its first ACK"
crash B
debris=$(ls -A "$replicas/.pending")
[ -n "$debris" ] || fail "a receiver killed mid-PUT left no pending copy (was it mid-PUT?)"
echo "debris of the killed receiver: $debris"
kill -9 "$sender"
wait "$sender" 2>/dev/null
daemon B --peer-timeout 2
logged B "removed incomplete save $replicas/.pending/c1\." "recovery at restart"
[ ! -e "$replicas/c1" ] && no_pending "$replicas"

echo "--- 4. the service killed mid-GET"
run "$CKPTCTL" peer put --to B --root "$WORK/B.durable" --id A --from "$WORK/A.local" c1
expect 0 "a whole PUT, for the GETs to read"
run "$PEER_TOOL" get "$(addr B)" "$WORK/C.local" c1 "${PID[B]}" kill --all
expect 1 "a GET from a service killed mid-way"
said "acting: kill" "the GET was under way"
said "error: peer .*: (the connection|a send) failed" "the requester's error"
unset "PID[B]"
[ ! -e "$WORK/C.local/c1" ] && no_pending "$WORK/C.local"

echo "--- 5. the service stopped mid-GET"
daemon B --peer-timeout 2
PEER_TOOL_TIMEOUT=2 run "$PEER_TOOL" get "$(addr B)" "$WORK/C.local" c1 "${PID[B]}" stop --all
expect 1 "a GET from a service stopped mid-way"
said "said nothing for 2 s while this call waited for DATA" "the requester's timeout"
[ ! -e "$WORK/C.local/c1" ] && no_pending "$WORK/C.local"
kill -CONT "${PID[B]}"
run "$CKPTCTL" peer get --to B --root "$WORK/B.durable" --into "$WORK/C.local" c1 --all
expect 0 "the same GET once the service runs again"
run "$CKPT_VERIFY" "$WORK/C.local" c1 --deep
expect 0 "the fetched copy"
stop B
echo "PASS [$TEST_NAME]"
