"""What a torchtitan-style training loop needs around CkptWriter and CkptReader.

    from libshard.loop import CheckpointManager

    ckpt = CheckpointManager("/ckpt", keep_latest_k=3)      # ckptd if $CKPTD_SOCKET
    step = ckpt.load(state) or 0                            # resume from the newest
    for step in range(step + 1, steps + 1):
        train_step()
        if step % 100 == 0:
            ckpt.save(step, state)                          # async: stalls for one copy
    ckpt.close()                                            # waits for the last save

A checkpoint is named ``step-N``; only committed ones exist under the root (there is
no ``.metadata`` to look for: a directory ROOT/step-N is complete by construction).
"""
import os

import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from . import _ck, committed
from .reader import CkptReader
from .writer import CkptWriter


def step_name(step, prefix="step-"):
    return f"{prefix}{step}"


def newest_step(root):
    """The highest step among the committed checkpoints of root, or None."""
    cks = committed(root) if os.path.isdir(root) else []
    return cks[-1][0] if cks else None


def purge(root, keep_latest_k):
    """Removes all but the keep_latest_k newest committed checkpoints, each by the
    core's removal (crash-safe at every step: a crash mid-purge leaves debris for
    recovery, never a half-deleted checkpoint that looks committed). Returns the names
    removed."""
    if keep_latest_k <= 0:
        return []
    gone = []
    for _step, _t, name in committed(root)[:-keep_latest_k]:
        _ck.remove(root, name)
        gone.append(name)
    return gone


class CheckpointManager:
    """save (async_save every call, after waiting for the previous one), load (the
    newest committed, or a given step), maybe_wait_for_staging (staging is over when
    save returns), maybe_wait_for_saving, close, and a keep_latest_k purge by rank 0
    after each commit."""

    def __init__(self, root, *, keep_latest_k=0, socket=None, hash=True, async_save=True,
                 process_group=None):
        self.root = os.fspath(root)
        self.keep_latest_k = keep_latest_k
        self.socket = socket
        self.hash = hash
        self.async_save = async_save
        self.process_group = process_group
        self._future = None
        self._writer = None

    def _rank(self):
        return dist.get_rank(self.process_group) if dist.is_initialized() else 0

    def save(self, step, state_dict):
        self.maybe_wait_for_saving()
        self._writer = CkptWriter(self.root, step_name(step), socket=self.socket,
                                  hash=self.hash, step=step, process_group=self.process_group)
        if self.async_save:
            self._future = dcp.async_save(state_dict, storage_writer=self._writer,
                                          process_group=self.process_group)
        else:
            dcp.save(state_dict, storage_writer=self._writer, process_group=self.process_group)
            self._after_commit()

    def maybe_wait_for_staging(self):
        """CkptWriter stages inside async_save (one copy), so there is nothing to wait for."""

    def maybe_wait_for_saving(self):
        if self._future is not None:
            f, self._future = self._future, None
            f.result()
            self._after_commit()

    def _after_commit(self):
        if self._writer is not None:
            self._writer.close()
        if self._rank() == 0:
            purge(self.root, self.keep_latest_k)

    def load(self, state_dict, step=None):
        """Loads the given step, or the newest committed; returns the step loaded, or
        None when there is none to load."""
        name = step_name(step) if step is not None else None
        if name is None and newest_step(self.root) is None:
            return None
        reader = CkptReader(self.root, name)
        dcp.load(state_dict, storage_reader=reader, process_group=self.process_group)
        return reader.loaded_step

    def close(self):
        self.maybe_wait_for_saving()
