#!/usr/bin/env bash
# Hostile peers (issue 31; docs/PROTOCOL.md, "Peer protocol", "Checks and limits"): a
# message that is not the protocol, of another version, out of order, oversized, or
# naming a path (`..`, `/`, a NUL, a leading dot; a PART's token that is no pending
# directory's), or stating a window a sender cannot or should not hold, is refused with an ERROR that says
# why, logged with the peer's address, and its connection closed; a request the
# service cannot grant (a planted link as a replica root, a missing copy) gets an
# ERROR naming it. A caller that does not prove that it holds the job's peer key (no
# AUTH, a forged one, one played again from another connection) is refused before
# anything it asks is taken; a service that does not prove it is refused by the caller.
# After AUTH every message but DATA is sealed: one without its seal, with a seal
# changed, of the other direction, or played again is refused both ways, and so is a
# stream whose manifest is not the one its MANIFEST or GET_OK declared, or that a PUT
# sends before its MANIFEST. A WAITING outside a PUT, with a payload, or after the
# PUT's MANIFEST is refused, and a PUT whose sender only ever says WAITING is given up
# at the service's --part-timeout.
# Through all of it the daemon lives, nothing is written outside its roots, and nothing
# is committed. Versions fail cleanly both ways, naming both.
. "$(dirname "$0")/replica_lib.sh"

daemon B --peer-timeout 5 --part-timeout 2
mkdir -p "$WORK/outside" "$WORK/B.local/.replicas"
chmod 700 "$WORK/B.local/.replicas"
ln -s "$WORK/outside" "$WORK/B.local/.replicas/planted"
touch "$WORK/before"
sleep 0.01

# case EXPECTED-REGEX: one hostile exchange, refused with a message matching it.
case_() {
    local name=$1 want=$2
    run "$PEER_TOOL" hostile "$(addr B)" "$name"
    expect 0 "case $name: the service took it"
    said "$want" "case $name"
}
case_ short-header "answer: service: a message that is not of the ckptd peer protocol"
V=9                               # the peer protocol of this build (PROTOCOL.md)
case_ other-version "answer: service: ckptd B speaks peer protocol version $V; this peer sent version $((V + 1))"
logged B "refused: ckptd B speaks peer protocol version $V; this peer sent version $((V + 1))" \
    "the version refusal"
case_ before-hello "refused: .*a INVENTORY \(type 2\) before HELLO"
case_ second-hello "refused: .*a second HELLO"
case_ before-auth "refused: .*a INVENTORY \(type 2\) before AUTH: a caller proves that it holds"
case_ forged-auth "refused: .*the caller does not prove that it holds this job's peer key"
logged B "peer 127\.0\.0\.1:[0-9]+ \(says it is ckptd hostile\): it does not hold the job's peer key $WORK/peer\.key" \
    "the forged proof"
