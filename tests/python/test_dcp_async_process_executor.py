"""dcp.async_save with AsyncCheckpointerType.PROCESS (torch 2.15): DCP pickles the
storage writer into a checkpoint process it spawns per rank, and saves there.
 - With async_stager=DefaultStager() (DCP copies the state to CPU memory, which
   travels to the checkpoint process), CkptWriter saves from the checkpoint process:
   it commits, embedded and through ckptd, and loads back equal to what was saved.
 - With CkptWriter as its own stager (what async_save does when no stager is given),
   the part is staged from the training process, and rank 0 asks for the commit
   there: that is all a save needs (the engine, ckptd or the training processes' own,
   has every part and the commit request). The checkpoint process waits for the
   commit, and the save commits and loads back, embedded and through ckptd."""
import os

import torch.distributed.checkpoint as dcp
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
    f.result(timeout=120)
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
        want = ["step-00000100", "step-00000200", "own-00000300"]
        assert sorted(names) == sorted(want), names
        for n in want:
            common.check([common.tool("ckpt-verify"), root, n, "--deep"])
        print(f"{'ckptd' if connected else 'embedded'}: committed {names}", flush=True)


if __name__ == "__main__":
    common.main(main)
