#!/usr/bin/env bash
# Every bad command line of shardrun ends with exit 2 and a message that names what is
# wrong, before anything runs; nodes that cannot meet end the same way, within their
# --join-timeout, never hanging.
#   bad_arguments.sh SHARDRUN
set -uo pipefail
shardrun=$1
work=$(mktemp -d "${TMPDIR:-/var/tmp}/shardrun-bad.XXXXXX")
pids=
cleanup() {
    for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
fails=0 n=0

# expect WANT_RC PATTERN ARGS...: shardrun ARGS exits WANT_RC ("nonzero": any but 0)
# and its stderr matches PATTERN (grep -E).
expect() {
    local want=$1 pat=$2 rc
    shift 2
    n=$((n + 1))
    timeout 60 "$shardrun" "$@" >"$work/out" 2>"$work/err"
    rc=$?
    if { [ "$want" = nonzero ] && [ "$rc" -eq 0 ]; } ||
       { [ "$want" != nonzero ] && [ "$rc" -ne "$want" ]; } ||
       ! grep -Eq -- "$pat" "$work/err"; then
        echo "FAILED: shardrun $* -> exit $rc (want $want), stderr:"; cat "$work/err"
        echo "  (wanted a message matching: $pat)"
        fails=$((fails + 1))
    fi
}

# A TCP port on 127.0.0.1 that nothing listens on (bound, then let go).
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
command -v python3 >/dev/null || { echo "skip: no python3 to find a free port"; exit 77; }

expect 2 'nproc-per-node is required' true
expect 2 'nproc-per-node needs a value' --nproc-per-node
expect 2 "from 1 to 4096, not '0'" --nproc-per-node 0 true
expect 2 "not 'x2'" --nproc-per-node x2 true
expect 2 'no PROGRAM' --nproc-per-node 2
expect 2 'no PROGRAM' --nproc-per-node 2 --
expect 2 'unknown option --bogus' --nproc-per-node 2 --bogus true
expect 2 "nnodes wants a whole number from 1 to 4096, not '0'" --nproc-per-node 2 --nnodes 0 true
expect 2 'nnodes needs a value' --nproc-per-node 2 --nnodes
expect 2 'nnodes 2 needs --master-addr' --nproc-per-node 2 --nnodes 2 --node-rank 0 true
expect 2 "nnodes 2 needs this node's --node-rank" --nproc-per-node 2 --nnodes 2 \
    --master-addr 127.0.0.1 true
expect 2 'node-rank 2 is not below --nnodes 2' --nproc-per-node 2 --nnodes 2 --node-rank 2 \
    --master-addr 127.0.0.1 true
expect 2 'node-rank 1 is not below --nnodes 1' --nproc-per-node 2 --node-rank 1 true
expect 2 "node-rank wants a whole number from 0 to 4095, not '-1'" --nproc-per-node 2 \
    --nnodes 2 --node-rank -1 --master-addr 127.0.0.1 true
expect 2 "master-port wants a whole number from 1 to 65535, not '70000'" --nproc-per-node 2 \
    --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port 70000 true
expect 2 'master-addr needs a value, not an empty string' --nproc-per-node 2 --nnodes 2 \
    --node-rank 0 --master-addr= true
expect 2 "join-timeout wants seconds above 0, not '0'" --nproc-per-node 2 --join-timeout 0 true
expect 2 "join-timeout wants seconds above 0, not 'soon'" --nproc-per-node 2 \
    --join-timeout soon true
expect 2 "node-name 'a b' is not a host name" --nproc-per-node 2 --node-name 'a b' true
# torchrun's underscore spellings are the same options.
expect 2 'node-rank 3 is not below --nnodes 2' --nproc_per_node 2 --nnodes 2 --node_rank 3 \
    --master_addr 127.0.0.1 true

# Host files.
expect 2 "hostfile $work/none: No such file" --nproc-per-node 2 --hostfile "$work/none" true
printf '# nobody\n\n' >"$work/empty"
expect 2 'names no host' --nproc-per-node 2 --hostfile "$work/empty" true
printf 'a slots=2\nb/c\n' >"$work/badhost"
expect 2 "badhost:2: 'b/c' is not a host name" --nproc-per-node 2 --hostfile "$work/badhost" true
printf 'a cpus=4\n' >"$work/badkey"
expect 2 "badkey:1: 'cpus=4': a host line is HOST" --nproc-per-node 2 \
    --hostfile "$work/badkey" true
printf 'a slots=many\n' >"$work/badslots"
expect 2 "slots=many wants a whole number .* not 'many'" --nproc-per-node 2 \
    --hostfile "$work/badslots" true
printf 'a\nb\na slots=1\n' >"$work/twice"
expect 2 'twice:3: host a is listed twice' --nproc-per-node 2 --hostfile "$work/twice" true
printf 'a\nb\n' >"$work/two"
expect 2 'nnodes 3, but --hostfile .*two lists 2 hosts' --nproc-per-node 2 --nnodes 3 \
    --hostfile "$work/two" true
expect 2 'hostfile starts every node from here' --nproc-per-node 2 --hostfile "$work/two" \
    --master-addr 127.0.0.1 true
expect 2 'hostfile starts every node from here' --nproc-per-node 2 --hostfile "$work/two" \
    --node-rank 1 true
expect 2 "hostfile $work: " --nproc-per-node 2 --hostfile "$work" true

# Not a bad command line: five hosts that cannot be reached, each node's context as long
# as it gets (CKPTD_SOCKET and CKPTD_NODES forwarded). shardrun must build mpirun's
# command (it once wrote past it from three nodes: ASan's abort here) and mpirun must
# be the one that fails.
printf 'h1\nh2\nh3\nh4\nh5\n' >"$work/five"
CKPTD_SOCKET=/nonexistent.sock CKPTD_NODES=5 OMPI_MCA_plm_rsh_agent=false \
    expect nonzero 'ORTE was unable to reliably start' --nproc-per-node 2 \
    --hostfile "$work/five" true

# Nodes that cannot meet. Node 1 with no node 0 listening gives up after its
# --join-timeout; node 0 alone gives up naming the node ranks that never came.
port=$(free_port)
expect 2 "node 1: cannot reach the master at 127.0.0.1:$port within 1 s \(--join-timeout\)" \
    --nproc-per-node 2 --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port "$port" \
    --join-timeout 1 true
expect 2 "node 1: --master-addr no-such-host.invalid --master-port 29500: " \
    --nproc-per-node 2 --nnodes 2 --node-rank 1 --master-addr no-such-host.invalid \
    --join-timeout 1 true
port=$(free_port)
expect 2 "node 0: only 1 of 3 nodes joined 127.0.0.1:$port within 1 s \(missing node ranks: 1, 2\)" \
    --nproc-per-node 2 --nnodes 3 --node-rank 0 --master-addr 127.0.0.1 --master-port "$port" \
    --join-timeout 1 true
expect 2 "node 0 cannot listen on 192.0.2.1:" --nproc-per-node 2 --nnodes 2 --node-rank 0 \
    --master-addr 192.0.2.1 --join-timeout 1 true

# Nodes that disagree, or that mpirun could not tell apart: node 0 refuses the job
# and says why on both sides.
# join_mismatch PATTERN NODE0_ARGS -- NODE1_ARGS
join_mismatch() {
    local pat=$1 a=() b=()
    shift
    while [ "$1" != -- ]; do a+=("$1"); shift; done
    shift
    b=("$@")
    local port
    port=$(free_port)
    timeout 60 "$shardrun" "${a[@]}" --master-addr 127.0.0.1 --master-port "$port" \
        --join-timeout 20 true >"$work/m.out" 2>"$work/m.err" &
    local m=$!
    pids="$pids $m"
    expect 2 "node 0 refused the job: $pat" "${b[@]}" --master-addr 127.0.0.1 \
        --master-port "$port" --join-timeout 20 true
    wait "$m"
    local rc=$?
    n=$((n + 1))
    if [ "$rc" -ne 2 ] || ! grep -Eq -- "node 0: $pat" "$work/m.err"; then
        echo "FAILED: node 0 of a mismatched join exited $rc, stderr:"; cat "$work/m.err"
        fails=$((fails + 1))
    fi
}
join_mismatch 'node 1 \(.*\) says --nproc-per-node 3, node 0 says 2' \
    --nproc-per-node 2 --nnodes 2 --node-rank 0 -- --nproc-per-node 3 --nnodes 2 --node-rank 1
join_mismatch 'node 1 \(.*\) says --nnodes 3, node 0 says 2' \
    --nproc-per-node 2 --nnodes 2 --node-rank 0 -- --nproc-per-node 2 --nnodes 3 --node-rank 1
join_mismatch 'nodes 0 and 1 both go by host name twin \(mpirun tells hosts apart by name' \
    --nproc-per-node 2 --nnodes 2 --node-rank 0 --node-name twin -- \
    --nproc-per-node 2 --nnodes 2 --node-rank 1 --node-name twin

# A CKPTD_SOCKET pattern that cannot be expanded stops the ranks before they start.
export CKPTD_SOCKET=/run/ckptd-%x.sock
expect nonzero "CKPTD_SOCKET /run/ckptd-%x.sock: '%x' is neither" --nproc-per-node 1 true
unset CKPTD_SOCKET

if [ "$fails" -ne 0 ]; then
    echo "$fails of $n cases failed"
    exit 1
fi
echo "ok: $n bad command lines and failed joins each exit with a message naming the problem"
