#!/usr/bin/env bash
# drain.sh - what a drain to the durable tier costs the local saves (issue 31, part 3;
# docs/BENCHMARKS.md, "Issue 31: drain").
#
# One ckptd with a local tier L and a durable root D on the same disk (the worst case
# for the saves: on a cluster D is another file system and only L's reads are shared).
# Checkpoint big (BIG bytes) is a complete own copy in L, to be drained. First it is
# drained alone, at --drain-rate RATE and unpaced, the page cache dropped before each:
# the drain's seconds (its log) and the daemon's CPU seconds over it, beside one
# O_DIRECT read of its files and their SHA-256 on one core (openssl speed). Then each
# phase times SAVES local saves of SAVE bytes (ckpt-synth into a root on L's disk: the
# engine's write, SHA-256, fsync and commit; its "commit total"):
#   alone       no drain (before the others, and after them);
#   paced       while big drains at --drain-rate RATE;
#   unpaced     while big drains unpaced (--drain-rate 0);
# beside the raw local write (dd, O_DIRECT, fsynced, of SAVE bytes). A phase checks
# that its drain was still running after its last save, and reports the drain's
# throughput from the daemon's log beside its rate.
# DURABLE=DIR puts D there instead (another disk, a tmpfs: the durable tier elsewhere,
# as on a cluster, so that only the drain's reads meet the saves).
#   bench/drain.sh [BUILDDIR]   (env: SAVE=256MiB BIG=2GiB RATE=64MiB SAVES=5 DURABLE=)
set -euo pipefail
b=${1:-build}
SAVE=${SAVE:-256MiB} BIG=${BIG:-2GiB} RATE=${RATE:-64MiB} SAVES=${SAVES:-5}
W=$(mktemp -d "${TMPDIR:-/var/tmp}/drainbench.XXXXXX")
pid=
trap '[ -z "$pid" ] || kill -9 "$pid" 2>/dev/null; rm -rf "$W"' EXIT
D=${DURABLE:-$W/D}
mkdir -p "$W/L" "$D" "$W/saves"
bytes() { numfmt --from=iec "${1%iB}"; }

"$b/tools/ckpt-synth" "$W/L" --name big --mesh 4 --tensors 4 --bytes "$BIG" >/dev/null
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true

raw() {
    local t0 t1
    t0=$(date +%s.%N)
    dd if=/dev/zero of="$W/raw" bs=1M count=$(($(bytes "$SAVE") >> 20)) oflag=direct \
        conv=fsync status=none
    t1=$(date +%s.%N)
    rm -f "$W/raw"
    echo "$t1 - $t0" | bc
}

# saves PHASE: SAVES saves, their commit times, one a line.
saves() {
    local i
    for i in $(seq "$SAVES"); do
        "$b/tools/ckpt-synth" "$W/saves" --name "s-$1-$i" --mesh 4 --tensors 4 \
            --bytes "$SAVE" --seed "$i" | sed -n 's/.*commit total \([0-9.]*\) s.*/\1/p'
        "$b/tools/ckpt-rm" "$W/saves" "s-$1-$i" >/dev/null
    done
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

daemon() {
    "$b/ckptd/ckptd" --root "$D" --local-root "$W/L" --id n0 --foreground \
        --log "$W/n0.log" --socket "$W/n0.sock" --drain-rate "$1" &
    pid=$!
    for _ in $(seq 100); do
        [ -S "$W/n0.sock" ] && return 0
        sleep 0.05
    done
    echo "ckptd did not start" >&2; cat "$W/n0.log" >&2; exit 1
}

stop() {
    kill -TERM "$pid"; wait "$pid" || true; pid=
    rm -f "$W/n0.sock"
}

# alone RATE: big drained at RATE with nothing beside it, the page cache dropped
# first; prints the drain's seconds (its log) and the daemon's CPU seconds over it
# (user + system, /proc/PID/stat).
alone() {
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
    daemon "$1"
    local c0 c1
    c0=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
    "$b/ckptd/ckptctl" drain --socket "$W/n0.sock" big >/dev/null
    until "$b/ckptd/ckptctl" drain --socket "$W/n0.sock" | grep -qE "^big: (done|failed)"; do
        sleep 0.1
    done
    c1=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
    local secs
    secs=$(sed -n 's/.*drain of big: committed .* bytes in \([0-9.]*\) s.*/\1/p' "$W/n0.log" | tail -1)
    stop
    "$b/tools/ckpt-rm" "$D" big >/dev/null
    echo "$secs $(echo "scale=2; ($c1 - $c0) / $(getconf CLK_TCK)" | bc)"
}

# phase NAME RATE: saves while big drains at RATE; the drain ended after them?
phase() {
    daemon "$2"
    "$b/ckptd/ckptctl" drain --socket "$W/n0.sock" big >/dev/null
    until "$b/ckptd/ckptctl" drain --socket "$W/n0.sock" | grep -q "^big: running, [1-9]"; do
        sleep 0.05
    done
    local t
    t=$(saves "$1" | median)
    local st
    st=$("$b/ckptd/ckptctl" drain --socket "$W/n0.sock" | grep "^big:")
    case "$st" in
        "big: running"*) ;;
        *) echo "warning: the $1 drain ended before its last save ($st)" >&2 ;;
    esac
    until "$b/ckptd/ckptctl" drain --socket "$W/n0.sock" | grep -qE "^big: (done|failed)"; do
        sleep 0.2
    done
    local mbs
    mbs=$(sed -n 's/.*drain of big: committed .* (\([0-9.]*\) MB\/s.*/\1/p' "$W/n0.log" | tail -1)
    stop
    "$b/tools/ckpt-rm" "$D" big >/dev/null
    echo "$t $mbs"
}

