"""libshard.loop.CheckpointManager as a torchtitan-style loop uses it (one process):
async saves every step with keep_latest_k=2 leave exactly the two newest committed
steps, load resumes from the newest (or a given step) with its values, and a root
without checkpoints loads nothing."""
import os

import torch

import common
import libshard
from libshard.loop import CheckpointManager, newest_step


def main():
    root = common.tmpdir("loop")
    mgr = CheckpointManager(root, keep_latest_k=2)
    state = {"w": torch.zeros(5, 3), "step": torch.tensor(0)}
    assert mgr.load({"w": torch.zeros(5, 3), "step": torch.tensor(0)}) is None
    for step in range(1, 6):
        state["w"].fill_(step)
        state["step"].fill_(step)
        mgr.save(step, state)
        mgr.maybe_wait_for_staging()
        state["w"].fill_(-1)          # training goes on: the save already has its copy
    mgr.close()
    names = [n for *_, n in libshard.committed(root)]
    assert names == ["step-4", "step-5"], names
    assert newest_step(root) == 5
    assert not os.listdir(os.path.join(root, ".pending")), os.listdir(os.path.join(root, ".pending"))
    got = {"w": torch.zeros(5, 3), "step": torch.tensor(0)}
    assert CheckpointManager(root).load(got) == 5
    assert torch.equal(got["w"], torch.full((5, 3), 5.0)) and int(got["step"]) == 5
    assert CheckpointManager(root).load(got, step=4) == 4
    assert torch.equal(got["w"], torch.full((5, 3), 4.0))
    common.check([common.tool("ckpt-verify"), root])


if __name__ == "__main__":
    common.main(main)
