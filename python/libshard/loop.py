"""What a torchtitan-style training loop needs around CkptWriter and CkptReader.

    from libshard.loop import CheckpointManager

    ckpt = CheckpointManager("/ckpt", keep_latest_k=3)      # ckptd if $CKPTD_SOCKET
    step = ckpt.load(state) or 0                            # resume; staging made now
    for step in range(step + 1, steps + 1):
        train_step()                                        # optimizer.step() fences
        if step % 100 == 0:
            ckpt.save(step, state)                          # async: queues the copies
    ckpt.close()                                            # waits for the last save

A checkpoint is named ``step-N``; only committed ones exist under the root (there is
no ``.metadata`` to look for: a directory ROOT/step-N is complete by construction).
"""
import logging
import os

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from . import _ck, committed, engine
from .reader import CkptReader
from .writer import CkptWriter

log = logging.getLogger("libshard")


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
    newest committed, or a given step), maybe_wait_for_staging, maybe_wait_for_saving,
    close, and a keep_latest_k purge by rank 0 after each commit.

    async_staging (default True): save returns once the copies into staging are queued,
    and the copies run during the next forward and backward. The manager then fences
    every optimizer's step (a pre-hook on torch.optim's step): no parameter or moment
    changes before its copy is done. Anything else that changes saved state in place
    must call maybe_wait_for_staging first.

    A failed save does not stop training: it is logged and counted (failed_saves,
    failed_in_a_row), and the next save goes on. max_failed_saves=K raises instead once
    K saves in a row have failed (0: never). Every rank gets the same verdict (DCP
    gives every rank the coordinator's outcome), so every rank goes on or stops alike.

    process_group: the group DCP's collectives run on. By default, with async saves
    and torch.distributed initialized, a gloo group the manager makes, so that the
    save's background collectives never interleave with the training thread's (every
    rank makes its manager: new_group is collective).
    """

    def __init__(self, root, *, keep_latest_k=0, socket=None, hash=True, async_save=True,
                 async_staging=True, process_group=None, max_failed_saves=0):
        self.root = os.fspath(root)
        self.keep_latest_k = keep_latest_k
        self.socket = socket
        self.hash = hash
        self.async_save = async_save
        self.async_staging = async_staging and async_save
        self.process_group = process_group
        if process_group is None and async_save and dist.is_available() and \
                dist.is_initialized():
            # DCP runs the rest of an async save (its plan, the results, the commit's
            # all-reduce) on a thread of its own. On the group the training thread also
            # uses, the two threads' collectives interleave in different orders on
            # different ranks and both hang. A gloo group of its own, as torchtitan makes
            # for async checkpointing; new_group is collective, so every rank makes its
            # manager at the same point, as it does anyway.
            self.process_group = dist.new_group(backend="gloo")
        self.max_failed_saves = max_failed_saves
        self.failed_saves = 0
        self.failed_in_a_row = 0
        self._future = None
        self._writer = None
        self._hook = None
        if self.async_staging:
            self._hook = register_optimizer_step_pre_hook(
                lambda _opt, _args, _kwargs: self.maybe_wait_for_staging())

    def _rank(self):
        return dist.get_rank(self.process_group) if dist.is_initialized() else 0

    def save(self, step, state_dict):
        self.maybe_wait_for_saving()
        self._writer = CkptWriter(self.root, step_name(step), socket=self.socket,
                                  hash=self.hash, step=step, process_group=self.process_group,
                                  async_staging=self.async_staging)
        if self.async_save:
            try:
                self._future = dcp.async_save(state_dict, storage_writer=self._writer,
                                              process_group=self.process_group)
            except Exception as e:    # staging failed: the save is over, training is not
                self._failed(step_name(step), e)
        else:
            try:
                dcp.save(state_dict, storage_writer=self._writer,
                         process_group=self.process_group)
            except Exception as e:
                self._failed(step_name(step), e)
            else:
                self._after_commit()

    def reserve(self, state_dict):
        """Makes (and for CUDA tensors page-locks) the staging for saves of state_dict
        now, so that the first save stalls no longer than the others. load() does it."""
        CkptWriter(self.root, socket=self.socket, process_group=self.process_group,
                   async_staging=self.async_staging).reserve(state_dict)

    def maybe_wait_for_staging(self):
        """Returns once the save in flight no longer reads the state (its copies into
        staging are done); a failed staging counts as a failed save."""
        if self._writer is None:
            return
        try:
            self._writer.maybe_wait_for_staging()
        except Exception as e:
            w, f = self._writer, self._future
            self._writer = self._future = None
            self._wait_quietly(f)
            w.close()
            self._failed(w.name, e)

    def maybe_wait_for_saving(self):
        if self._future is not None:
            f, self._future = self._future, None
            w = self._writer
            try:
                f.result()
            except BaseException as e:     # DCP raises CheckpointException, a BaseException
                if not isinstance(e, Exception) and type(e).__name__ != "CheckpointException":
                    raise
                self._failed(w.name if w else "?", e)
            else:
                self._after_commit()

    @staticmethod
    def _wait_quietly(f):
        if f is not None:
            try:
                f.result()
            except BaseException as e:
                if not isinstance(e, Exception) and type(e).__name__ != "CheckpointException":
                    raise

    def _failed(self, name, e):
        self.failed_saves += 1
        self.failed_in_a_row += 1
        log.warning("checkpoint %s under %s failed (%d in a row, %d in all): %s", name,
                    self.root, self.failed_in_a_row, self.failed_saves, e)
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self.max_failed_saves and self.failed_in_a_row >= self.max_failed_saves:
            raise RuntimeError(f"CheckpointManager: {self.failed_in_a_row} saves in a row "
                               f"failed under {self.root} (max_failed_saves="
                               f"{self.max_failed_saves}); the last: {e}") from e

    def _after_commit(self):
        self.failed_in_a_row = 0
        if self._writer is not None:
            self._writer.close()
        if self._rank() == 0:
            purge(self.root, self.keep_latest_k)

    def load(self, state_dict, step=None):
        """Loads the given step, or the newest committed; returns the step loaded, or
        None when there is none to load. Reserves the staging of saves of state_dict."""
        name = step_name(step) if step is not None else None
        # Without a ckptd (whose start recovers the root), rank 0 removes what dead runs
        # left (pending saves, their engines' heartbeats) before this run saves.
        if self._rank() == 0 and engine.socket_of(self.socket) is None and \
                os.path.isdir(self.root):
            _ck.recover(self.root)
        if self.async_save:
            self.reserve(state_dict)
        if name is None and newest_step(self.root) is None:
            return None
        reader = CkptReader(self.root, name)
        dcp.load(state_dict, storage_reader=reader, process_group=self.process_group)
        return reader.loaded_step

    def close(self):
        self.maybe_wait_for_saving()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
