#!/usr/bin/env bash
# A root full of planted links touches nothing outside it (issue 21, "Tests"; docs/
# FORMAT.md, "Links and special files"). $WORK/home stands for a user's files outside
# the root; every planted link points into it, each at a file or directory that
# following the link would read, overwrite or delete. lib.sh's guard checks, at the
# end, that every byte, size, mode and mtime in it is as it was.
#
# Root A: ROOT/.pending is a link to home/pend. ckptd's start (recovery), an embedded
#   save, ckpt-inspect, ckpt-verify and --rebuild-catalog are all refused, naming it.
# Root B: committed checkpoints c1, c2, then planted: c1's data file, c2's manifest,
#   catalog.mdb and its lock, the save lock .pending/n1.lock, a meeting of m1
#   (.pending/m1.TOKEN-meet, a link to a directory whose plan invites any daemon in),
#   a dead save whose data file and manifest are links, a daemon's heartbeat and its
#   temporary, a daemon's root lock and its default log. Then every tool on it (ckpt-
#   inspect, ckpt-verify, ckpt-verify --deep, ckpt-consolidate, ckpt-reshard by link
#   and by copy, ckpt-synth embedded, ckpt-inspect --rebuild-catalog), two ckptd that
#   start (recovery), serve a save each alone and one save shared by both (the member
#   looks for the meeting among the planted ones), and a save of n1 through ckptd.
#   What reads a planted thing refuses it naming it; what does not need it works.
TOOL_TIMEOUT=${TOOL_TIMEOUT:-30}     # a hang is what some of these cases were
. "$(dirname "$0")/../ckpt/bad/lib.sh"
for v in CKPTD CKPT_CONSOLIDATE CKPT_RESHARD; do
    [ -x "${!v:-}" ] || skip "\$$v is not set (run through meson test)"
done
H=$WORK/home A=$WORK/a B=$WORK/b
link_msg="a symbolic link \(links are never followed"

# ---- the world outside ----
mkdir -p "$H/pend/sub" "$H/meet"
echo 'export PATH=$HOME/bin:$PATH' >"$H/.bashrc"
echo '\documentclass{book}' >"$H/pend/sub/thesis.tex"
echo 'notes' >"$H/pend/notes.txt"
for f in beat beat.tmp ckptd.log catalog.lock daemon.lock; do echo "$f: mine" >"$H/$f"; done
printf 'ckptd meeting 1\nstep 0\nworld 2\nnodes 2\ncoordinator Z\ninstance 1\n' >"$H/meet/plan"

# ---- root A: .pending is a link ----
make_ckpt "$A" c --mesh 2
rm -rf "$A/.pending"
ln -s "$H/pend" "$A/.pending"
pend_msg="$(re "$A")/\.pending is a symbolic link"

# ---- root B ----
make_ckpt "$B" c1 --mesh 2
make_ckpt "$B" c2 --mesh 2
cp "$B/c1/rank-00000.dat" "$H/data.bin"
cp "$B/c2/manifest.mdb" "$H/manifest.mdb"
cp "$B/catalog.mdb" "$H/catalog.mdb"
guard "$H"
ln -sf "$H/data.bin" "$B/c1/rank-00000.dat"
ln -sf "$H/manifest.mdb" "$B/c2/manifest.mdb"
ln -sf "$H/catalog.mdb" "$B/catalog.mdb"
ln -sf "$H/catalog.lock" "$B/catalog.mdb-lock"
ln -s "$H/.bashrc" "$B/.pending/n1.lock"
ln -s "$H/meet" "$B/.pending/m1.0123456789ab-meet"
mkdir "$B/.pending/dead.aaaaaaaaaaaa"
ln -s "$H/.bashrc" "$B/.pending/dead.aaaaaaaaaaaa/rank-00000.dat"
ln -s "$H/manifest.mdb" "$B/.pending/dead.aaaaaaaaaaaa/manifest.mdb"
ln -s "$H/beat" "$B/.ckptd.A.beat"
ln -s "$H/beat.tmp" "$B/..ckptd.A.beat.tmp"
ln -s "$H/daemon.lock" "$B/.ckptd.X.lock"
ln -s "$H/ckptd.log" "$B/.ckptd.log"

# ---- root A: everything refuses the .pending link ----
expect_exit 1 "$CKPTD" --root "$A" --foreground
expect_msg "cannot start: $pend_msg" "the .pending link, at ckptd's start"
expect_exit 2 "$CKPT_SYNTH" "$A" --name x --mesh 1 --tensors 1 --bytes 64KiB
expect_msg "$pend_msg" "the .pending link, at an embedded save"
expect_exit 2 "$CKPT_INSPECT" "$A"
expect_msg "$pend_msg" "the .pending link, at ckpt-inspect ROOT"
expect_exit 2 "$CKPT_VERIFY" "$A"
expect_msg "$pend_msg" "the .pending link, at ckpt-verify ROOT"
expect_exit 2 "$CKPT_INSPECT" "$A" --rebuild-catalog
expect_msg "$pend_msg" "the .pending link, at --rebuild-catalog"

