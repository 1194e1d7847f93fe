#!/usr/bin/env bash
# A detached ckptd (the default: no --foreground) drains and exits 0 on SIGTERM, as one
# in the foreground does. Its signalfd was once made before detach's fork, and the
# child's epoll never woke for it: the daemon slept through SIGTERM for good. And the
# detached daemon holds the root's lock.
#   detached_exits_on_sigterm.sh CKPTD
set -uo pipefail
ckptd=$1
root=$(mktemp -d "${TMPDIR:-/var/tmp}/ck-detached.XXXXXX")
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$root"; }
trap cleanup EXIT
"$ckptd" --root "$root" || { echo "FAILED: ckptd did not start"; exit 1; }
# The lock file names the daemon's pid once it detached ("pid P on HOST"). Until the
# child has noted its own, it names the parent, which has exited by the time ckptd
# returns: wait for a pid that is alive.
for _ in $(seq 100); do
    pid=$(sed -n 's/^pid \([0-9]*\) on .*/\1/p' "$root"/.ckptd.*.lock 2>/dev/null)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ -S "$root/.ckptd.sock" ] && break
    pid=
    sleep 0.1
done
[ -n "$pid" ] || { echo "FAILED: no live daemon pid in $root/.ckptd.*.lock"; exit 1; }
# The lock came along to the detached child (a fork's child closes its copies of the
# core's locks, decision 0144, except this one, handed on): nobody else may take it.
if command -v flock >/dev/null && flock -n "$root"/.ckptd.*.lock true; then
    echo "FAILED: the detached ckptd (pid $pid) does not hold its lock $root/.ckptd.*.lock"
    exit 1
fi
kill -TERM "$pid"
# A generous bound, never asserted as a time: the drain has nothing to wait for.
for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then
    echo "FAILED: the detached ckptd (pid $pid) is still running 30 s after SIGTERM"
    exit 1
fi
pid=
grep -q "ckptd: exit 0" "$root/.ckptd.log" ||
    { echo "FAILED: the daemon did not log a clean exit"; cat "$root/.ckptd.log"; exit 1; }
echo "ok: a detached ckptd drains and exits 0 on SIGTERM"
