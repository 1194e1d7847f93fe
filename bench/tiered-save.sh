#!/usr/bin/env bash
# tiered-save - what saving into the tiers costs (issue 31, part 2): N ckptd with
# local tiers (N=4 unless set), one on each of N network-namespace hosts joined by a
# bridge (tests/launch/netns_lib.sh), one durable root, --replicas F --jump J (F=2 J=2
# unless set: each node's copy goes to the node two apart, every replica crosses the
# bridge; N=3 F=3 J=1: each node's copy goes to both others at once). N x RPN ranks,
# RPN per node (1 unless set; consecutive ranks on a node), save MiB per node through
# ckpt-synth --world N x RPN (hashing on), and the time from
# the start of the save to every rank's COMMITTED is taken at level local, replicated
# and durable (drained to the durable root as the save's last step, decision 0176), best
# of RUNS. Beside them, in the same run:
#   raw write   N files of MiB each written at once with O_DIRECT and fsync (dd),
#               on the same file system as the local tiers: the floor of a local commit
#   link        one TCP stream of MiB from host 0 to host 1 (python sockets):
#               what a replica's bytes can cross the link at
# With BEHIND=S, then drains that fall behind the saves (decision 0195): S saves at level
# replicated back to back, first with no drain, then with --drain-every 1 --drain-rate
# RATE (16MiB unless set) --keep-local 2, the drains far slower than the saves; it
# prints both medians, what became of each drain (committed, superseded, failed) and the
# most saves any node's local tier held at once (polled every 0.1 s).
# With LOST=R, only a drain after a node loss (decision 0198), R times in turn: a save at
# level replicated drained by n0 (ckptctl drain) as it stands, and another whose drain
# loses n1 (SIGKILL) as soon as n1 writes its part (in parts, decision 0197); each time
# from the drain's ask to its commit in n0's log. Needs F=2 J=2 on 4 nodes (n1's file
# then has its replica on n3, and n0 holds none of it).
# With SLOW=BPS, each node's local save writes slower than the link (decision 0206's
# case): its local tier is an ext4 file system on a loop device of its own, written by
# its ckptd (and by the raw write beside it) in a blkio cgroup whose
# blkio.throttle.write_bps_device limits that device to BPS bytes/s (cgroup v1, as
# Debian 12 mounts it here; io.max "MAJ:MIN wbps=BPS" under cgroup v2). The replicas a
# node takes in are not throttled: its .replicas is a directory of the machine's disk
# bind-mounted there, so a receiver has room for them beside its own save (a disk with
# headroom, whose save is paced by something else: the staging copies, the hashing).
# With SLOW_SHARED=1 as well, the replicas share the throttled disk with the node's own
# save (a disk that is the bound: each node's disk then writes F times its part).
# Root only (network namespaces); UCX on TCP (UCX_TLS=tcp), as on a cluster's network.
#   [N= F= J= RPN=] [SLOW=BPS] [BEHIND=S RATE=] [LOST=R] bench/tiered-save.sh [BUILDDIR] [MiB per node] [RUNS]
set -uo pipefail
b=$(realpath "${1:-build}")
mib=${2:-256}
runs=${3:-3}
N=${N:-4} F=${F:-2} J=${J:-2} RPN=${RPN:-1}
nodes=$(seq 0 $((N - 1)))
work=$(mktemp -d "${TMPDIR:-/var/tmp}/tiered-save.XXXXXX")
pids=()
. "$(dirname "$0")/../tests/launch/netns_lib.sh"
loops=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    netns_cleanup
    local i
    for i in $nodes; do
        mountpoint -q "$work/n$i.local/.replicas" && umount "$work/n$i.local/.replicas"
        mountpoint -q "$work/n$i.local" && umount "$work/n$i.local"
        rmdir "/sys/fs/cgroup/blkio/tiered-save-n$i" 2>/dev/null
    done
    for l in "${loops[@]}"; do losetup -d "$l"; done
    rm -rf "$work"
}
trap cleanup EXIT
NETNS_N=$N
netns_setup "$work" || exit $?
export UCX_TLS=tcp
mkdir -p "$work/durable"
# slowed CMD... &: CMD, in node $i's throttled cgroup when SLOW is set. Only ever run
# in the background: the subshell & makes becomes CMD (exec), so that $! is CMD's pid.
slowed() { exec "$@"; }
if [ -n "${SLOW:-}" ]; then
    for i in $nodes; do
        truncate -s 64G "$work/n$i.img" && mkfs.ext4 -q -F "$work/n$i.img" &&
            loops+=("$(losetup -f --show "$work/n$i.img")") &&
            mkdir -p "$work/n$i.local" "$work/n$i.rep" &&
            mount "${loops[i]}" "$work/n$i.local" && mkdir -m 700 "$work/n$i.local/.replicas" &&
            { [ -n "${SLOW_SHARED:-}" ] || mount --bind "$work/n$i.rep" "$work/n$i.local/.replicas"; } &&
            mkdir -p "/sys/fs/cgroup/blkio/tiered-save-n$i" &&
            echo "$(lsblk -dno MAJ:MIN "${loops[i]}" | tr -d ' ') $SLOW" \
                >"/sys/fs/cgroup/blkio/tiered-save-n$i/blkio.throttle.write_bps_device" ||
            { echo "tiered-save: SLOW: setting up node $i's throttled local tier failed" >&2; exit 1; }
    done
    slowed() { exec sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' \
                  "/sys/fs/cgroup/blkio/tiered-save-n$i" "$@"; }
fi
# daemons tiered|plain: N ckptd, with local tiers and replicas or (plain) today's.
daemons() {
    local i addr
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    pids=()
    for i in $nodes; do
        addr=${NETNS_ADDRS[$i]}
        mkdir -p "$work/n$i.local"
        rm -f "$work/n$i.sock" "$work/durable/.ckptd.n$i.peer"
        local tiers=(--local-root "$work/n$i.local" --peer-listen "$addr:0" --replicas "$F" --jump "$J")
        [ "$1" = behind ] && tiers+=(--drain-every 1 --drain-rate "${RATE:-16MiB}" --keep-local 2)
        [ "$1" = plain ] && tiers=()
        slowed "$work/on-${NETNS_HOSTS[$i]}" "$b/ckptd/ckptd" --root "$work/durable" --id "n$i" "${tiers[@]}" \
            --socket "$work/n$i.sock" --staging "$((mib * 3 / 2 + 64))MiB" --foreground \
            --log "$work/n$i.log" --part-timeout 120 --peer-timeout 30 &
        pids+=($!)
    done
    # Each up (its socket, and its address once it took its lock), or the bench stops.
    for i in $nodes; do
        for _ in $(seq 200); do
            [ -S "$work/n$i.sock" ] && { [ "$1" = plain ] || [ -s "$work/durable/.ckptd.n$i.peer" ]; } && break
            kill -0 "${pids[$i]}" 2>/dev/null || break
            sleep 0.05
        done
        if ! kill -0 "${pids[$i]}" 2>/dev/null || [ ! -S "$work/n$i.sock" ]; then
            echo "tiered-save: ckptd n$i did not start:" >&2
            tail -5 "$work/n$i.log" >&2
            exit 1
        fi
    done
}
socks=$(for i in $nodes; do printf '%s,' "$work/n$i.sock"; done)
socks=${socks%,}

# save NAME LEVEL [KEY]: seconds from the save's start to every rank's COMMITTED (and
# the longest submit stall of its ranks appended to $work/stall.KEY, KEY LEVEL's
# default).
save() {
    local t0 t1
    t0=$(date +%s.%N)
    "$b/tools/ckpt-synth" "$work/durable" --name "$1" --mesh "$((N * RPN))" --tensors 4 \
        --bytes "$((mib * N))MiB" --world "$((N * RPN))" --daemon "$socks" --level "$2" \
        >"$work/out" 2>&1 ||
        { cat "$work/out" >&2; exit 1; }
    t1=$(date +%s.%N)
    grep -q "committed at level $2\$" "$work/out" || { cat "$work/out" >&2; exit 1; }
    sed -n 's/.*the submit stalled \([0-9.]*\) s.*/\1/p' "$work/out" | sort -g | tail -1 \
        >>"$work/stall.${3:-$2}"
    echo "$t1 - $t0" | bc -l
}
best() { sort -g | head -1; }
median() { sort -g | awk '{ a[NR] = $1 } END { print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# drained NAME [KILL]: seconds from asking n0 to drain NAME to its commit there; with
# KILL, node KILL's daemon is killed once it writes its part of the drain.
drained() {
    local t0 t1 name=$1 kill=${2:-}
    t0=$(date +%s.%N)
    "$b/ckptd/ckptctl" drain --socket "$work/n0.sock" "$name" >/dev/null || exit 1
    if [ -n "$kill" ]; then
        for _ in $(seq 3000); do
            grep -q "PART of $name: writing" "$work/n$kill.log" && break
            sleep 0.01
        done
        kill -9 "${pids[$kill]}"
        wait "${pids[$kill]}" 2>/dev/null
    fi
    for _ in $(seq 12000); do
        grep -qE "drain of $name: committed in the durable root" "$work/n0.log" && break
        grep -qE "drain of $name failed" "$work/n0.log" && { grep "drain of $name" "$work/n0.log" >&2; exit 1; }
        sleep 0.01
    done
    t1=$(date +%s.%N)
    grep -hE "drain of $name: (in parts|not drained in parts|ckptd n[0-9]+'s part failed)" \
        "$work/n0.log" | sed 's/^/  log| /' >&2
    echo "$t1 - $t0" | bc -l
}
if [ -n "${LOST:-}" ]; then
    [ "$N" = 4 ] && [ "$F" = 2 ] && [ "$J" = 2 ] || { echo "LOST needs N=4 F=2 J=2" >&2; exit 2; }
    for r in $(seq "$LOST"); do
        daemons tiered
        save "whole-$r" replicated >/dev/null
        drained "whole-$r" >>"$work/whole.t"
        save "lost-$r" replicated >/dev/null
        drained "lost-$r" 1 >>"$work/lost.t"
    done
    printf 'drain after a node loss: %d MiB per node (%d MiB a save), F=2 J=2, %d runs (min / median / max)\n' \
        "$mib" "$((mib * N))" "$LOST"
    for k in whole lost; do
        what="drain, no node lost"
        [ $k = lost ] && what="drain, n1 lost mid-part"
        printf '%-28s %8.3f %8.3f %8.3f s\n' "$what" "$(best <"$work/$k.t")" \
            "$(median <"$work/$k.t")" "$(sort -g "$work/$k.t" | tail -1)"
    done
    exit 0
fi

declare -A T
daemons plain
T[durable]=$(for r in $(seq "$runs"); do save "durable-$r" durable; done | best)
daemons tiered
for level in local replicated; do
    T[$level]=$(for r in $(seq "$runs"); do save "$level-$r" "$level"; done | best)
done
T[tiered]=$(for r in $(seq "$runs"); do save "tiered-$r" durable tiered; done | best)
raw=$(for r in $(seq "$runs"); do
    t0=$(date +%s.%N)
    for i in $nodes; do
        slowed dd if=/dev/zero of="$work/n$i.local/raw" bs=1M count="$mib" oflag=direct \
            conv=fsync status=none &
    done
    wait
    t1=$(date +%s.%N)
    rm -f "$work"/n*.local/raw
    echo "$t1 - $t0" | bc -l
done | best)
cat >"$work/link.py" <<'PY'
import socket, sys, time
n = int(sys.argv[2]) << 20
if sys.argv[1] == "recv":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[3], 29555)); s.listen(1); c, _ = s.accept(); got = 0
    while got < n:
        k = len(c.recv(1 << 20)); got += k
        if not k: break
    c.sendall(b"k"); c.close()
