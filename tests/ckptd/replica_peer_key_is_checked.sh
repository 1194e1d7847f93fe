#!/usr/bin/env bash
# The job's peer key (decision 0194; docs/FORMAT.md, "The peer key"):
#   1. the first daemon on a durable root makes DURABLE/.ckptd.key (mode 0600, one line
#      "ckptd peer key 1" and 64 hex digits); a second daemon on the same root reads it
#      and leaves it as it is; the two speak to each other;
#   2. daemons of two durable roots hold two keys: each refuses the other's calls, both
#      ways (the caller does not prove it holds the service's key; the service does not
#      prove it holds the caller's), and a caller given the other root's key is taken;
#   3. a key that is a link, a FIFO, a device, a directory, readable by others, of
#      another size or not hex keeps the daemon from starting (exit 1), naming the file
#      and why, within the command's timeout (a FIFO is never waited on), and nothing
#      is written through the link.
. "$(dirname "$0")/replica_lib.sh"
unset CKPTD_PEER_KEY               # the default: the key in each durable root

echo "--- 1. the first daemon on a root makes its key; the next reads it"
SHARED=$WORK/shared
daemon A
key=$SHARED/.ckptd.key
[ -f "$key" ] && [ ! -L "$key" ] || fail "ckptd A made no $key"
[ "$(stat -c %a "$key")" = 600 ] || fail "$key has mode $(stat -c %a "$key"), not 600"
grep -qxE 'ckptd peer key 1 [0-9a-f]{64}' "$key" || fail "$key is not one key line: $(cat "$key")"
[ "$(stat -c %s "$key")" -eq 82 ] || fail "$key is $(stat -c %s "$key") bytes, not 82"
before=$(sha256sum <"$key")
daemon B
[ "$(sha256sum <"$key")" = "$before" ] || fail "ckptd B changed the key ckptd A made"
run "$CKPTCTL" peer inventory --to B --root "$SHARED" --id A
expect 0 "a caller of the root's key at ckptd B"
said "^0 copies at peer" "the inventory of B"
stop A
stop B

echo "--- 2. two roots, two keys: neither side takes the other"
unset SHARED
daemon C
daemon D
cmp -s "$WORK/C.durable/.ckptd.key" "$WORK/D.durable/.ckptd.key" &&
    fail "the daemons of two roots made the same key"
run "$CKPTCTL" peer inventory --to D --root "$WORK/D.durable" \
    --peer-key "$WORK/C.durable/.ckptd.key" --id C
expect 1 "a caller of C's key at ckptd D"
said "ckptd D does not prove that it holds this job's peer key" "the caller's refusal"
synth "$WORK/C.local" s1
run "$CKPTCTL" peer put --to D --root "$WORK/D.durable" --peer-key "$WORK/C.durable/.ckptd.key" \
    --id C --from "$WORK/C.local" s1
expect 1 "a PUT from a caller of C's key to ckptd D"
[ ! -e "$WORK/D.local/.replicas/C/s1" ] || fail "ckptd D kept a replica from a caller of another key"
run "$PEER_TOOL" hostile "$(addr D)" forged-auth
expect 0 "a caller that forges its proof"
said "refused: .*the caller does not prove that it holds this job's peer key" "the service's refusal"
wait_log D "\(says it is ckptd hostile\): it does not hold the job's peer key $WORK/D\.durable/\.ckptd\.key" \
    "ckptd D logs the caller it refused"
run "$CKPTCTL" peer put --to D --root "$WORK/D.durable" --id C --from "$WORK/C.local" s1
expect 0 "the same PUT with D's key"
run "$CKPT_VERIFY" "$WORK/D.local/.replicas/C" s1 --deep
expect 0 "the replica made with the right key deep-verifies"
stop C
stop D

echo "--- 3. a key file that is not one keeps the daemon from starting"
mkdir -p "$WORK/E.local" "$WORK/E.durable" "$WORK/outside"
good=$WORK/D.durable/.ckptd.key
# refused NAME REGEX: ckptd with --peer-key WORK/keys/NAME exits 1 saying REGEX.
refused() {
    run "$CKPTD" --root "$WORK/E.durable" --id E --local-root "$WORK/E.local" \
        --peer-listen 127.0.0.1:0 --foreground --socket "$WORK/E.sock" \
        --peer-key "$WORK/keys/$1"
    expect 1 "ckptd with the key $1"
    said "cannot start: peer key $WORK/keys/$1.*$2" "the refusal of the key $1"
}
mkdir -p "$WORK/keys"
ln -s "$good" "$WORK/keys/link"
refused link "a symbolic link"
mkfifo "$WORK/keys/fifo"
refused fifo "not a regular file"
mknod "$WORK/keys/null" c 1 3 2>/dev/null && refused null "not a regular file"
mkdir "$WORK/keys/dir"
refused dir "not a regular file"
install -m 644 "$good" "$WORK/keys/world-readable"
refused world-readable "has mode 0644: others may read or change it"
head -c 40 "$good" >"$WORK/keys/short" && chmod 600 "$WORK/keys/short"
refused short "is not a key file.*it has 40\)"
{ cat "$good"; echo more; } >"$WORK/keys/long" && chmod 600 "$WORK/keys/long"
refused long "is not a key file.*it has 83 or more\)"
sed 's/[0-9a-f]$/Z/' "$good" >"$WORK/keys/not-hex" && chmod 600 "$WORK/keys/not-hex"
refused not-hex "is not a key file"
# The default key planted as a link in the durable root: refused, never followed.
ln -s "$WORK/outside/key" "$WORK/E.durable/.ckptd.key"
run "$CKPTD" --root "$WORK/E.durable" --id E --local-root "$WORK/E.local" \
    --peer-listen 127.0.0.1:0 --foreground --socket "$WORK/E.sock"
expect 1 "ckptd with a link planted as the root's key"
said "cannot start: peer key $WORK/E.durable/\.ckptd\.key: .*a symbolic link" "the planted link"
[ -z "$(ls -A "$WORK/outside")" ] || fail "a key was written through the planted link"
echo "PASS [$TEST_NAME]"
