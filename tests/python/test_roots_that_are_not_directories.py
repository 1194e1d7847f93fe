"""A root that is a regular file, a FIFO or a link to nothing is refused as "not a
directory" by the Python layer too, naming it (issue 28, defect 10; on main the writer
said "File exists"): scan, committed, Checkpoint and a DCP save through CkptWriter;
CheckpointManager refuses it as it is made. And a checkpoint removed by hand is listed
by nobody (defect 9): committed(), newest() and scan() list the directories."""
import os
import shutil

import torch
import torch.distributed.checkpoint as dcp

import common
import libshard
from libshard.dcp import CkptWriter
from libshard.loop import CheckpointManager


def refused(root, what, fn):
    try:
        fn()
    except BaseException as e:   # CkptError, or DCP's CheckpointException wrapping it
        msg = str(e)
        assert f"{root}: the checkpoint root is not a directory (it is {what})" in msg, msg
        assert "File exists" not in msg, msg
        return
    raise AssertionError(f"{root} ({what}) was taken as a root")


def main():
    base = common.tmpdir("notdir")
    roots = {"file": "a regular file", "fifo": "a FIFO", "dangling": "a symbolic link to nothing"}
    with open(os.path.join(base, "file"), "w") as f:
        f.write("not a root\n")
    os.mkfifo(os.path.join(base, "fifo"))
    os.symlink(os.path.join(base, "nowhere"), os.path.join(base, "dangling"))
    state = {"w": torch.arange(6.0)}
    for name, what in roots.items():
        root = os.path.join(base, name)
        refused(root, what, lambda: libshard.scan(root))
        refused(root, what, lambda: libshard.committed(root))
        refused(root, what, lambda: libshard.Checkpoint(root, "step-1"))
        refused(root, what, lambda: dcp.save(state, storage_writer=CkptWriter(root, "step-1")))
        try:        # the manager checks its root as it is made, in words of its own
            CheckpointManager(root, async_save=False)
            raise AssertionError(f"CheckpointManager took {root} ({what}) as a root")
        except NotADirectoryError as e:
            assert f"{root} is a file, not a directory" in str(e), e
    assert sorted(os.listdir(base)) == ["dangling", "fifo", "file"], os.listdir(base)

    root = os.path.join(base, "ok")
    mgr = CheckpointManager(root, async_save=False)
    for step in (10, 15, 20):
        mgr.save(step, state)
    mgr.close()
    shutil.rmtree(os.path.join(root, "step-20"))
    assert [n for *_, n in libshard.committed(root)] == ["step-10", "step-15"]
    assert libshard.newest(root) == "step-15"
    assert libshard.scan(root)[0] == ["step-10", "step-15"]
    got = {"w": torch.zeros(6)}
    assert CheckpointManager(root).load(got) == 15 and torch.equal(got["w"], state["w"])


if __name__ == "__main__":
    common.main(main)
