#!/usr/bin/env bash
# Runs test_collective_fails_when_peer_dies on 3 ranks under mpirun --enable-recovery
# (the MCA variable), with which mpirun neither ends the job when rank 2 dies nor
# reports the ranks' statuses: the ranks' own lines are the verdict. Both survivors
# must print "ok" (a hang is the meson timeout).
#   peer_dies.sh SHARDRUN TEST
set -uo pipefail
shardrun=$1 test=$2
out=$(OMPI_MCA_orte_enable_recovery=1 "$shardrun" --nproc-per-node 3 "$test" 2>&1)
echo "$out"
[ "$(grep -c '^ok: rank [01]:' <<<"$out")" -eq 2 ] && ! grep -q '^FAILED' <<<"$out" ||
    { echo "FAILED: ranks 0 and 1 did not both get -EPIPE naming rank 2"; exit 1; }
