# lib.sh - shared helpers of the bad-input tests (sourced, bash).
#
# Every test makes a fresh checkpoint with ckpt-synth in a temp dir, damages a copy,
# runs the tools on it and checks: the documented exit code (1 bad checkpoint, 2 usage
# or I/O error), a message that names the thing, no crash (exit > 128, or a sanitizer
# report), no hang (a timeout per command, under meson's own), and no write to the
# checkpoint being read (its files' paths, sizes, mtimes and contents are the same
# after every tool ran). Exit status: 0 pass, 1 fail, 77 skip.
#
# The tool paths come from meson: CKPT_SYNTH, CKPT_INSPECT, CKPT_VERIFY, MF_CORRUPT.

set -u
export LC_ALL=C

TEST_NAME=${TEST_NAME:-$(basename "$0" .sh)}
TOOL_TIMEOUT=${TOOL_TIMEOUT:-60}
OUT_MAX=${OUT_MAX:-4194304}     # bytes of stdout a tool may print on these small inputs

fail() {
    echo "FAIL [$TEST_NAME]: $*" >&2
    exit 1
}

skip() {
    echo "SKIP [$TEST_NAME]: $*"
    exit 77
}

for v in CKPT_SYNTH CKPT_INSPECT CKPT_VERIFY; do
    [ -n "${!v:-}" ] || skip "\$$v is not set (run through meson test)"
    [ -x "${!v}" ] || fail "\$$v=${!v} is not an executable"
done
command -v sha256sum >/dev/null || skip "sha256sum is missing"
command -v timeout >/dev/null || skip "timeout is missing"

WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/ckpt-bad.XXXXXX") || fail "mktemp failed"
trap 'rm -rf "$WORK"' EXIT
OUT=$WORK/out.txt       # stdout then stderr of the last tool run
OUT_STDOUT=$WORK/stdout.txt
OUT_STDERR=$WORK/stderr.txt
RC=0                    # its exit status
GUARDED=()              # directories that must not change

# make_ckpt ROOT NAME [extra ckpt-synth options]
# A small committed checkpoint: --mesh 2x4 --tensors 3 --bytes 3MiB unless overridden
# by later options.
make_ckpt() {
    local root=$1 name=$2
    shift 2
    mkdir -p "$root" || fail "mkdir $root"
    if ! timeout "$TOOL_TIMEOUT" "$CKPT_SYNTH" "$root" --name "$name" --mesh 2x4 --tensors 3 \
            --bytes 3MiB "$@" >"$WORK/synth.txt" 2>&1; then
        cat "$WORK/synth.txt" >&2
        fail "ckpt-synth $root --name $name $* failed: cannot make the test checkpoint"
    fi
    [ -f "$root/$name/manifest.mdb" ] || fail "ckpt-synth made no $root/$name/manifest.mdb"
}

# corrupt_copy SRC_DIR DST_DIR: the copy a test may damage.
corrupt_copy() {
    mkdir -p "$(dirname "$2")"
    cp -a "$1" "$2" || fail "cp -a $1 $2"
}

# flip FILE POS MASK: XORs byte POS of FILE (a copy made by corrupt_copy) with MASK.
flip() {
    local byte
    byte=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
    [ -n "$byte" ] || fail "flip: $1 has no byte $2"
    printf '%b' "\\$(printf '%03o' $((byte ^ $3)))" |
        dd of="$1" bs=1 seek="$2" conv=notrunc status=none || fail "flip: writing $1"
}

# hold_lock LOCKFILE: a live process holds LOCKFILE as a writer holds a save's lock
# (flock on one descriptor), recorded in it as "pid P on HOST"; its pid is $HOLDER,
# killed when the test exits.
HOLDER=
hold_lock() {
    command -v flock >/dev/null || skip "no flock (util-linux)"
    ( exec 9>>"$1" >/dev/null 2>&1; flock -x 9; exec sleep 300 ) &
    HOLDER=$!
    trap 'kill $HOLDER 2>/dev/null; rm -rf "$WORK"' EXIT
    for _ in $(seq 100); do
        flock -n -s "$1" true || break
        sleep 0.05
    done
    echo "pid $HOLDER on $(hostname)" >"$1"
}

# mf_corrupt MANIFEST MUTATION [ARGS]: applies one mutation; its key=value facts are
# left in $MF (e.g. "tensor=t1 shard=0 file=rank-00004.dat").
MF=
mf_corrupt() {
    [ -n "${MF_CORRUPT:-}" ] && [ -x "$MF_CORRUPT" ] || skip "\$MF_CORRUPT is not set"
    MF=$("$MF_CORRUPT" "$@" 2>"$WORK/mf.err") || {
        cat "$WORK/mf.err" >&2
        fail "mf-corrupt $* failed: cannot make the bad manifest"
    }
    echo "mutation $2: $MF"
}

