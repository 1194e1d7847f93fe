#!/usr/bin/env bash
# The drains owed, LOCAL/.ckptd.ID.drain, are read at start (issue 31, part 3); one
# planted or damaged is said in the log and drains nothing it should not, never hangs
# the start, never follows a link (tier_lib.sh's cluster, n0 restarted each time):
#   - garbage, and a version-2 header whose count is no number: "not a 'ckptd drain'
#     file", nothing drained;
#   - a symbolic link (to a valid drain file outside): refused as a link, its target
#     untouched;
#   - a FIFO: refused as not a regular file, at once;
#   - a version-3 file with a NUL in it, and one larger than a daemon writes: "not a
#     'ckptd drain' file", nothing drained;
#   - a version-3 file of bad lines (a path for a name, an unknown word, a stand-by
#     with a bad flag, a bad instance, a path or this daemon's own id among the
#     daemons, or none) and one good stand-by: each bad line skipped and said, nothing
#     drained, the good stand-by listed;
#   - the list n1 publishes of the drains it owes (DURABLE/.ckptd.n1.drains), while n0
#     stands by for n1's drain: a FIFO, a link or garbage there says nothing (no hang,
#     the stand-by stays); a list that named the drain and names it no more lets it go;
#   - a valid header with a path, a hidden name and step-12: the two are skipped,
#     named; step-12 is drained, complete.
. "$(dirname "$0")/replica_lib.sh"
. "$(dirname "$0")/tier_lib.sh"

cluster
F=$WORK/n0.local/.ckptd.n0.drain
# restart_n0 WHAT: n0 again, with F as planted; its log then says it (or not).
restart_n0() {
    stop n0
    : >"$WORK/n0.log"
    daemon n0 --peer-timeout 5
    run "$CKPTCTL" drain --socket "$WORK/n0.sock"
    expect 0 "ckptctl drain after $1"
}

printf 'garbage\n' >"$F"
restart_n0 "a garbage file"
logged n0 "\.ckptd\.n0\.drain: not a 'ckptd drain' file; no drain resumes" "the garbage, said"
said "^no drains$" "nothing queued from garbage"
printf 'ckptd drain 2\noffers -1\nstep-12\n' >"$F"
restart_n0 "a count that is no number"
logged n0 "\.ckptd\.n0\.drain: not a 'ckptd drain' file; no drain resumes" "the bad count, said"
said "^no drains$" "nothing queued under a bad count"

rm -f "$F"
printf 'ckptd drain 1\nstep-12\n' >"$WORK/outside"
ln -s "$WORK/outside" "$F"
restart_n0 "a symbolic link"
logged n0 "\.ckptd\.n0\.drain: a symbolic link .*; no drain resumes" "the link, refused"
said "^no drains$" "nothing queued through a link"
[ "$(cat "$WORK/outside")" = "$(printf 'ckptd drain 1\nstep-12')" ] || fail "the link's target changed"

rm -f "$F"
mkfifo "$F"
restart_n0 "a FIFO"
logged n0 "\.ckptd\.n0\.drain: not a regular file .*; no drain resumes" "the FIFO, refused"
said "^no drains$" "nothing queued from a FIFO"

rm -f "$F"
printf 'ckptd drain 3\noffers 1\ndrain step\0-12\n' >"$F"
restart_n0 "a NUL"
logged n0 "\.ckptd\.n0\.drain: not a 'ckptd drain' file; no drain resumes" "the NUL, said"
said "^no drains$" "nothing queued from a file with a NUL"
{ printf 'ckptd drain 3\noffers 1\n'; yes 'drain step-12' | head -c 6000000; } >"$F"
restart_n0 "a file too large"
logged n0 "\.ckptd\.n0\.drain: not a 'ckptd drain' file \(too large\); no drain resumes" \
    "the file too large, said"
said "^no drains$" "nothing queued from a file too large"

bad=(
    "drain ../x"                     # a path for a name
    "drain step-12 extra"            # a word too many
    "steal step-12 0 0 n1"           # an unknown word
    "standby step-12 2 0 n1"         # a flag that is not 0 or 1
    "standby step-12 0 -1 n1"        # an instance that is not hex
    "standby step-12 0 0 ../n1"      # a path among the daemons
    "standby step-12 0 0 n0"         # this daemon's own id among them
    "standby step-12 0 0"            # no daemon ahead
)
{ printf 'ckptd drain 3\noffers 2\n'; printf '%s\n' "${bad[@]}"; printf 'standby step-12 0 0 n1\n'; } >"$F"
restart_n0 "bad version-3 lines"
logged n0 "\.ckptd\.n0\.drain: a line that names no checkpoint: .*'\.\./x'.*; skipped" "the path, skipped"
n=$(grep -c "\.ckptd\.n0\.drain: the line of step-12 is neither 'drain NAME' nor 'standby NAME 0|1 INSTANCE ID\.\.\.'" "$WORK/n0.log")
[ "$n" -eq 7 ] || { sed 's/^/  log| /' "$WORK/n0.log"; fail "$n of the 7 bad lines of step-12 said, not 7"; }
said "^step-12: standing by: ckptd n1 drains it; this daemon takes the drain over if it is lost$" \
    "the good stand-by kept"
[ "$(grep -c "^step-12:" "$OUT")" -eq 1 ] || fail "a bad line queued a drain"

# What n1 publishes of the drains it owes (SHARED/.ckptd.n1.drains), planted while n0
# stands by for its drain of step-12: a FIFO, a link, garbage say nothing (the stand-by
# neither hangs nor lets go); a list that named step-12 and names it no more lets go.
D=$SHARED/.ckptd.n1.drains
# still_standing WHAT: after two of the stand-by's rounds, n0 still stands by.
still_standing() {
    sleep 2
    run "$CKPTCTL" drain --socket "$WORK/n0.sock"
    expect 0 "ckptctl drain at n0 with $1 as n1's list"
    said "^step-12: standing by: ckptd n1 drains it" "n0 stands by through $1"
}
mkfifo "$D"
still_standing "a FIFO"
rm -f "$D"
printf 'ckptd drains 1\nstep-12\n' >"$WORK/outside-list"
ln -s "$WORK/outside-list" "$D"
still_standing "a link"
[ "$(cat "$WORK/outside-list")" = "$(printf 'ckptd drains 1\nstep-12')" ] || fail "the list's link target changed"
rm -f "$D"
printf 'garbage\n' >"$D"
still_standing "garbage"
printf 'ckptd drains 1\nstep-12\n' >"$D"
still_standing "a list naming step-12"
printf 'ckptd drains 1\nother-1\n' >"$D"
wait_log n0 "drain of step-12: ckptd n1 owes it no longer \(its drain failed or was superseded there\); no longer stood by for" \
    "n0 lets go of a drain n1 lists no more" 10
run "$CKPTCTL" drain --socket "$WORK/n0.sock"
! grep -q "^step-12: standing by" "$OUT" || fail "n0 still stands by for step-12"
rm -f "$D"

rm -f "$F"
printf 'ckptd drain 2\noffers 7\n../x\n.pending\nstep-12\n' >"$F"
restart_n0 "a path and a hidden name"
logged n0 "\.ckptd\.n0\.drain: .*'\.\./x'.*; skipped" "the path, skipped"
logged n0 "\.ckptd\.n0\.drain: .*'\.pending'.*; skipped" "the hidden name, skipped"
drained n0 step-12
said "^step-12: done, 12615680 of 12615680 bytes$" "step-12 drained"
same_as_truth step-12
[ ! -e "$WORK/x" ] && [ ! -e "$SHARED/../x" ] || fail "a drain reached outside the roots"
stop_cluster
