"""Every rank loads the checkpoint rank 0 resolved (2 gloo ranks). A restarted job
failed with "ranks resolved different checkpoints" when ckptd committed the dead job's
last save during load(): here step-3 is committed after rank 0 has picked step-2 and
before rank 1 looks, and both ranks load step-2. Also: a direct dcp.async_save with a
CkptWriter and no process_group, on more than one rank, warns and names what to pass
(on a job whose training thread runs collectives meanwhile, gloo aborted with a
collective mismatch, with nothing to say why)."""
import logging
import os
import subprocess
import time
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

import common
from libshard.dcp import CkptWriter
from libshard.loop import CheckpointManager


class Resolved(logging.Handler):
    """Rank 0: marks the moment it has said which checkpoint it loads."""

    def __init__(self, flag):
        super().__init__(logging.INFO)
        self.flag = flag

    def emit(self, record):
        if record.getMessage().startswith("libshard: loading "):
            open(self.flag, "w").close()


def rank_main(rank, world, root):
    flag = os.path.join(root, "..", "rank0-resolved")
    m = CheckpointManager(root)
    for step in (1, 2):
        m.save(step, {"w": torch.full((4, 2), float(step))})
    m.close()
    m = CheckpointManager(root)            # new_group is collective: made before the race
    dist.barrier()
    if rank == 0:
        log = logging.getLogger("libshard")
        log.setLevel(logging.INFO)
        log.addHandler(Resolved(flag))
    else:
        # A commit lands after rank 0 chose and before this rank would look (bounded:
        # a manager that never says what it loads is waited for 10 s).
        deadline = time.monotonic() + 10
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.02)
        subprocess.run([common.tool("ckpt-synth"), root, "--name", "step-3", "--mesh", "1",
                        "--tensors", "1", "--bytes", "4KiB", "--step", "3"], check=True,
                       capture_output=True, timeout=60)
    got = {"w": torch.zeros(4, 2)}
    assert m.load(got) == 2
    assert torch.equal(got["w"], torch.full((4, 2), 2.0)), got["w"]

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        f = dcp.async_save({"w": got["w"]},
                           storage_writer=CkptWriter(os.path.join(root, "..", "direct"), "x-1"))
    f.result()
    said = [str(w.message) for w in seen if "CkptWriter" in str(w.message)]
    assert said and "process_group=pg" in said[0] and "new_group" in said[0], \
        [str(w.message) for w in seen]


def main():
    root = os.path.join(common.tmpdir("mgr-agree"), "ck")
    common.run_ranks(2, rank_main, root, timeout=120)


if __name__ == "__main__":
    common.main(main)
