"""CkptWriter and CkptReader stay picklable (dcp.async_save's process executor pickles
the writer into a spawned process): before a save, after a save (no C handles
travel), and a copy saves like the original. A root that does not exist yet is made,
as FileSystemWriter makes its directory."""
import os
import pickle

import torch
import torch.distributed.checkpoint as dcp

import common
import libshard
from libshard.dcp import CkptReader, CkptWriter


def main():
    root = os.path.join(common.tmpdir("pickle"), "made", "here")    # not there yet
    w = CkptWriter(root, "a-1", hash=False, step=7)
    w2 = pickle.loads(pickle.dumps(w))
    assert (w2.root, w2.name, w2.hash, w2.step) == (root, "a-1", False, 7)
    sd = {"x": torch.arange(6.0)}
    dcp.save(sd, storage_writer=w2, no_dist=True)
    w3 = pickle.loads(pickle.dumps(w2))       # after a save: handles are not pickled
    w3.reset(f"{root}/b-2")
    dcp.save(sd, storage_writer=w3, no_dist=True)
    assert [n for *_, n in libshard.committed(root)] == ["a-1", "b-2"]
    assert libshard.Checkpoint(root, "a-1").info()["step"] == 7
    r = pickle.loads(pickle.dumps(CkptReader(root)))
    got = {"x": torch.zeros(6)}
    dcp.load(got, storage_reader=r, no_dist=True)
    assert torch.equal(got["x"], sd["x"])


if __name__ == "__main__":
    common.main(main)