# mf_get KEY: a value from the last mf_corrupt's facts.
mf_get() {
    local kv
    for kv in $MF; do
        [ "${kv%%=*}" = "$1" ] && { echo "${kv#*=}"; return 0; }
    done
    fail "mf-corrupt reported no '$1' (got: $MF)"
}

# snapshot DIR: one line per path (type, size, mtime with ns, mode), then the SHA-256
# of every regular file, all in sorted path order.
snapshot() {
    (
        cd "$1" || exit 1
        find . -printf '%p %y %s %T@ %m\n' | sort
        find . -type f -print0 | sort -z | xargs -0 -r sha256sum
    )
}

# guard DIR: records DIR now; check_guards (called by finish) compares.
guard() {
    local i=${#GUARDED[@]}
    [ -d "$1" ] || fail "guard: $1 is not a directory"
    snapshot "$1" >"$WORK/guard.$i" || fail "snapshot of $1 failed"
    GUARDED+=("$1")
}

check_guards() {
    local i
    for i in "${!GUARDED[@]}"; do
        snapshot "${GUARDED[$i]}" >"$WORK/guard.$i.after" || fail "snapshot of ${GUARDED[$i]} failed"
        if ! cmp -s "$WORK/guard.$i" "$WORK/guard.$i.after"; then
            diff "$WORK/guard.$i" "$WORK/guard.$i.after" >&2
            fail "a tool wrote to ${GUARDED[$i]}, the checkpoint it was reading (diff above)"
        fi
    done
}

# run CMD...: runs a tool with a timeout, output in $OUT, status in $RC. Fails on a
# hang, runaway output (more than $OUT_MAX bytes on stdout: the pipe is cut there), a
# crash (status > 128) or a sanitizer report, whatever the status.
run() {
    local shown="$*"
    shown=${shown//$WORK/\$WORK}
    echo "\$ $shown"
    timeout -k 5 "$TOOL_TIMEOUT" "$@" 2>"$OUT_STDERR" | head -c "$OUT_MAX" >"$OUT_STDOUT"
    RC=${PIPESTATUS[0]}
    cat "$OUT_STDOUT" "$OUT_STDERR" >"$OUT"
    local lines
    lines=$(wc -l <"$OUT")
    if [ "$lines" -gt 200 ]; then
        head -n 100 "$OUT" | sed 's/^/  | /'
        echo "  | ... ($((lines - 150)) lines left out) ..."
        tail -n 50 "$OUT" | sed 's/^/  | /'
    else
        sed 's/^/  | /' "$OUT"
    fi
    echo "  -> exit $RC"
    [ "$RC" -ne 124 ] && [ "$RC" -ne 137 ] || fail "'$shown' hung (killed after ${TOOL_TIMEOUT}s)"
    [ "$(stat -c %s "$OUT_STDOUT")" -lt "$OUT_MAX" ] ||
        fail "'$shown' printed more than $OUT_MAX bytes ($lines lines kept), cut off with exit $RC: runaway output"
    [ "$RC" -le 128 ] || fail "'$shown' crashed: exit $RC (signal $((RC - 128)))"
    if grep -qE 'ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|SUMMARY: [A-Za-z]+Sanitizer' "$OUT"; then
        fail "'$shown' triggered a sanitizer report (exit $RC)"
    fi
    return 0
}

# expect_exit WANT CMD...: run, then the status must be WANT.
expect_exit() {
    local want=$1
    shift
    run "$@"
    local shown="$*"
    [ "$RC" -eq "$want" ] || fail "'${shown//$WORK/\$WORK}' exited $RC, expected $want"
}

# expect_msg ERE [WHAT]: the last run's output matches the extended regex.
expect_msg() {
    grep -qE -- "$1" "$OUT" || fail "the output does not name ${2:-/$1/} (no match for /$1/)"
}

# expect_no_msg ERE [WHAT]: it does not.
expect_no_msg() {
    ! grep -qE -- "$1" "$OUT" || fail "the output names ${2:-/$1/}, which it should not"
}

# re STRING: STRING with ERE metacharacters escaped.
re() {
    printf '%s' "$1" | sed 's/[][\.|$(){}?+*^]/\\&/g'
}

# finish: the guarded dirs are unchanged; pass.
finish() {
    check_guards
    echo "PASS [$TEST_NAME]"
    exit 0
}
