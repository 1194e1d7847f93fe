#!/usr/bin/env bash
# A partial copy (docs/FORMAT.md, "Copies"): a committed checkpoint directory with the
# whole manifest and some data files, marked by NAME/copy. The tools say what it is
# rather than call it corrupt, check the files it holds (deep: their hashes), and a
# load of a file it lacks names the file; a copy file that is not what the format says
# (another version, too long, a name twice or not of the manifest, a link, a FIFO) is
# a bad checkpoint naming the file and its line, never a hang. Recovery removes a
# pending copy whose writer died, copy file and all, and the peer address file of a
# dead daemon, as it removes its heartbeat.
. "$(dirname "$0")/replica_lib.sh"

synth "$WORK/src" c1
mkdir -p "$WORK/t"
run "$COPY_PARTIAL" "$WORK/src" c1 "$WORK/t" A rank-00000.dat rank-00002.dat
expect 0 "a partial copy"
run "$CKPT_VERIFY" "$WORK/t" c1 --deep
expect 0 "ckpt-verify --deep of a partial copy"
said "c1: ok: a partial copy from ckptd A: 2 of 4 data files \(rank-00000.dat rank-00002.dat\); 3 tensors, 6 shards, 2 files; 6 blocks" \
    "what it holds, and only its blocks hashed"
run "$CKPT_VERIFY" "$WORK/t"
expect 0 "ckpt-verify of the root"
run "$CKPT_INSPECT" "$WORK/t" c1 --json
expect 0 "ckpt-inspect --json"
said '"kind": "partial"' "the JSON says partial"
run "$CKPT_VERIFY" "$WORK/t" c1 --against "$WORK/src/c1"
expect 2 "loading every tensor of a partial copy"
said "rank-0000[13].dat: data file is not in this partial copy \(from ckptd A; it holds 2 of 4 data files\)" \
    "the load names the file it lacks"

mkdir -p "$WORK/m"
run "$COPY_PARTIAL" "$WORK/src" c1 "$WORK/m" A
expect 0 "a copy of the manifest alone"
run "$CKPT_VERIFY" "$WORK/m" c1 --deep
expect 0 "the manifest alone"
said "a partial copy from ckptd A: 0 of 4 data files" "what it holds"

cp -a "$WORK/t/c1" "$WORK/t/gone"
rm "$WORK/t/gone/rank-00002.dat"
run "$CKPT_VERIFY" "$WORK/t" gone
expect 1 "a partial copy missing a file it lists"
said "rank-00002.dat: missing" "the missing file"

# bad CASE CONTENT REGEX: the copy file holds CONTENT; ckpt-verify and ckpt-inspect say
# REGEX and exit 1.
bad() {
    local name=$1 content=$2 want=$3
    rm -rf "$WORK/b"
    mkdir -p "$WORK/b"
    cp -a "$WORK/t/c1" "$WORK/b/c1"
    rm "$WORK/b/c1/copy"
    printf "$content" >"$WORK/b/c1/copy"
    run "$CKPT_VERIFY" "$WORK/b" c1
    expect 1 "ckpt-verify, copy file: $name"
    said "$want" "ckpt-verify, copy file: $name"
    run "$CKPT_INSPECT" "$WORK/b" c1
    expect 1 "ckpt-inspect, copy file: $name"
    said "$want" "ckpt-inspect, copy file: $name"
}
ok='libshard copy 1\nsource A\n'
bad version 'libshard copy 2\nsource A\nfiles 0\n' "copy: copy file version 2, this build reads version 1"
bad magic 'libshard kopy 1\n' "copy: line 1 is not 'libshard copy VERSION'"
bad source 'libshard copy 1\nsource ../x\nfiles 0\n' "copy: line 2 is not 'source ID'"
bad count "${ok}files 9\n" "copy: line 3 says 9 files; the manifest has 4"
bad twice "${ok}files 2\nrank-00000.dat\nrank-00000.dat\n" "copy: line 5 names rank-00000.dat a second time"
bad unknown "${ok}files 1\n../manifest.mdb\n" "copy: line 4 names '\.\./manifest\.mdb', which is no data file"
bad short "${ok}files 2\nrank-00000.dat\n" "copy: line 5: expected a data file name"
bad trailing "${ok}files 1\nrank-00000.dat\nrank-00001.dat\n" "copy: bytes after the 1 file names"
bad nul "${ok}files 1\nrank-0\0000.dat\n" "copy: line 4: expected a data file name"
bad long "${ok}files 1\nrank-00000.dat\n$(printf '%*s' 600 '' | tr ' ' x)\n" \
    "copy: more than a copy of 4 data files needs"

rm -rf "$WORK/b" && mkdir -p "$WORK/b" && cp -a "$WORK/t/c1" "$WORK/b/c1"
rm "$WORK/b/c1/copy"
ln -s "$WORK/t/c1/copy" "$WORK/b/c1/copy"
run "$CKPT_VERIFY" "$WORK/b" c1
expect 1 "a copy file that is a link"
said "copy: a symbolic link" "the link"
rm "$WORK/b/c1/copy"
mkfifo "$WORK/b/c1/copy"
run "$CKPT_VERIFY" "$WORK/b" c1
expect 1 "a copy file that is a FIFO"
said "copy: not a regular file" "the FIFO"

# Recovery: a pending copy of a dead writer (its copy file too) and a dead daemon's
# peer address file go; ckptd's start recovers its root.
mkdir -p "$WORK/r/.pending/c1.0123456789ab"
cp "$WORK/t/c1/"* "$WORK/r/.pending/c1.0123456789ab/"
printf 'ckptd peer 1\naddress 127.0.0.1:9\ninstance 1\n' >"$WORK/r/.ckptd.dead.peer"
"$CKPTD" --root "$WORK/r" --id live --foreground --log "$WORK/r.log" &
PID[r]=$!
for _ in $(seq 200); do [ -S "$WORK/r/.ckptd.sock" ] && break; sleep 0.05; done
[ -S "$WORK/r/.ckptd.sock" ] || fail "ckptd did not start on the root with debris"
kill -TERM "${PID[r]}"
wait "${PID[r]}"
unset "PID[r]"
grep -q "removed incomplete save $WORK/r/.pending/c1.0123456789ab" "$WORK/r.log" ||
    { cat "$WORK/r.log"; fail "recovery did not remove the pending copy"; }
[ ! -e "$WORK/r/.pending/c1.0123456789ab" ] || fail "the pending copy is still there"
[ ! -e "$WORK/r/.ckptd.dead.peer" ] || fail "the dead daemon's peer address file is still there"
echo "PASS [$TEST_NAME]"