case_ replayed-auth "refused: .*the caller does not prove that it holds this job's peer key"
case_ auth-short "refused: .*AUTH message with a malformed payload \(a proof is 32 bytes\)"
case_ second-auth "refused: .*a second AUTH"
case_ unsealed "refused: .*a INVENTORY message \(type 2\) without its seal"
case_ bad-seal "refused: .*a INVENTORY message whose seal is not this connection's"
case_ reflected-seal "refused: .*a INVENTORY message whose seal is not this connection's"
case_ replayed-seal "refused: .*a INVENTORY message whose seal is not this connection's"
case_ bad-id "refused: .*a daemon id that is not"
case_ hello-trailing "refused: .*HELLO message with a malformed payload"
case_ hello-no-nonce "refused: .*HELLO message with a malformed payload"
case_ unknown-type "refused: .*a message of type 200"
case_ reply-type "refused: .*type 68 \(COMMITTED\), which a peer does not send"
case_ inventory-payload "refused: .*an INVENTORY with a payload"
case_ put-dotdot-name "refused: .*names checkpoint '\.\./escape'"
case_ put-slash-name "refused: .*names checkpoint 'a/b'"
case_ put-dot-name "refused: .*names checkpoint '\.pending'"
case_ put-nul-name "refused: .*holding a NUL"
case_ put-long-name "refused: .*a name or source too long"
case_ put-dotdot-source "refused: .*names source '\.\.', which is not a daemon id"
case_ put-slash-source "refused: .*names source 'a/b'"
case_ put-link-source "refused: .*\.replicas/planted: a symbolic link"
case_ put-dotdot-file "refused: .*names data file '\.\./\.\./\.\./escape\.dat'"
case_ put-slash-file "refused: .*names data file 'a/b\.dat'"
case_ put-unaligned-size "refused: .*rank-00000\.dat of 4095 bytes"
case_ put-absurd-size "refused: .*rank-00000\.dat of 9223372036854775808 bytes"
case_ put-absurd-manifest "refused: .*a manifest of 1099511627776 bytes"
case_ put-declares-manifest "refused: .*a PUT message declares a manifest of 4096 bytes: a PUT's manifest comes last"
case_ put-odd-block-size "refused: .*a PUT message declares blocks of 5000 bytes \(a power of two"
case_ manifest-outside-put "refused: .*a MANIFEST outside a PUT"
case_ put-manifest-twice "refused: .*a MANIFEST in a stream whose manifest was declared already"
case_ data-before-manifest "refused: .*a DATA of 4096 bytes at stream offset 0, outside"
case_ waiting-outside-put "refused: .*a WAITING outside a PUT"
case_ waiting-with-payload "refused: .*a WAITING with a payload"
case_ waiting-after-manifest "refused: .*a WAITING in a stream whose manifest was declared already"
# A sender that only ever says WAITING keeps its PUT for --part-timeout (2 s here), no
# longer, though it is never silent.
case_ waiting-forever "refused: .*its sender said WAITING for 2 s \(--part-timeout\) and sent nothing more"
logged B "PUT of hostile-put failed: its sender said WAITING for 2 s" "the PUT that only waited"
case_ put-more-files "refused: .*a file count larger than its bytes can hold"
case_ put-files-beyond-count "refused: .*left over after the files it declares"
case_ put-twice-file "refused: .*rank-00000\.dat is declared twice"
case_ put-garbage-manifest "refused: .*manifest\.mdb: not an LMDB file"
case_ put-other-manifest "refused: .*copy of hostile-put: its manifest's SHA-256 is not the one declared with it"
case_ data-past-window "refused: .*a DATA of 1048576 bytes at stream offset 9437184, past the window \(8388608 bytes taken in, 0 acknowledged, a window of 8388608\)"
case_ data-across-files "refused: .*a DATA of 8192 bytes at stream offset 0, outside \[0, 4096\) \(the bytes of data file 0 of the PUT not yet taken\)"
case_ data-past-end "refused: .*a DATA of 200 bytes at stream offset 4000, outside"
case_ data-overlap "refused: .*overlaps one that came before"
case_ data-too-big "refused: .*a DATA message of 4198400 bytes"
case_ data-outside-put "refused: .*a DATA outside a PUT"
case_ ack-outside-get "refused: .*an ACK outside a GET"
case_ request-too-big "refused: .*a PUT of 2097184 bytes came on top"
case_ get-dotdot-name "refused: .*names checkpoint '\.\.'"
case_ get-dotdot-file "refused: .*names data file '\.\./manifest\.mdb'"
case_ get-all-and-files "refused: .*both 'all' and a list of files"
case_ get-missing "refused: .*no copy of no-such-checkpoint here"
case_ get-window-zero "refused: .*a GET message states a window of 0 bytes \(8388608 to 33554432\)"
case_ get-window-huge "refused: .*a GET message states a window of 1073741824 bytes \(8388608 to 33554432\)"
case_ part-dotdot-token "refused: .*names token '\.\./\.\./\.\./\.\./etc', which is not a pending directory's"
case_ part-meet-token "refused: .*a PART message with a time, manifest digest or token cut short or too long"
case_ part-no-time "refused: .*a PART message with no commit time"
case_ part-no-files "refused: .*a PART message with no data file to write"
case_ part-missing "refused: .*no copy of no-such-checkpoint here"

# A service of another version, for this build's client: refused naming both.
"$PEER_TOOL" serve-version 127.0.0.1:0 $((V + 1)) 10 >"$WORK/fake.out" 2>&1 &
fake=$!
for _ in $(seq 100); do
    grep -q "^serving" "$WORK/fake.out" && break
    sleep 0.05
done
fake_addr=$(sed -n "s/^serving as version $((V + 1)) at //p" "$WORK/fake.out")
[ -n "$fake_addr" ] || fail "the fake service of version $((V + 1)) did not start: $(cat "$WORK/fake.out")"
run "$CKPTCTL" peer inventory --addr "$fake_addr" --timeout 5
expect 1 "a client of this build and a service of another version"
said "speaks ckptd peer protocol version $((V + 1)), this build version $V" "the client's refusal"
kill "$fake"
wait "$fake" 2>/dev/null