else:
    c = socket.create_connection((sys.argv[3], 29555)); buf = b"\0" * (1 << 20)
    t0 = time.monotonic()
    for _ in range(n >> 20): c.sendall(buf)
    c.recv(1); print(time.monotonic() - t0)
PY
link=$(for r in $(seq "$runs"); do
    "$work/on-${NETNS_HOSTS[1]}" python3 "$work/link.py" recv "$mib" "${NETNS_ADDRS[1]}" &
    sleep 0.3
    "$work/on-${NETNS_HOSTS[0]}" python3 "$work/link.py" send "$mib" "${NETNS_ADDRS[1]}"
    wait
done | best)
gb() { echo "$1 / $2 / 1000" | bc -l; }
total=$((mib * N))
printf 'tiered-save: %d nodes on %d netns hosts, %d rank(s) and %d MiB per node (%d MiB a save), F=%d J=%d, best of %d\n' \
    "$N" "$N" "$RPN" "$mib" "$total" "$F" "$J" "$runs"
[ -z "${SLOW:-}" ] || printf 'each local tier written at most %s bytes/s (SLOW; %s)\n' "$SLOW" \
    "$([ -n "${SLOW_SHARED:-}" ] && echo "replicas on the same disk" || echo "replicas not throttled")"
printf '%-28s %10s %10s %14s\n' "" "seconds" "GB/s" "stall s (best)"
stall() { sort -g "$work/stall.$1" | head -1; }
for level in durable local replicated tiered; do
    what="save to level $level"
    [ $level = durable ] && what="save, no tiers (durable)"
    [ $level = tiered ] && what="save to level durable"
    printf '%-28s %10.3f %10.2f %14.3f\n' "$what" "${T[$level]}" \
        "$(gb $((total * 1048576 / 1000000)) "${T[$level]}")" "$(stall $level)"
