"""Every rank SIGKILLed right after dcp.async_save returned: through ckptd the
checkpoint still commits (ckptd holds every rank's staged part and rank 0's commit
request) and passes ckpt-verify --deep. The same for CheckpointManager's default
(async staging) once every rank's maybe_wait_for_staging() returned after save(): the
point README.md names as the one where a save is safe. Embedded, one rank killed after async_save
returned: nothing of that save becomes visible, the other rank's save fails, and the
checkpoint committed before it is intact."""
import os
import signal
import time

import torch.distributed.checkpoint as dcp

import common
import libshard
from libshard.dcp import CkptWriter


def kill_all(rank, world, root, sock):
    model, opt = common.build()
    sd = common.state(model, opt)
    dcp.async_save(sd, storage_writer=CkptWriter(root, "killed-00000100", socket=sock))
    os.kill(os.getpid(), signal.SIGKILL)


def kill_after_fence(rank, world, root, sock):
    from libshard.loop import CheckpointManager
    model, opt = common.build()
    ckpt = CheckpointManager(root, socket=sock)
    ckpt.save(100, common.state(model, opt))
    ckpt.maybe_wait_for_staging()
    os.kill(os.getpid(), signal.SIGKILL)


def kill_one(rank, world, root):
    model, opt = common.build()
    sd = common.state(model, opt)
    dcp.save(sd, storage_writer=CkptWriter(root, "good-00000100"))
    fut = dcp.async_save(sd, storage_writer=CkptWriter(root, "torn-00000200"))
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        fut.result(timeout=90)
    except Exception as e:
        print(f"rank 0: the save failed as it must: {type(e).__name__}", flush=True)
        os._exit(0)
    os._exit(3)           # it committed without rank 1's part


def main():
    root = common.tmpdir("kill")
    d = common.Ckptd(root)
    try:
        for fn, name in ((kill_all, "killed-00000100"), (kill_after_fence, "step-100")):
            codes = common.run_ranks(2, fn, root, d.socket, expect_exit=True)
            assert codes == [-signal.SIGKILL] * 2, codes
            deadline = time.monotonic() + 60
            while libshard._ck.name_state(root, name)[0] != "committed":
                assert time.monotonic() < deadline, f"ckptd did not commit {name}"
                time.sleep(0.1)
    finally:
        d.stop()
    for name in ("killed-00000100", "step-100"):
        common.check([common.tool("ckpt-verify"), root, name, "--deep"])

    root = common.tmpdir("kill-emb")
    codes = common.run_ranks(2, kill_one, root, expect_exit=True, timeout=150)
    assert codes == [0, -signal.SIGKILL], codes
    names = [n for *_, n in libshard.committed(root)]
    assert names == ["good-00000100"], names
    common.check([common.tool("ckpt-verify"), root, "good-00000100", "--deep"])


if __name__ == "__main__":
    common.main(main)
