"""Through a ckptd with a local tier (issue 31, part 2), CheckpointManager(commit_level=)
and CkptWriter(commit_level=) save into the tiers: the save commits a copy in the
daemon's local tier, not in the durable root, and says the level it reached; the
manager loads it back through the daemon bit for bit. A commit level that is none of
local, replicated, durable is refused by name before anything is saved; "durable" with a
local tier returns once the daemon drained the save to the durable root (decision
0176), and the manager loads that durable copy with no daemon at all."""
import os

import torch
import torch.distributed.checkpoint as dcp

import common
from libshard.dcp import CkptWriter
from libshard.loop import CheckpointManager


def state(v):
    return {"w": torch.full((64, 16), float(v)), "b": torch.arange(16, dtype=torch.float64) * v}


def main():
    top = common.tmpdir("tiersave")
    root, local = (os.path.join(top, d) for d in ("root", "local"))
    os.makedirs(root)
    os.makedirs(local)
    d = common.Ckptd(root, "--local-root", local, "--id", "n0")
    try:
        w = CkptWriter(root, "step-3", socket=d.socket, commit_level="local")
        dcp.save(state(3), storage_writer=w, no_dist=True)
        assert w.committed_level == "local", f"level reached: {w.committed_level!r}"
        assert os.path.isfile(os.path.join(local, "step-3", "manifest.mdb")), \
            "step-3 is not in the local tier"
        assert not os.path.exists(os.path.join(root, "step-3")), "step-3 reached the root"

        m = CheckpointManager(root, socket=d.socket, async_save=False, commit_level="local")
        m.save(5, state(5))
        m.close()
        assert os.path.isdir(os.path.join(local, "step-5")), "the manager's save is not local"
        m = CheckpointManager(root, socket=d.socket, load_only=True)
        sd = state(0)
        assert m.load(sd) == 5, "the manager did not load its newest save from the tier"
        common.assert_same(sd, state(5), "step-5 loaded through the daemon")
        m.close()

        said = None
        try:
            CkptWriter(root, "step-6", socket=d.socket, commit_level="everywhere")
        except ValueError as e:
            said = str(e)
        assert said and "everywhere" in said, f"an unknown level was taken: {said}"
        w = CkptWriter(root, "step-7", socket=d.socket, commit_level="durable")
        dcp.save(state(7), storage_writer=w, no_dist=True)
        assert w.committed_level == "durable", f"level reached: {w.committed_level!r}"
        assert os.path.isfile(os.path.join(root, "step-7", "manifest.mdb")) and \
            not os.path.exists(os.path.join(root, "step-7", "copy")), \
            "step-7 is not a complete checkpoint in the durable root when the save returned"
        m = CheckpointManager(root, load_only=True)
        sd = state(0)
        assert m.load(sd, step=7) == 7, "the durable copy of step-7 did not load"
        common.assert_same(sd, state(7), "step-7 loaded from the durable root")
        m.close()
    finally:
        d.stop()


if __name__ == "__main__":
    common.main(main)