done
printf '%-28s %10.3f %10.2f\n' "raw O_DIRECT write, $N files" "$raw" "$(gb $((total * 1048576 / 1000000)) "$raw")"
printf '%-28s %10.3f %10.2f\n' "link: 1 TCP stream, 0->1" "$link" "$(gb $((mib * 1048576 / 1000000)) "$link")"
printf 'replicated / local: %.2fx (goal 1.2x); durable / local: %.2fx\n' \
    "$(echo "${T[replicated]} / ${T[local]}" | bc -l)" "$(echo "${T[tiered]} / ${T[local]}" | bc -l)"
grep -hE "replicated to|copy committed|as they are written|begun beside|after the commit|had gone" "$work"/n*.log | grep "replicated-$runs\b\|replicated-$runs:" | sed 's/^/  log| /'

[ "${BEHIND:-0}" -gt 0 ] || exit 0
# Drains that fall behind: the same saves without drains, then with them.
# Drains of the phase that ended: committed, superseded or failed.
ended() { grep -hcE "drain of behind-[0-9]+(: committed in the durable root|: not drained: superseded by| failed: )" "$work"/n*.log | paste -sd+ | bc; }
# In turn, twice (this machine's speed drifts from minute to minute): S saves without
# drains, then S with them; each median over both rounds.
lvl=${BEHIND_LEVEL:-replicated}
# The most saves of this phase any node's local tier holds at once: its own copies,
# replicas and fetched copies, by name (committed ones: not a pending NAME.TOKEN).
( most=0
  while [ ! -e "$work/behind.done" ]; do
      for i in $nodes; do
          k=$(find "$work/n$i.local" -maxdepth 3 -type d -regex '.*/behind-[0-9]+' -printf '%f\n' \
              2>/dev/null | sort -u | wc -l)
          [ "$k" -le "$most" ] || most=$k
      done
      echo "$most" >"$work/behind.most"
      sleep 0.1
  done ) &
