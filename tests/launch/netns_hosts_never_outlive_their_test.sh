#!/usr/bin/env bash
# The hosts of netns_lib.sh never outlive the test that made them: a test with
# NETNS_N=4 (four host namespaces, a switch namespace, a bridge, four veth pairs, a
# process on every host) ends three ways, and each time, within 5 s, nothing of it is
# left: no namespace of its in `ip netns list`, no link of its (veth end, bridge) in
# the machine's namespace or any namespace left, no process it started on a host.
#   1. it exits: its EXIT trap runs netns_cleanup;
#   2. SIGKILL to its shell alone (no trap runs; the processes on its hosts live on);
#   3. SIGKILL to its whole process group, as meson's timeout does.
# Skipped (77) where network namespaces cannot be made.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d "${TMPDIR:-/var/tmp}/netns-outlive.XXXXXX")
session=
trap '[ -z "$session" ] || kill -9 -- "-$session" 2>/dev/null; rm -rf "$out"' EXIT
fail() { echo "FAILED: $*"; exit 1; }

# The test: makes the hosts, starts a sleeper on each, prints its pid, its hosts' id,
# how many namespaces of its exist and the sleepers' pids, then exits (MODE exit) or
# waits to be killed.
cat >"$out/hosts.sh" <<EOF
#!/usr/bin/env bash
set -u
. "$here/netns_lib.sh"
NETNS_N=4
netns_start outlive
for h in "\${NETNS_HOSTS[@]}"; do "\$work/on-\$h" sleep 600 & done
# Each is on its host once it is sleep (exec all the way, after the setns).
for p in \$(jobs -p); do
    for _ in \$(seq 200); do [ "\$(readlink /proc/\$p/exe)" = "\$(command -v sleep)" ] && break; sleep 0.05; done
done
id=\$((\$\$ % 100000))
echo "shell \$\$ id \$id made \$(ip netns list | grep -cE "^srn\$id(a|b|c|d|sw)( |\\\$)") sleepers \$(jobs -p | tr '\n' ' ')"
[ "\$1" = exit ] && exit 0
# Waits in the shell itself (read, a builtin), so a SIGKILL to it leaves no child of
# its own behind, only what runs on its hosts.
mkfifo "\$work/never" && read -r -t 600 _ <>"\$work/never"
EOF
chmod +x "$out/hosts.sh"

# left ID: what is left of the test whose hosts have id ID (namespaces and links).
left() {
    local n
    ip netns list 2>/dev/null | grep -E "^srn$1(a|b|c|d|sw)( |\$)"
    for n in $(ip netns list 2>/dev/null | cut -d' ' -f1); do
        ip -n "$n" -o link show 2>/dev/null | grep -E ": (v|w|br)$1[a-z]?[@:]"
    done
    ip -o link show 2>/dev/null | grep -E ": (v|w|br)$1[a-z]?[@:]"
}

# running PID...: those of PID... that still run (a zombie, dead but not yet reaped by
# whoever inherited it, does not count).
running() {
    local p st
    for p; do
        st=$(sed 's/.*) //; s/ .*//' "/proc/$p/stat" 2>/dev/null) && [ "$st" != Z ] && echo "$p"
    done
}

# ends WHAT MODE HOW: runs the test in a session of its own, ends it (HOW: none, shell
# or group), and waits 5 s at most for nothing of it to be left.
ends() {
    local what=$1 mode=$2 how=$3 line= shell id sleepers log=$out/$3.log
    setsid "$out/hosts.sh" "$mode" >"$log" 2>&1 &
    session=$!
    for _ in $(seq 200); do
        grep -q '^skip:' "$log" && { cat "$log"; exit 77; }
        line=$(grep '^shell ' "$log") && break
        sleep 0.05
    done
    [ -n "$line" ] || { cat "$log"; fail "$what: the test never made its hosts"; }
    read -r _ shell _ id _ made _ sleepers <<<"$line"
    [ "$made" -eq 5 ] || fail "$what: $made namespaces made, not 4 hosts and a switch"
    case $how in
    shell) kill -9 "$shell" ;;
    group) kill -9 -- "-$shell" ;;
    esac
    for _ in $(seq 100); do
        [ -z "$(left "$id")" ] && [ -z "$(running $sleepers)" ] && break
        sleep 0.05
    done
    [ -z "$(left "$id")" ] || fail "$what: left behind: $(left "$id")"
    [ -z "$(running $sleepers)" ] || fail "$what: processes on its hosts outlived it: $(running $sleepers)"
    [ "$(wc -w <<<"$sleepers")" -eq 4 ] || fail "$what: not a process on each of 4 hosts: $sleepers"
    session=
    echo "ok: $what leaves nothing"
}
ends "a test that exits" exit none
ends "a test whose shell is killed (SIGKILL)" wait shell
ends "a test whose process group is killed (SIGKILL)" wait group
