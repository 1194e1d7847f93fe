"""A manifest extended by a sparse 1 TiB tail costs the Python layer no memory (issue
28, defect 3: on main Checkpoint copied all of it, 2.1 GB for a 2 GiB tail, and a
manager's load opens every checkpoint of the root). Each case runs in a child under
maxrss, which kills it at a cap: Checkpoint(root, "step-2") raises CkptError naming the
manifest and both sizes within 256 MiB; CheckpointManager.load (of the newest step,
step-2) raises the same, its peak grown by less than 256 MiB over what torch took
before it; and committed() leaves step-2 out with a warning naming it."""
import os
import subprocess
import sys

import torch

import common
from libshard.loop import CheckpointManager

CHILD_CHECKPOINT = r"""
import sys
import libshard
try:
    libshard.Checkpoint(sys.argv[1], "step-2")
except libshard.CkptError as e:
    print("refused:", e)
"""

CHILD_MANAGER = r"""
import sys, warnings
import torch
import libshard
from libshard.loop import CheckpointManager

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

state = {"w": torch.zeros(1000)}
mgr = CheckpointManager(sys.argv[1], async_save=False)
before = hwm()
try:
    mgr.load(state)             # the newest step, step-2
except libshard.CkptError as e:
    print("refused:", e)
grew = hwm() - before
print("grew", grew, "KiB")
assert grew < 256 * 1024, f"the load grew the peak by {grew} KiB"
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    print("committed:", [n for *_, n in libshard.committed(sys.argv[1])])
for w in caught:
    print("warning:", w.message)
"""


def run(cap_mib, code, root):
    p = subprocess.run([common.tool("maxrss"), str(cap_mib), sys.executable, "-c", code, root],
                       capture_output=True, text=True, timeout=240)
    print(p.stdout + p.stderr)
    assert p.returncode == 0, f"exit {p.returncode}"
    return p.stdout


def main():
    root = common.tmpdir("sparse")
    mgr = CheckpointManager(root, async_save=False)
    for step in (1, 2):
        mgr.save(step, {"w": torch.full((1000,), float(step))})
    mgr.close()
    m = os.path.join(root, "step-2", "manifest.mdb")
    used = os.path.getsize(m)
    os.truncate(m, 1 << 40)
    why = f"{m}: {1 << 40} bytes, but its LMDB meta page says it uses {used}"
    out = run(256, CHILD_CHECKPOINT, root)
    assert f"refused: [Errno 74] {why}" in out, out     # 74: EBADMSG
    # torch alone takes hundreds of MiB: the child is killed only far beyond that, and
    # asserts the growth itself.
    out = run(2048, CHILD_MANAGER, root)
    assert f"refused: [Errno 74] {why}" in out, out
    assert "committed: ['step-1']" in out and f"warning: libshard: skipping checkpoint " \
        f"step-2 of {root}: [Errno 74] {why}" in out, out


if __name__ == "__main__":
    common.main(main)
