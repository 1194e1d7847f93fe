#!/usr/bin/env bash
# A PUT to several peers reads the copy once and sends each chunk to all of them
# (decision 0201; the replication of a clique of three, and ckptctl peer put --to B,C):
#   1. c3 PUT to C alone, then c2 (the same size) to B and C at once: both replicas of
#      c2 commit and deep-verify, their files A's byte for byte; ckptctl's block reads
#      (getrusage of the child) for the two peers stay under 1.5x the copy, where the
#      one PUT read at least the copy (checked where this machine counts reads; a
#      tmpfs counts none, and the test says so);
#      A put that names a daemon with no published address (--to B,Z) sends nothing,
#      exits 2 and names Z;
#   2. c4 to B and to a fake peer M that takes the stream and never acknowledges any
#      of it (peer_tool serve-mute), with --timeout 4: M holds B's lane back, so M is
#      given up at half the timeout (2 s), named; B's replica still commits and
#      deep-verifies, B never gives its PUT up, and ckptctl exits 2 (a peer that did not
#      answer in time).
. "$(dirname "$0")/replica_lib.sh"

for c in c2 c3 c4; do synth "$WORK/A.local" "$c" --bytes 16MiB; done
size=$(cat "$WORK"/A.local/c2/*.dat | wc -c)
# The receivers wait for DATA as long as the caller waits for ACKs (--timeout 4 below):
# M must be given up before B's service would give B's PUT up.
daemon B --peer-timeout 4
daemon C --peer-timeout 4

# put PEERS NAME [ckptctl options]: ckptctl peer put of A's copy NAME, as run does; its
# block reads in READ (bytes).
put() {
    local peers=$1 name=$2
    shift 2
    run python3 -c 'import resource, subprocess, sys
rc = subprocess.call(sys.argv[1:])
print("block reads: %d bytes" % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_inblock * 512))
sys.exit(rc)' "$CKPTCTL" peer put --addr "$peers" --id A --from "$WORK/A.local" "$name" "$@"
    READ=$(sed -n 's/^block reads: \([0-9]*\) bytes$/\1/p' "$OUT")
}

echo "--- 1. one read for two peers"
put "$(addr C)" c3
expect 0 "PUT of c3 to C"
one=$READ
put "$(addr B),$(addr C)" c2
expect 0 "PUT of c2 to B and C"
fan=$READ
for p in B C; do
    said "c2: committed as a replica at peer $(addr $p) \([0-9]+ bytes sent\)" "$p's answer"
done
for p in B C; do
    logged "$p" "replica c2 of ckptd A committed" "$p's commit"
    run "$CKPT_VERIFY" "$WORK/$p.local/.replicas/A" c2 --deep
    expect 0 "$p's replica of c2"
    for f in "$WORK"/A.local/c2/*.dat; do
        cmp -s "$f" "$WORK/$p.local/.replicas/A/c2/${f##*/}" ||
            fail "$p's ${f##*/} differs from A's"
    done
done
echo "block reads: one PUT $one bytes, a PUT to two peers $fan bytes, the copy $size bytes"
if [ "$one" -ge "$size" ]; then
    [ "$fan" -lt $((size * 3 / 2)) ] ||
        fail "a PUT to two peers read $fan bytes of a $size-byte copy"
else
    echo "this file system counts no block reads ($one bytes for one PUT): not checked here"
fi

# A daemon id with no published address fails the whole put before anything is sent.
run "$CKPTCTL" peer put --to B,Z --root "$(durable_of B)" --id A --from "$WORK/A.local" c3
expect 2 "a PUT to B and to a daemon that published no address"
said "ckptctl: peer put: .*\bZ\b" "the error names Z"
[ ! -e "$WORK/B.local/.replicas/A/c3" ] || fail "B took c3 though the put named an unknown peer"

echo "--- 2. a mute peer is given up, and the other's replica commits"
mkdir -p "$(durable_of M)" "$WORK/M.local"
"$PEER_TOOL" serve-mute "$(durable_of M)" M "$WORK/M.local" >"$WORK/M.out" 2>&1 &
PID[M]=$!
for _ in $(seq 100); do [ -s "$(durable_of M)/.ckptd.M.peer" ] && break; sleep 0.05; done
[ -s "$(durable_of M)/.ckptd.M.peer" ] ||
    fail "the mute peer did not publish its address: $(cat "$WORK/M.out")"
put "$(addr B),$(addr M)" c4 --timeout 4
expect 2 "a PUT whose one peer never answered"
said "c4: committed as a replica at peer $(addr B)" "B's replica, whatever M did"
said "peer $(addr M) \(ckptd M\) said nothing for 2 s while this call waited for an ACK" \
    "M given up at half the timeout, named"
grep -q "taking a PUT, acknowledging nothing" "$WORK/M.out" || fail "M never took the PUT"
run "$CKPT_VERIFY" "$WORK/B.local/.replicas/A" c4 --deep
expect 0 "B's replica of c4"
! grep -q "PUT of c4 failed\|silent for" "$WORK/B.log" || fail "B gave its PUT of c4 up"
stop B
stop C
echo "PASS [$TEST_NAME]"
