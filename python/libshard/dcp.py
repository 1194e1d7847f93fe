"""PyTorch Distributed Checkpoint (DCP) on libshard checkpoints.

    import torch.distributed.checkpoint as dcp
    from libshard.dcp import CkptWriter, CkptReader

    dcp.save(sd, storage_writer=CkptWriter("/ckpt", "step-100"))
    f = dcp.async_save(sd, storage_writer=CkptWriter("/ckpt", "step-200"))
    dcp.load(sd, storage_reader=CkptReader("/ckpt"))          # the newest committed

See README.md ("PyTorch quick start") for what differs from FileSystemWriter.
"""
from .reader import CkptReader
from .writer import CkptWriter

__all__ = ["CkptReader", "CkptWriter", "import_dcp"]


def import_dcp(src_dir, root, name, **kw):
    """Converts a directory written by DCP's FileSystemWriter into a committed
    checkpoint ROOT/NAME (see libshard.import_dcp)."""
    from .import_dcp import import_dcp as run
    return run(src_dir, root, name, **kw)
