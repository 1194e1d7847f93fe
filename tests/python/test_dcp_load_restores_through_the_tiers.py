"""Through a ckptd that keeps a local tier (issue 31), a load restores from the nearest
copy: step-4 lies only in the daemon's local tier (the durable root's newest is step-2).
CheckpointManager.load() picks it through the daemon (RESOLVE), and it and a CkptReader
naming it load it bit for bit, the reader's files fetched through the daemon (FETCH);
without the daemon, only the root's checkpoints are there to load."""
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
    dcp.save(state(4), storage_writer=CkptWriter(other, "step-4"), no_dist=True)
    shutil.copytree(os.path.join(other, "step-4"), os.path.join(local, "step-4"))
    d = common.Ckptd(root, "--local-root", local, "--id", "n0")
    os.environ["CKPTD_SOCKET"] = d.socket
    try:
        m = CheckpointManager(root, load_only=True)
        sd = state(0)
        assert m.load(sd) == 4, "the manager did not load the newest step in the tiers"
        common.assert_same(sd, state(4), "step-4 loaded by the manager")
        m.close()
        sd = state(0)
        dcp.load(sd, storage_reader=CkptReader(root, "step-4"), no_dist=True)
        common.assert_same(sd, state(4), "step-4 loaded by CkptReader")
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
