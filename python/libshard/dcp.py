"""PyTorch Distributed Checkpoint (DCP) on libshard checkpoints.

    import torch.distributed.checkpoint as dcp
    from libshard.dcp import CkptWriter, CkptReader

    dcp.save(sd, storage_writer=CkptWriter("/ckpt", "step-100"))
    f = dcp.async_save(sd, storage_writer=CkptWriter("/ckpt", "step-200"))
    dcp.load(sd, storage_reader=CkptReader("/ckpt"))          # the newest committed

See README.md ("PyTorch") for what differs from FileSystemWriter.
"""
from .reader import CkptReader

__all__ = ["CkptReader"]
