#!/usr/bin/env bash
# A daemon stopped while its drain is in parts (decision 0197; the checkpoint service
# never hangs on its storage or its peers), on tier_lib.sh's cluster, drains paced at
# 1 MiB/s, so that each part takes seconds:
#   - n0 drains step-12 in parts; once n2 and n3 write theirs, n0 gets SIGTERM: it gives
#     the drain up and its parts with it (their connections closed), and exits 0 without
#     waiting for them to be written;
#   - n2 and n3 each say their part failed, never that it was written, and keep nothing
#     of it; the durable root holds no step-12 and nothing pending; n0's tier still
#     owes the drain;
#   - n0 starts again and the owed drain commits a complete copy, equal to what was
#     saved.
. "$(dirname "$0")/replica_lib.sh"
. "$(dirname "$0")/tier_lib.sh"

TIER_ARGS=(--drain-rate 512KiB)
cluster
ask_drain n0 step-12
for id in n2 n3; do
    wait_log "$id" "PART of step-12: writing 1 data file" "$id writing its part" 20
done
stop n0
for id in n2 n3; do
    wait_log "$id" "PART of step-12 failed: .*nothing of it is kept" "$id's part given up" 10
    ! grep -q "PART of step-12: written" "$WORK/$id.log" ||
        fail "$id's part was written to the end: n0 waited for it"
done
[ ! -e "$SHARED/step-12" ] || fail "a drain given up left $SHARED/step-12"
no_pending "$SHARED"
grep -qx "drain step-12" "$WORK/n0.local/.ckptd.n0.drain" ||
    fail "the drain is not owed: $(cat "$WORK/n0.local/.ckptd.n0.drain")"

daemon n0 --peer-timeout 5 --drain-rate 64MiB
drained n0 step-12
said "^step-12: done, 12615680 of 12615680 bytes$" "the owed drain, after the restart"
same_as_truth step-12
no_pending "$SHARED"
stop_cluster
