#!/usr/bin/env bash
# A tiered save (issue 31, part 2) on N network-namespace hosts joined by a bridge
# (tests/launch/netns_lib.sh, NETNS_N=N), one ckptd on each: node ni on host i, one
# durable root, a local tier each, --replicas F --jump J (env; default N=4 F=2 J=2,
# and a clique of three: N=3 F=3 J=1, each part sent to two peers). N ranks save
# step-7 through their nodes' daemons (ckpt-synth --world N, rank i on node ni) and
# wait for the level "replicated". Then, checked against the clique rule computed here
# (decision 0174: blocks of F x J nodes, a clique the nodes of a block with the same
# offset modulo J), not against a list written by hand:
#   - every node's local tier holds its own partial copy of step-7: the whole manifest
#     and its rank's file, NAME/copy naming it (ckpt-verify says partial, not corrupt);
#   - each node's copy is kept as a replica by exactly the other members of its clique,
#     here the node J = 2 apart, on another host: the holder's log names the PUT's
#     sender by the address of the sender's host (the bytes crossed the bridge); with
#     F = 3 the sender read its copy once for both peers;
#   - nothing of step-7 is in the durable root (the tiers' level is not durable);
#   - rank r restored through its node's daemon (tier_load) equals the data saved;
#   - the parts went to their cliques as they were written, the manifest after the
#     commit (decision 0204), on at least one node (all, unless a node's joins came
#     late); a save at level local (step-9) is replicated after its commit only.
# Skipped (77) where network namespaces cannot be made.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/replica_lib.sh"
. "$here/../launch/netns_lib.sh"
F=${F:-2} J=${J:-2} N=${N:-4}
NETNS_N=$N
netns_hosts_up
SHARED=$WORK/durable
TRUTH=$WORK/truth
mkdir -p "$SHARED"
nodes=$(seq 0 $((N - 1)))
synth "$TRUTH" step-7 --mesh "$N" --placements 'S(0)' --step 7 --seed 7
socks=
for i in $nodes; do
    WRAP=("$WORK/on-${NETNS_HOSTS[$i]}")
    LISTEN=${NETNS_ADDRS[$i]} daemon "n$i" --replicas $F --jump $J --peer-timeout 5 \
        --part-timeout 30
    socks=$socks${socks:+,}$WORK/n$i.sock
done
run "$CKPT_SYNTH" "$SHARED" --name step-7 --mesh "$N" --placements 'S(0)' --tensors 3 \
    --bytes 12MiB --step 7 --seed 7 --world "$N" --daemon "$socks" --level replicated
expect 0 "the save through $N daemons"
for r in $nodes; do
    said "rank $r: .*committed at level replicated$" "rank $r's level"
done
[ ! -e "$SHARED/step-7" ] || fail "a tiered save committed step-7 in the durable root"

# clique I: the other members of node I's clique, by the rule.
clique() {
    local i=$1 b=$((F * J)) m out=()
    for m in $(seq 0 $((F - 1))); do
        local x=$(( i / b * b + i % J + m * J ))
        [ "$x" -eq "$i" ] || out+=("$x")
    done
    echo "${out[@]}"
}
for i in $nodes; do
    own=$WORK/n$i.local/step-7
    [ -f "$own/manifest.mdb" ] || fail "n$i has no committed copy of step-7"
    [ "$(sed -n 2p "$own/copy")" = "source n$i" ] && grep -qx "rank-0000$i.dat" "$own/copy" ||
        fail "n$i's copy file does not name its own part: $(cat "$own/copy")"
    [ "$(ls "$own" | grep -c '\.dat$')" -eq 1 ] || fail "n$i's copy holds other ranks' files"
    run "$CKPT_VERIFY" "$WORK/n$i.local" step-7
    said "partial copy from ckptd n$i: 1 of $N data files" "ckpt-verify of n$i's copy"
    peers=$(clique "$i")
    for p in $nodes; do
        rep=$WORK/n$p.local/.replicas/n$i/step-7
        if [[ " $peers " == *" $p "* ]]; then
            [ -f "$rep/rank-0000$i.dat" ] || fail "n$p keeps no replica of n$i's part (clique of n$i: $peers)"
            cmp -s "$rep/rank-0000$i.dat" "$own/rank-0000$i.dat" ||
                fail "n$p's replica of n$i's part differs from it"
        else
            [ ! -e "$rep" ] || fail "n$p keeps a replica of n$i's part, outside n$i's clique ($peers)"
        fi
    done
    # Sent to its clique from one read of the copy (decision 0201).
    [ "$F" -le 2 ] || logged "n$i" "checkpoint step-7: its copy is read once for $((F - 1)) peers" \
        "n$i's copy read once for its $((F - 1)) peers"
    for p in $peers; do
        logged "n$p" "peer ${NETNS_ADDRS[i]//./\\.}:[0-9]+ \(ckptd n$i\): replica step-7 of ckptd n$i committed" \
            "n$i's part sent from host $i to n$p on host $p"
    done
done
# Sent beside the local write (decision 0204; its ranks wait for level replicated):
# every node's join is read within a poll
# of the meeting, long before the parts are written and committed, so the nodes' parts
# go to their cliques as they are written, and the commit ends each stream with the
# manifest. Counted, not required of each node: a node whose joins came late sends
# after its commit, as before, and its replica is the same.
early=0
for i in $nodes; do
    grep -qE "checkpoint step-7: replica committed by ckptd n[0-9]+ at .*, begun beside the local write" \
        "$WORK/n$i.log" && early=$((early + 1))
    grep -E "step-7: (its|[0-9]+ bytes of it|replica)" "$WORK/n$i.log" | sed "s/^/  n$i| /"
done
[ "$early" -ge 1 ] || fail "no node's part went to its clique as it was written"
# What went as it was written was what was written: no block a receiver checked
# differed (a fall back after the commit would hide it).
! grep -h "is not the manifest's" "$WORK"/n*.log || fail "a block sent as it was written differed"
echo "$early of $N nodes sent their part beside the local write"
# A save whose ranks ask for level local alone is replicated after its commit: its
# replication takes nothing from its write (decision 0204).
run "$CKPT_SYNTH" "$SHARED" --name step-9 --mesh "$N" --placements 'S(0)' --tensors 3 \
    --bytes 12MiB --step 9 --seed 9 --world "$N" --daemon "$socks" --level local
expect 0 "the save at level local"
for i in $nodes; do
    wait_log "n$i" "checkpoint step-9: final level replicated" "n$i's step-9 replicated"
    ! grep -q "checkpoint step-9: its 1 data file(s) here go" "$WORK/n$i.log" ||
        fail "n$i sent step-9 (level local) as it was written"
done
for r in $nodes; do
    run "$TIER_LOAD" "$WORK/n$r.sock" "$SHARED" "$TRUTH" step-7 --rank "$r"
    expect 0 "rank $r restored through n$r"
    said "^rank $r: 3 tensors equal to the saved data" "rank $r's load"
done
for i in $nodes; do stop "n$i"; done
echo "PASS [$TEST_NAME]"
