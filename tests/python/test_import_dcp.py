"""import_dcp of a FileSystemWriter directory (FSDP2 on 2 ranks) equals CkptWriter's
native save of the same state (ckpt-verify --against), passes ckpt-verify --deep, and
loads through CkptReader; a corrupt .distcp (truncated, a flipped data byte, a flipped
header byte) gives exit 1 and a message naming the file and item, never a crash, and
leaves nothing committed."""
import json
import os
import shutil
import subprocess
import sys

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter

import common
from libshard.dcp import CkptWriter


def save(rank, world, root, fsdir):
    model, opt = common.build()
    sd = common.state(model, opt)
    dcp.save(sd, storage_writer=FileSystemWriter(fsdir))
    dcp.save(sd, storage_writer=CkptWriter(root, "native-00000100"))


def cli(*args):
    return subprocess.run([sys.executable, "-m", "libshard.import_dcp", *args],
                          capture_output=True, text=True, timeout=120)


def corrupt(fsdir, tag, edit):
    bad = fsdir + "-" + tag
    shutil.copytree(fsdir, bad)
    path = os.path.join(bad, "__0_0.distcp")
    edit(path)
    return bad


def flip(path, off):
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x40]))


def first_data_byte(fsdir):
    """The file offset of the first tensor byte of rank 0's largest item."""
    import pickle
    from libshard.import_dcp import _tensor_record
    with open(os.path.join(fsdir, ".metadata"), "rb") as f:
        meta = pickle.load(f)
    items = [(i.length, idx, i) for idx, i in meta.storage_data.items()
             if i.relative_path == "__0_0.distcp" and idx.offset is not None]
    _len, idx, info = max(items, key=lambda x: x[0])
    with open(os.path.join(fsdir, "__0_0.distcp"), "rb") as f:
        off, nbytes, _reb, _crc = _tensor_record(f, "__0_0.distcp", info, idx.fqn)
    assert nbytes > 0
    return off + nbytes // 2


def main():
    root = common.tmpdir("imp")
    fsdir = common.tmpdir("impfs")
    common.run_ranks(2, save, root, fsdir)
    p = cli(fsdir, root, "imported-00000100", "--json")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["tensors"] > 10 and s["world"] == 2, s
    common.check([common.tool("ckpt-verify"), root, "imported-00000100", "--deep"])
    common.check([common.tool("ckpt-verify"), root, "imported-00000100", "--against",
                  "native-00000100"])
    p = cli(fsdir, root, "imported-00000100")
    assert p.returncode == 2 and "imported-00000100" in p.stderr, (p.returncode, p.stderr)

    size = os.path.getsize(os.path.join(fsdir, "__0_0.distcp"))
    data_off = first_data_byte(fsdir)
    cases = {
        "truncated": lambda path: os.truncate(path, size // 2),
        "flipped-data": lambda path: flip(path, data_off),
        "flipped-header": lambda path: flip(path, 2),
    }
    for tag, edit in cases.items():
        bad = corrupt(fsdir, tag, edit)
        p = cli(bad, root, f"bad-{tag}")
        assert p.returncode == 1, (tag, p.returncode, p.stdout, p.stderr)
        assert "__0_0.distcp" in p.stderr and "Traceback" not in p.stderr, (tag, p.stderr)
        assert not os.path.exists(os.path.join(root, f"bad-{tag}")), tag
        print(f"{tag}: {p.stderr.strip()}")
    p = cli(os.path.join(root, "nowhere"), root, "x")
    assert p.returncode == 2 and "nowhere" in p.stderr, p.stderr
    assert cli("--help").returncode == 0


if __name__ == "__main__":
    common.main(main)
