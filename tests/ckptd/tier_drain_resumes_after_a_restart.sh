#!/usr/bin/env bash
# ckptd restarted mid-drain (issue 31, part 3), on tier_lib.sh's cluster (step-12 only
# in the local tiers; step-8 durable), n0's drains paced at 4 MiB/s:
#   - while the drain runs, n0 answers STATUS (the drain is off its event loop);
#   - n0 dies (SIGKILL) while its drain of step-12 has streamed some bytes: the
#     durable root shows nothing of step-12 (no checkpoint; its pending directory is
#     debris, ckpt-verify says), step-8 is intact, and
#     n0's local tier says the drain is owed (n0.local/.ckptd.n0.drain);
#   - n0 starts again: the durable root's recovery removes what the dead drain left in
#     .pending, the owed drain starts over and commits a complete copy, equal to what
#     was saved; step-8 is still intact.
. "$(dirname "$0")/replica_lib.sh"
. "$(dirname "$0")/tier_lib.sh"

TIER_ARGS=(--drain-rate 4MiB)
cluster
ask_drain n0 step-12
for _ in $(seq 300); do
    grep -qE "^step-12: running, [1-9][0-9]* of" "$OUT" && break
    sleep 0.05
    timeout "$CMD_TIMEOUT" "$CKPTCTL" drain --socket "$WORK/n0.sock" >"$OUT" 2>&1
done
said "^step-12: running, [1-9][0-9]* of 12615680 bytes$" "the drain under way"
run "$CKPTCTL" status --socket "$WORK/n0.sock" --daemon-timeout 5
expect 0 "n0's STATUS while it drains (the drain is off the event loop)"
crash n0
[ ! -e "$SHARED/step-12" ] || fail "a dead drain left $SHARED/step-12"
grep -qx "drain step-12" "$WORK/n0.local/.ckptd.n0.drain" || fail "the drain is not owed: $(cat "$WORK/n0.local/.ckptd.n0.drain")"
run "$CKPT_VERIFY" "$SHARED" --deep
expect 1 "ckpt-verify of the durable root after the crash (debris found)"
said "^step-8: ok" "step-8 intact"
said "^$SHARED/.pending/step-12\\.[0-9a-f]+: debris of an incomplete save whose writer died" \
    "the dead drain's pending directory, debris"
! grep -q "^step-12" "$OUT" || fail "the durable root shows step-12"

daemon n0 --peer-timeout 5
drained n0 step-12
logged n0 "drain of step-12: owed since before the daemon started; from the start" \
    "the drain resumed"
said "^step-12: done, 12615680 of 12615680 bytes$" "the drain after the restart"
same_as_truth step-12
said "^step-8: ok" "step-8 intact"
no_pending "$SHARED"
stop_cluster
