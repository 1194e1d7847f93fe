"""A process forked from one that saved never touches the parent's engine. The child
inherits the writer, its part and the client, but not the engine's threads: closing
its copy of the client (at its exit, or when engine.py drops the parent's clients
after the fork) or freeing the part's save used to wait forever for those threads. A
child forked after a save committed uses the inherited client (refused, naming the
fork) and runs Python's exit (sys.exit: atexit hooks, finalizers); it must exit 0
within the bound. (Forking while the engine's threads are busy is not tested: a child
of a multithreaded process may inherit a lock some thread held, whatever the library.)"""
import os
import sys
import time

import torch
import torch.distributed.checkpoint as dcp

import common
import libshard
from libshard.dcp import CkptWriter


def fork_and_exit(client, name):
    """Forks; the child uses the inherited client (must refuse) and exits through
    sys.exit. Returns the child's exit status."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            try:
                client.reserve(1 << 20)
                code = 3                             # used the parent's engine
            except ValueError as e:
                if "parent process" not in str(e):
                    code = 4
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 5
        sys.exit(code)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError(f"the child forked for {name} still ran after 30 s")


def main():
    root = common.tmpdir("fork")
    sd = {f"t{i}": torch.randn(256, 256) for i in range(16)}
    w = CkptWriter(root, "parent", async_staging=True)
    f = dcp.async_save(sd, storage_writer=w, no_dist=True)
    w.maybe_wait_for_staging()
    f.result()
    client = w._engine(-1).client       # the process's client, the parent's engine
    code = fork_and_exit(client, "child")
    assert code == 0, f"the child exited {code}"
    names = [n for *_, n in libshard.committed(root)]
    assert names == ["parent"], names


if __name__ == "__main__":
    common.main(main)