# A service that does not hold the caller's key, for this build's client: the caller
# asks nothing of it, and says which key it holds.
key=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
printf 'ckptd peer key 1 %s\n' "$key" >"$WORK/other.key"
chmod 600 "$WORK/other.key"
run "$CKPTCTL" peer inventory --to B --root "$WORK/B.durable" --peer-key "$WORK/other.key"
expect 1 "a caller of another key"
said "ckptd B does not prove that it holds this job's peer key \($WORK/other\.key\): it is not a daemon of this job, or its key differs" \
    "the caller's refusal of a service of another key"

# Services that hold the key but whose word after AUTH cannot be trusted, for this
# build's client: replies without their seal (what someone on the path who does not
# hold the key would put in their place), a GET_OK whose manifest is not the one it
# declares, and a PUT_READY that states a window of 1 GiB. Each is refused, and
# nothing of the GET is kept.
synth "$WORK/fake.local" f1
mkdir -p "$WORK/fake.durable" "$WORK/into"
for how in unsealed lying greedy; do
    "$PEER_TOOL" serve-$how "$WORK/fake.durable" "F$how" "$WORK/fake.local" \
        >"$WORK/fake-$how.out" 2>&1 &
    PID[fake$how]=$!
    for _ in $(seq 200); do
        grep -q "^serving" "$WORK/fake-$how.out" && break
        sleep 0.05
    done
    grep -q "^serving" "$WORK/fake-$how.out" || fail "serve-$how did not start: $(cat "$WORK/fake-$how.out")"
done
run "$CKPTCTL" peer inventory --to Funsealed --root "$WORK/fake.durable" --timeout 5
expect 1 "a service whose replies carry no seal"
said "a INVENTORY_OK message whose seal is not this connection's" \
    "the caller's refusal of an unsealed reply"
run "$CKPTCTL" peer get --to Flying --root "$WORK/fake.durable" --into "$WORK/into" f1 --all \
    --timeout 5
expect 1 "a GET_OK whose manifest is not the one it declares"
said "copy of f1: its manifest's SHA-256 is not the one declared with it" \
    "the caller's refusal of another manifest"
[ ! -e "$WORK/into/f1" ] || fail "the GET of another manifest left a copy"
no_pending "$WORK/into"
run "$CKPTCTL" peer put --to Fgreedy --root "$WORK/fake.durable" --id A --from "$WORK/fake.local" \
    f1 --timeout 5
expect 1 "a PUT_READY that states a window of 1 GiB"
said "peer [0-9.:]+: a PUT_READY message states a window of 1073741824 bytes \(8388608 to 33554432\)" \
    "the caller's refusal of the window"
for how in unsealed lying greedy; do
    kill "${PID[fake$how]}"
    wait "${PID[fake$how]}" 2>/dev/null
    unset "PID[fake$how]"
done

run "$CKPTCTL" peer inventory --to B --root "$WORK/B.durable"
expect 0 "the daemon lives after every hostile peer"
said "^0 copies" "nothing was committed"
[ -z "$(ls -A "$WORK/outside")" ] || fail "something was written through the planted link"
new=$(find "$WORK" -mindepth 1 -newer "$WORK/before" ! -path "$WORK/B.local/.replicas/hostile*" \
      ! -path "$WORK/B.local/.replicas" ! -name '*.log' ! -name 'out.txt' ! -name 'fake.out' \
      ! -path "$WORK/B.local" ! -path "$WORK/B.local/catalog.mdb*" ! -path "$WORK/B.durable" \
      ! -name other.key ! -name 'fake-*.out' ! -path "$WORK/fake.local*" \
      ! -path "$WORK/fake.durable*" ! -path "$WORK/into*" \
      ! -path "$WORK/B.durable/*" -print)
[ -z "$new" ] || fail "written outside the replica roots: $new"
for f in $(ls -A "$WORK/B.local/.replicas/hostile"); do
    case $f in .pending | catalog.mdb | catalog.mdb-lock) ;;
    *) fail "a hostile peer's PUT left .replicas/hostile/$f";;
    esac
done
no_pending "$WORK/B.local/.replicas/hostile"
[ "$(grep -c 'refused:' "$WORK/B.log")" -ge 30 ] || fail "refusals were not logged"
stop B
echo "PASS [$TEST_NAME]"
