"""One bit flipped in a data file of a committed checkpoint: dcp.load with CkptReader
fails naming the checkpoint, the data file, the tensor and the block; so does a read
of a few rows of that block that do not hold the flipped bit (the whole block is
checked). A tensor whose blocks are intact loads; with verify=False everything loads,
and the flipped value comes back. A forked child refuses an inherited Checkpoint and
closes it without waiting for its parent's hash threads."""
import json
import os
import shutil
import subprocess
import time

import torch
import torch.distributed.checkpoint as dcp

import common
import libshard
from libshard.dcp import CkptReader, CkptWriter


def state():
    g = torch.Generator().manual_seed(5)
    # 6 MB each, back to back in one file: a in 4 MiB blocks 0-1, b in 1-2.
    return {"a": torch.randn(1500, 1000, generator=g),
            "b": torch.randn(1500, 1000, generator=g)}


def extent(root, name, tensor):
    """(data file, offset) of the tensor's first extent."""
    out = subprocess.run([common.tool("ckpt-inspect"), root, name, "--json", "--tensor",
                          tensor], capture_output=True, text=True, check=True).stdout
    t = next(t for t in json.loads(out)["tensors"] if t["name"] == tensor)
    e = t["shards"][0]["extents"][0]
    return e["file"], e["offset"]


def flip(path, pos):
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ 0x10]))


def load(root, sd, **kw):
    dcp.load(sd, storage_reader=CkptReader(root, "c", **kw), no_dist=True)
    return sd


def main():
    root = common.tmpdir("vload")
    saved = state()
    dcp.save(saved, storage_writer=CkptWriter(root, "c"), no_dist=True)
    file, off = extent(root, "c", "b")
    elem = 1400 * 1000 + 3                 # in b's last block
    flip(os.path.join(root, "c", file), off + elem * 4 + 2)
    block = (off + elem * 4) >> 22
    where = os.path.join(root, "c")

    def named(e, what):
        msg = str(e)
        for part in (where, file, "tensor b", f"block {block} "):
            assert part in msg, f"{what}: the error does not name {part!r}: {msg}"

    try:
        load(root, {k: torch.zeros_like(v) for k, v in saved.items()})
    except BaseException as e:             # DCP's CheckpointException
        named(e, "dcp.load")
    else:
        raise AssertionError("dcp.load loaded the corrupt block")
    # Rows 1100-1149 of b: bytes of the same block, before the flipped one.
    assert (off + 1100 * 4000) >> 22 == block
    rows = torch.zeros(50, 1000)
    ck = libshard.Checkpoint(root, "c")
    try:
        ck.read("b", (1100, 0), (50, 1000), rows.data_ptr(), rows.numel() * 4)
    except libshard.CkptError as e:
        named(e, "a read of rows 1100-1149")
    else:
        raise AssertionError("rows of the corrupt block loaded")
    ck.close()
    got = load(root, {"a": torch.zeros(1500, 1000)})
    assert torch.equal(got["a"], saved["a"]), "a, in intact blocks, did not load"

    raw = load(root, {k: torch.zeros_like(v) for k, v in saved.items()}, verify=False)
    b, want = raw["b"].reshape(-1), saved["b"].reshape(-1)
    assert not torch.equal(b[elem], want[elem]), "verify=False did not return the flip"
    b[elem] = want[elem]
    assert torch.equal(b, want), "verify=False changed other elements"

    # The handle's hash threads are the parent's: a forked child refuses the inherited
    # Checkpoint and drops it without waiting for them.
    ck = libshard.Checkpoint(root, "c")
    ck.read("a", (0, 0), (50, 1000), rows.data_ptr(), rows.numel() * 4)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            ck.read("a", (0, 0), (50, 1000), rows.data_ptr(), rows.numel() * 4)
        except ValueError as e:
            code = 0 if "forked" in str(e) else 2
        ck.close()
        os._exit(code)
    for _ in range(300):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        raise AssertionError("a forked child hung closing an inherited Checkpoint")
    assert os.waitstatus_to_exitcode(status) == 0, f"forked child: {status}"
    ck.close()
    shutil.rmtree(root)
    print(f"flipped bit in {file} block {block}: refused by name; verify=False loads it")


if __name__ == "__main__":
    common.main(main)
