"""Through a ckptd that keeps a local tier (issue 31), a load restores from the nearest
copy: step-4 and step-6 lie only in the daemon's local tier (the durable root's newest is
step-2). CheckpointManager.load() picks step-6 through the daemon (RESOLVE), load(step=4)
finds step-4 there too, a CkptReader naming step-4 and one naming nothing (the newest)
load them bit for bit, the reader's files fetched through the daemon (FETCH); without
the daemon, only the root's checkpoints are there to load."""
import os
import shutil

import torch
import torch.distributed.checkpoint as dcp

import common
from libshard.dcp import CkptReader, CkptWriter
from libshard.loop import CheckpointManager


def state(v):
    return {"w": torch.full((64, 16), float(v)), "b": torch.arange(16, dtype=torch.float64) * v}


def main():
    top = common.tmpdir("tiers")
    root, local, other = (os.path.join(top, d) for d in ("root", "local", "other"))
    os.makedirs(local)
    dcp.save(state(2), storage_writer=CkptWriter(root, "step-2"), no_dist=True)
    for k in (4, 6):
        dcp.save(state(k), storage_writer=CkptWriter(other, f"step-{k}"), no_dist=True)
        shutil.copytree(os.path.join(other, f"step-{k}"), os.path.join(local, f"step-{k}"))
    d = common.Ckptd(root, "--local-root", local, "--id", "n0")
    os.environ["CKPTD_SOCKET"] = d.socket
    try:
        m = CheckpointManager(root, load_only=True)
        sd = state(0)
        assert m.load(sd) == 6, "the manager did not load the newest step in the tiers"
        common.assert_same(sd, state(6), "step-6 loaded by the manager")
        sd = state(0)
        assert m.load(sd, step=4) == 4, "load(step=4) did not find step-4 in the tiers"
        common.assert_same(sd, state(4), "step-4 loaded by the manager by its step")
        m.close()
        sd = state(0)
        dcp.load(sd, storage_reader=CkptReader(root, "step-4"), no_dist=True)
        common.assert_same(sd, state(4), "step-4 loaded by CkptReader")
        sd = state(0)
        dcp.load(sd, storage_reader=CkptReader(root), no_dist=True)
        common.assert_same(sd, state(6), "the newest in the tiers, loaded by CkptReader")
    finally:
        del os.environ["CKPTD_SOCKET"]
        d.stop()
    said = None
    try:
        dcp.load(state(0), storage_reader=CkptReader(root, "step-4"), no_dist=True)
    except BaseException as e:         # DCP wraps the reader's error, per rank
        said = str(getattr(e, "failures", e))
    assert said is not None, "without the daemon, step-4 of its local tier was loaded"
    assert "step-4" in said, f"the error does not name step-4: {said}"
    sd = state(0)
    dcp.load(sd, storage_reader=CkptReader(root), no_dist=True)
    common.assert_same(sd, state(2), "the root's newest")


if __name__ == "__main__":
    common.main(main)
