"""dcp.async_save with AsyncCheckpointerType.PROCESS (torch 2.15): DCP pickles the
storage writer into a checkpoint process it spawns per rank, and saves there.
 - With async_stager=DefaultStager() (DCP copies the state to CPU memory, which
   travels to the checkpoint process), CkptWriter saves from the checkpoint process:
   it commits, embedded and through ckptd, and loads back equal to what was saved.
 - With CkptWriter as its own stager (what async_save does when no stager is given),
   the part is staged from the training process. Through ckptd that is all a save
   needs (ckptd has every part and rank 0's commit request): the checkpoint process
   waits for ckptd's commit, and the save commits and loads back. Embedded, the staged
   part lies in the training process's memory, out of the checkpoint process's reach:
   the save fails on every rank with the writer's error naming DefaultStager, does
   not hang, and nothing of it is committed."""
import os

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

import common
import libshard
from libshard.dcp import CkptReader, CkptWriter

PROCESS = AsyncCheckpointerType.PROCESS


def with_default_stager(rank, world, root, sock):
    model, opt = common.build()
    sd = common.state(model, opt)
    # CPU ranks: no pinned memory, no non-blocking copies (those need an accelerator).
    stager = DefaultStager(StagingOptions(use_pinned_memory=False, use_shared_memory=True,
                                          use_async_staging=False, use_non_blocking_copy=False))
    for step in (100, 200):
        f = dcp.async_save(sd, storage_writer=CkptWriter(root, f"step-{step:08d}", socket=sock),
                           async_checkpointer_type=PROCESS, async_stager=stager)
        f.result(timeout=120)
    stager.close()
    got = common.fresh_state()
    dcp.load(got, storage_reader=CkptReader(root, "step-00000200"))
    common.assert_same(common.flatten(got), common.flatten(sd), f"rank {rank}")


def with_own_stager(rank, world, root, sock):
    model, opt = common.build()
    sd = common.state(model, opt)
    f = dcp.async_save(sd, storage_writer=CkptWriter(root, "own-00000300", socket=sock),
                       async_checkpointer_type=PROCESS)
    try:
        f.result(timeout=120)
    except CheckpointException as e:      # a BaseException, not an Exception
        assert sock is None and "DefaultStager" in str(e), f"rank {rank}: {e}"
        print(f"rank {rank}: embedded, refused as documented", flush=True)
        return
    assert sock is not None, f"rank {rank}: embedded, a save staged elsewhere succeeded"
    got = common.fresh_state()
    dcp.load(got, storage_reader=CkptReader(root, "own-00000300"))
    common.assert_same(common.flatten(got), common.flatten(sd), f"rank {rank}")


def main():
    for connected in (False, True):
        root = common.tmpdir("process-exec")
        d = common.Ckptd(root) if connected else None
        try:
            sock = d.socket if d else None
            common.run_ranks(2, with_default_stager, root, sock)
            common.run_ranks(2, with_own_stager, root, sock)
        finally:
            if d:
                d.stop()
        names = [n for *_, n in libshard.committed(root)]
        want = ["step-00000100", "step-00000200"] + (["own-00000300"] if connected else [])
        assert sorted(names) == sorted(want), names
        for n in want:
            common.check([common.tool("ckpt-verify"), root, n, "--deep"])
        print(f"{'ckptd' if connected else 'embedded'}: committed {names}", flush=True)


if __name__ == "__main__":
    common.main(main)