# ---- root B: the tools ----
expect_exit 2 "$CKPT_INSPECT" "$B"
expect_msg "$(re "$B")/catalog\.mdb: $link_msg" "the catalog link"
expect_exit 1 "$CKPT_INSPECT" "$B" c2
expect_msg "$(re "$B")/c2/manifest\.mdb: $link_msg" "c2's manifest link"
for deep in "" --deep; do
    expect_exit 1 "$CKPT_VERIFY" "$B" c1 $deep
    expect_msg "$(re "$B")/c1/rank-00000\.dat: not a regular file \(a symbolic link" \
        "c1's data link"
done
expect_exit 1 "$CKPT_CONSOLIDATE" "$B" c1 -o "$WORK/out"
expect_msg "$(re "$B")/c1/rank-00000\.dat: $link_msg" "c1's data link, at ckpt-consolidate"
expect_exit 2 "$CKPT_RESHARD" "$B" c1 --to-mesh 4 --name r1
expect_msg "rank-00000\.dat.*$link_msg" "c1's data link, at a reshard by link"
expect_exit 1 "$CKPT_RESHARD" "$B" c1 --to-mesh 3 --copy --name r2
expect_msg "$(re "$B")/c1/rank-00000\.dat: $link_msg" "c1's data link, at a copying reshard"
expect_exit 2 "$CKPT_SYNTH" "$B" --name n1 --mesh 1 --tensors 1 --bytes 64KiB
expect_msg "$(re "$B")/\.pending/n1\.lock: $link_msg" "the save lock link, at an embedded save"
run "$CKPT_SYNTH" "$B" --name e1 --mesh 1 --tensors 1 --bytes 64KiB
expect_msg "$(re "$B")/catalog\.mdb-lock: $link_msg" "the catalog lock link, at an embedded save"
expect_exit 0 "$CKPT_VERIFY" "$B" e1 --deep
expect_exit 1 "$CKPT_INSPECT" "$B" --rebuild-catalog
expect_msg "kept aside as $(re "$B")/catalog\.mdb\.bad-" "the catalog link kept aside"
expect_msg "catalog\.mdb-lock was a symbolic link, not a lock file: kept aside" \
    "the lock link kept aside"
expect_msg "skipping unreadable checkpoint: $(re "$B")/c2/manifest\.mdb" "c2 as unreadable"
ln -s "$H/catalog.mdb" "$B/catalog.mdb.planted-again"
mv "$B/catalog.mdb.planted-again" "$B/catalog.mdb"

# ---- root B: the daemons ----
expect_exit 2 "$CKPTD" --root "$B" --id X
expect_msg "$(re "$B")/\.ckptd\.log: $link_msg" "the default log link"
expect_exit 1 "$CKPTD" --root "$B" --id X --foreground
expect_msg "$(re "$B")/\.ckptd\.X\.lock: $link_msg" "the daemon lock link"
pids=()
trap 'kill -9 "${pids[@]}" 2>/dev/null; rm -rf "$WORK"' EXIT
for id in A B; do
    "$CKPTD" --root "$B" --id $id --socket "$B/.s$id" --foreground --log "$WORK/d$id.log" \
        --staging 64MiB --hash-threads 2 &
    pids+=($!)
    for _ in $(seq 600); do [ -S "$B/.s$id" ] && break; sleep 0.05; done
    [ -S "$B/.s$id" ] || { cat "$WORK/d$id.log"; fail "ckptd $id never listened"; }
done
sed 's/^/  A| /' "$WORK/dA.log"
grep -q "catalog is unreadable.*kept aside" "$WORK/dA.log" ||
    fail "A's start did not rebuild the catalog"
grep -q "removed incomplete save $(re "$B")/\.pending/dead\.aaaaaaaaaaaa" "$WORK/dA.log" ||
    fail "A's recovery did not remove the dead save"
grep -q "m1\.0123456789ab-meet alone: it is a symbolic link" "$WORK/dA.log" ||
    fail "A's recovery did not leave the planted meeting alone"
expect_exit 0 "$CKPT_SYNTH" "$B" --name d1 --mesh 2 --tensors 2 --bytes 256KiB --world 2 \
    --daemon "$B/.sA"
expect_exit 0 "$CKPT_SYNTH" "$B" --name m1 --mesh 2 --tensors 2 --bytes 256KiB --world 2 \
    --daemon "$B/.sA,$B/.sB"
expect_exit 2 "$CKPT_SYNTH" "$B" --name n1 --mesh 1 --tensors 1 --bytes 64KiB --world 1 \
    --daemon "$B/.sB"
expect_msg "\.pending/n1\.lock: $link_msg" "the save lock link, at a save through ckptd"
[ ! -L "$B/.ckptd.A.beat" ] && [ -f "$B/.ckptd.A.beat" ] ||
    fail "A's heartbeat is not a file of its own"
for i in 0 1; do
    kill -TERM "${pids[$i]}"
    wait "${pids[$i]}" || fail "a ckptd exited $? on SIGTERM"
done
pids=()
for n in d1 m1; do
    expect_exit 0 "$CKPT_VERIFY" "$B" $n --deep
done
[ ! -e "$B/n1" ] && [ ! -e "$B/r1" ] && [ ! -e "$B/r2" ] || fail "a refused save is visible"
finish
