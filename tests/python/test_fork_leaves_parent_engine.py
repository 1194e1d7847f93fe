"""A process forked from one that saves never touches the parent's engine. The child
inherits the writer, its part and the client, but not the engine's threads: closing
its copy of the client (at its exit, or when engine.py drops the parent's clients
after the fork) or freeing the part's save used to wait forever for those threads.
Here a child forked while a save is staged, and one forked after it committed, each
run Python's exit (sys.exit: atexit hooks, finalizers); both exit 0 within the bound,
the inherited writer refuses to be used in the child with a clear error, a save made
in the child through its own client commits, and the parent's save commits."""
import os
import sys
import time

import torch
import torch.distributed.checkpoint as dcp

import common
import libshard
from libshard.dcp import CkptWriter


def fork_and_exit(w, root, name):
    """Forks; the child uses the inherited writer (must refuse), saves through its own
    client, and exits through sys.exit. Returns the child's exit status."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            try:
                w.maybe_wait_for_staging()
                if w._part is not None and w._part.keep:
                    code = 3                         # used the parent's engine
            except ValueError as e:
                if "parent process" not in str(e):
                    code = 4
            dcp.save({"x": torch.arange(10.0)}, storage_writer=CkptWriter(root, name),
                     no_dist=True)
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 5
        sys.exit(code)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError(f"the child forked for {name} still ran after 60 s")


def main():
    root = common.tmpdir("fork")
    sd = {f"t{i}": torch.randn(256, 256) for i in range(16)}
    w = CkptWriter(root, "parent", async_staging=True)
    f = dcp.async_save(sd, storage_writer=w, no_dist=True)
    # Staged, copies maybe still running: the part holds the parent's save.
    code = fork_and_exit(w, root, "child-1")
    assert code == 0, f"child 1 exited {code}"
    w.maybe_wait_for_staging()
    f.result()
    code = fork_and_exit(w, root, "child-2")
    assert code == 0, f"child 2 exited {code}"
    names = sorted(n for *_, n in libshard.committed(root))
    assert names == ["child-1", "child-2", "parent"], names


if __name__ == "__main__":
    common.main(main)
