#!/usr/bin/env bash
# ckptd's files form layers (ckptd/kd.h): a file names only functions of the files
# below it, so that a reader follows a message from the event loop down and never
# back up. Names count wherever they appear (a callback passed by pointer too).
# Prints each upward use and exits 1 if there is any.
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}/ckptd"

# Top to bottom, as kd.h lists them.
layers=(main.c kd_server.c kd_recover.c kd_proto.c kd_status.c kd_restore.c kd_ckpt.c kd_plan.c
        kd_staging.c kd_tiersave.c kd_early.c kd_drain.c kd_drain_copy.c kd_retain.c kd_peer_serve.c kd_drain_part.c kd_drain_pipe.c kd_tiers.c
        kd_peer_client.c kd_peer_xfer.c kd_peer_grow.c kd_peer_inv.c
        kd_peer_ucx.c kd_peer_bufs.c kd_peer_addr.c kd_peer_key.c kd_peer_wire.c kd_reply.c
        kd_log.c kd_parse.c)
listed=$(printf '%s\n' "${layers[@]}" | sort)
actual=$(ls -- *.c | grep -vx ckptctl.c | sort)
if [ "$listed" != "$actual" ]; then
    echo "ckptd layering: the layer list is not the file list; update it and kd.h"
    diff <(echo "$listed") <(echo "$actual") || true
    exit 1
fi

bad=0
for ((i = 0; i < ${#layers[@]}; i++)); do
    # The file's external functions: definitions in column 0 that are not static.
    fns=$(grep -vE '^static' "${layers[i]}" |
          grep -oE '^[a-z][a-z0-9_ ]*[ *]kd_[a-z0-9_]+\(' | grep -oE 'kd_[a-z0-9_]+\($' |
          tr -d '(' || true)
    for fn in $fns; do
        for ((j = i + 1; j < ${#layers[@]}; j++)); do
            if grep -qw "$fn" "${layers[j]}"; then
                echo "${layers[j]} uses $fn of ${layers[i]}, a file above it"
                bad=1
            fi
        done
    done
done
[ "$bad" -eq 0 ] || { echo "ckptd layering: calls that point up"; exit 1; }
echo "ckptd layering: every call points down"
