#!/usr/bin/env bash
# A receiver with more checker threads states a wider window (peer protocol 6;
# decision 0200): one 4 MiB block per checker, 8 MiB to 32 MiB. Two ckptds on loopback:
#   - A's part of c1 (48 MiB, 4 MiB blocks) PUT to B, started with --peer-checkers 8:
#     B states a 32 MiB window, commits the replica, and it deep-verifies;
#   - GET back from B with 8 checkers (window 32 MiB) and with 4 (16 MiB): each copy
#     deep-verifies and its data files are A's, byte for byte;
#   - a byte flipped in B's replica, in block 3 of a file (a block that one of the 8
#     checkers other than the first takes): the GET fails naming the file and the
#     block, and leaves nothing;
#   - a checker count past 8, signed, spaced or empty is a usage error, for ckptd and
#     for ckptctl.
. "$(dirname "$0")/replica_lib.sh"

synth "$WORK/src" c1 --bytes 96MiB --block-size 4MiB
mkdir -p "$WORK/A.local"
run "$COPY_PARTIAL" "$WORK/src" c1 "$WORK/A.local" A rank-00000.dat rank-00002.dat
expect 0 "making A's part of c1"
daemon A
daemon B --peer-checkers 8

run "$CKPTCTL" peer put --to B --root "$WORK/B.durable" --id A --from "$WORK/A.local" c1
expect 0 "PUT of c1 to B"
logged B "replica c1 of ckptd A committed \([0-9]+ bytes, window 32 MiB[;)]" \
    "B's window with 8 checkers"
run "$CKPT_VERIFY" "$WORK/B.local/.replicas/A" c1 --deep
expect 0 "B's replica of c1"

for k in 8 4; do
    mkdir -p "$WORK/C$k.local"
    run "$CKPTCTL" peer get --to B --root "$WORK/B.durable" --into "$WORK/C$k.local" c1 --all \
        --checkers "$k"
    expect 0 "GET of c1 with $k checkers"
    said "c1: fetched from peer .* \(50364416 bytes\)" "the whole stream, as the GET counted it"
    # The service says "sent" once it took the last ACK, or "hung up with all ... sent"
    # when the caller, done, closed first (its final ACK lost to the close); either
    # after ckptctl returned.
    wait_log B "GET of c1: (sent|hung up with all) [0-9]+ bytes (sent )?\(window $((k * 4)) MiB\)" \
        "the window of $k checkers" 10
    run "$CKPT_VERIFY" "$WORK/C$k.local" c1 --deep
    expect 0 "the copy fetched with $k checkers"
    for f in rank-00000.dat rank-00002.dat; do
        cmp -s "$WORK/A.local/c1/$f" "$WORK/C$k.local/c1/$f" ||
            fail "$f fetched with $k checkers differs from A's"
    done
done

printf '\x5a' | dd of="$WORK/B.local/.replicas/A/c1/rank-00002.dat" bs=1 \
    seek=$((3 * 4194304 + 7)) conv=notrunc status=none
mkdir -p "$WORK/D.local"
run "$CKPTCTL" peer get --to B --root "$WORK/B.durable" --into "$WORK/D.local" c1 --all \
    --checkers 8
expect 1 "GET of a replica with a flipped byte"
said "data file rank-00002.dat, block 3 " "the failure names the file and the block"
[ ! -e "$WORK/D.local/c1" ] || fail "the failed GET committed c1"
no_pending "$WORK/D.local"

# Past 8, and what strtoul alone would take (a sign, a leading space, nothing): one rule
# for both programs (kd_parse.c).
for v in 9 +4 " 4" ""; do
    run "$CKPTCTL" peer get --to B --root "$WORK/B.durable" --into "$WORK/D.local" c1 --all \
        --checkers "$v"
    expect 2 "ckptctl --checkers '$v'"
    run "$CKPTD" --root "$WORK/E.durable" --peer-checkers "$v"
    expect 2 "ckptd --peer-checkers '$v'"
    said "--peer-checkers ${v//+/\\+}: not a number in 0\.\.8" "ckptd's refusal of '$v'"
done

stop A
stop B
echo "PASS [$TEST_NAME]"