watcher=$!
# Where the CPU went while each phase's saves ran: the daemons' own CPU seconds
# (utime + stime of the N ckptd) and the machine's (all cores, from /proc/stat), summed
# over the phase's saves, so that a slowdown can be set beside what the drains cost.
tck=$(getconf CLK_TCK)
dcpu() { local p t=0; for p in "${pids[@]}"; do
    t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || echo 0))); done
    echo "$t / $tck" | bc -l; }
mcpu() { awk '/^cpu / { print ($2 + $3 + $4 + $7 + $8) / '"$tck"', ($2 + $3 + $4 + $5 + $6 + $7 + $8) / '"$tck"' }' /proc/stat; }
# phase KEY NAME...: the saves NAME..., with the CPU they took added to $work/cpu.KEY
# (daemons' seconds, machine busy seconds, machine seconds).
phase() {
    local key=$1 d0 m0 d1 m1 n
    shift
    d0=$(dcpu); m0=$(mcpu)
    for n in "$@"; do save "$n" "$lvl" "$key"; done >>"$work/$key.t"
    d1=$(dcpu); m1=$(mcpu)
    echo "$d0 $m0 $d1 $m1" | awk '{ print $4 - $1, $5 - $2, $6 - $3 }' >>"$work/cpu.$key"
}
for round in 1 2; do
    daemons tiered
    phase alone $(for r in $(seq "$BEHIND"); do echo "alone-$round-$r"; done)
    daemons behind
    phase behind $(for r in $(seq "$BEHIND"); do echo "behind-$(((round - 1) * BEHIND + r))"; done)
    # The drains of the round end before the next round's saves without them.
    for _ in $(seq 6000); do
        [ "$(ended)" -ge "$((round * BEHIND))" ] && break
        sleep 0.1
    done
done
alone=$(median <"$work/alone.t")
behind=$(median <"$work/behind.t")
touch "$work/behind.done"
wait "$watcher"
count() { grep -hcE "drain of behind-[0-9]+$1" "$work"/n*.log | paste -sd+ | bc; }
printf 'drains behind the saves: 2 x %d saves of %d MiB at level %s, --drain-every 1 --drain-rate %s --keep-local 2\n' \
    "$BEHIND" "$total" "$lvl" "${RATE:-16MiB}"
printf '%-28s %10.3f\n' "save, no drain (median)" "$alone"
printf '%-28s %10.3f  %.2fx\n' "save, drains behind (median)" "$behind" "$(echo "$behind / $alone" | bc -l)"
# cpu KEY: the phase's daemons' CPU seconds a save, and the machine's busy share.
cpu() { awk -v n="$((2 * BEHIND))" '{ d += $1; b += $2; a += $3 } END {
    printf "%.3f s a save in the daemons, the machine %.0f%% busy", d / n, 100 * b / a }' "$work/cpu.$1"; }
printf '%-28s %s\n' "  CPU, no drain" "$(cpu alone)"
printf '%-28s %s\n' "  CPU, drains behind" "$(cpu behind)"
printf 'drains: %d committed, %d superseded, %d failed; the most saves a local tier held at once: %d\n' \
    "$(count ': committed in the durable root')" "$(count ': not drained: superseded by')" \
    "$(count ' failed: ')" "$(cat "$work/behind.most")"
grep -hE "drain of behind-[0-9]+(: committed in the durable root|: not drained: superseded by| failed: )" \
    "$work"/n*.log | sed 's/^/  log| /'
