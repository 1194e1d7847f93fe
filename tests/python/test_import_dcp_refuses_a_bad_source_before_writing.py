"""ckpt-import-dcp refuses what is no DCP checkpoint directory (a missing path, a file,
a directory without .metadata) with exit 2, and a damaged one (a .metadata that is no
pickle or no DCP Metadata, a data file missing or cut short) with exit 1, each with a
message naming the path, and in every case before anything is written: ROOT, which
did not exist, still does not. A good source then imports into that missing ROOT,
which the importer makes as the other tools make theirs, and verifies."""
import contextlib
import io
import os
import pickle
import shutil

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter

import common


def cli(*args):
    """The command line's main, in this process (a fresh python would import torch for
    every case): (exit code, stderr)."""
    from libshard.import_dcp import main
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(list(args))
    return code, err.getvalue()


def variant(good, tag, edit):
    d = good + "-" + tag
    shutil.copytree(good, d)
    edit(d)
    return d


def main():
    base = common.tmpdir("impbad")
    good = os.path.join(base, "good")
    sd = {"w": torch.arange(4096, dtype=torch.float32).reshape(64, 64), "b": torch.ones(7),
          "extra": {"epoch": 3}}
    dcp.save(sd, storage_writer=FileSystemWriter(good), no_dist=True)
    data = sorted(f for f in os.listdir(good) if f.endswith(".distcp"))
    assert data, os.listdir(good)
    afile = os.path.join(base, "a-file")
    with open(afile, "w") as f:
        f.write("not a checkpoint\n")
    empty = os.path.join(base, "empty")
    os.mkdir(empty)

    def write_meta(obj):
        return lambda d: pickle.dump(obj, open(os.path.join(d, ".metadata"), "wb"))

    usage = {"missing": os.path.join(base, "nowhere"), "file": afile, "no-metadata": empty}
    bad = {
        "garbage-metadata": variant(good, "garbage", lambda d: open(
            os.path.join(d, ".metadata"), "wb").write(b"\x80\x04garbage")),
        "other-pickle": variant(good, "dict", write_meta({"not": "metadata"})),
        "missing-data": variant(good, "nodata", lambda d: os.remove(os.path.join(d, data[0]))),
        "truncated-data": variant(good, "short", lambda d: os.truncate(
            os.path.join(d, data[0]), os.path.getsize(os.path.join(d, data[0])) // 2)),
    }
    root = os.path.join(base, "root")
    for tag, src in list(usage.items()) + list(bad.items()):
        code, err = cli(src, root, f"x-{tag}")
        want = 2 if tag in usage else 1
        assert code == want, (tag, code, err)
        named = src if tag in usage else os.path.basename(src)
        assert named in err, (tag, err)
        assert not os.path.exists(root), f"{tag}: {root} was made for a source refused"
        print(f"{tag}: {err.strip()}")
    code, err = cli(good, root, "step-1")
    assert code == 0, (code, err)
    common.check([common.tool("ckpt-verify"), root, "step-1", "--deep"])


if __name__ == "__main__":
    common.main(main)