# The drain alone, beside the physical floors of its work: one O_DIRECT read of big's
# data files and the SHA-256 of their bytes on one core.
read -r alone_paced alone_paced_cpu < <(alone "$RATE")
read -r alone_unpaced alone_unpaced_cpu < <(alone 0)
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
t0=$(date +%s.%N)
for f in "$W/L/big"/*.dat; do dd if="$f" of=/dev/null bs=1M iflag=direct status=none; done
rd=$(echo "$(date +%s.%N) - $t0" | bc)
sha=$(openssl speed -seconds 1 -bytes 1048576 sha256 2>/dev/null |
      awk '/^sha256/ { sub("k", "", $2); print $2 * 1000 }')

# The saves without a drain before and after the others, one median of both: the
# machine's drift (other work, the page cache) falls on both sides.
r=$(raw)
saves alone1 > "$W/alone"
read -r paced paced_mbs < <(phase paced "$RATE")
read -r unpaced unpaced_mbs < <(phase unpaced 0)
saves alone2 >> "$W/alone"
alone=$(median < "$W/alone")
rate_mbs=$(echo "scale=1; $(bytes "$RATE") / 1000000" | bc)
pct() { echo "scale=1; 100 * ($1 - $alone) / $alone" | bc; }
echo "drain bench: a drain of $BIG alone, then local saves of $SAVE beside it (median of $SAVES; no drain: of $((2 * SAVES)), before and after), D ${DURABLE:-on the disk of L}"
big_b=$(bytes "$BIG")
printf '%-34s %8s s  the daemon'"'"'s CPU %.2f s\n' "drain alone at --drain-rate" \
    "$alone_paced" "$alone_paced_cpu"
printf '%-34s %8s s  the daemon'"'"'s CPU %.2f s\n' "drain alone, unpaced" "$alone_unpaced" \
    "$alone_unpaced_cpu"
printf '%-34s %8.3f s\n' "raw O_DIRECT read of its files" "$rd"
printf '%-34s %8.2f s  (one core, openssl speed)\n' "SHA-256 of its bytes" \
    "$(echo "$big_b / $sha" | bc -l)"
printf '%-34s %8s s\n' "raw local write (dd O_DIRECT+fsync)" "$r"
printf '%-34s %8s s\n' "local save, no drain" "$alone"
printf '%-34s %8s s  (%+.1f%%)  drain %s MB/s, limit %s MB/s\n' \
    "local save, drain at --drain-rate" "$paced" "$(pct "$paced")" "$paced_mbs" "$rate_mbs"
printf '%-34s %8s s  (%+.1f%%)  drain %s MB/s, unpaced\n' \
    "local save, drain unpaced" "$unpaced" "$(pct "$unpaced")" "$unpaced_mbs"
