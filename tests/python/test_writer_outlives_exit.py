"""A writer still alive when the interpreter exits never crashes it. DCP calls finish
on the coordinator only, so rank 1's CkptWriter keeps its last part until the writer
goes; at exit engine.close_all closes the process's client before module globals are
freed, and a writer kept in a global then frees that part's save on a closed client.
The client frees its open saves when it closes, so the late free finds nothing to do
(it read freed memory before: SIGSEGV at exit on rank 1). Two child interpreters over
gloo save and keep their writers; both must exit 0 and the checkpoints commit."""
import os
import subprocess
import sys

import common
import libshard

CHILD = r"""
import sys
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from libshard.dcp import CkptWriter

root, store, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
sd = {"w": torch.arange(4096.0) + rank, "b": torch.ones(3, 5)}
KEPT = []   # module globals are freed after the atexit hooks ran
for i, staging in enumerate([False, True]):
    w = CkptWriter(root, f"kept-{i}", async_staging=staging)
    f = dcp.async_save(sd, storage_writer=w)
    if staging:
        w.maybe_wait_for_staging()
    f.result()
    KEPT.append((w, f))
dist.barrier()
dist.destroy_process_group()
print("saved", flush=True)
"""


def main():
    tmp = common.tmpdir("outlives")
    root, store = os.path.join(tmp, "ck"), os.path.join(tmp, "store")
    kids = [subprocess.Popen([sys.executable, "-X", "faulthandler", "-c", CHILD, root, store,
                              str(r)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True) for r in range(2)]
    for r, k in enumerate(kids):
        out, _ = k.communicate(timeout=120)
        if k.returncode != 0 or "saved" not in out:
            raise AssertionError(f"rank {r} exited {k.returncode} after saving:\n{out}")
    names = [n for *_, n in libshard.committed(root)]
    assert names == ["kept-0", "kept-1"], names


if __name__ == "__main__":
    common.main(main)
