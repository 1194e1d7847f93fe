"""CheckpointManager is safe by default (one process):
- a root that does not exist is made, and load() says training starts from scratch,
  naming it; a checkpoint, a file or a DCP checkpoint directory given as the root is
  refused with what it is and what to pass (it used to start from scratch, and then
  write inside the committed checkpoint);
- retention and resume count only the run's step-<N>, by number: with keep_latest_k=2
  a best-model made by ckpt-reshard --name, ckpt-reshard's own step-3-2 and a foreign
  ft-100 (step 100) stay, step-9 goes before step-10, and load() resumes from step-10,
  never from ft-100 (both used to happen);
- a failed save never stops training, in all three modes: after load(step=2) with
  steps 3 and 4 committed, save(3) fails, is logged and counted, and save() returns
  (DCP's CheckpointException, a BaseException, used to escape); load(step=2,
  discard_newer=True) removes steps 3 and 4 through the core, logs each, and the next
  save(3) commits;
- one log line per committed save gives its step, bytes and seconds, and stats holds
  them."""
import logging
import os

import torch
import torch.distributed.checkpoint as dcp

import common
import libshard
from libshard.dcp import CkptWriter
from libshard.loop import CheckpointManager, newest_step


class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())

    def grep(self, *words):
        return [l for l in self.lines if all(w in l for w in words)]


def state(v):
    return {"w": torch.full((5, 3), float(v)), "step": torch.tensor(v)}


def names(root):
    return sorted(n for *_, n in libshard.committed(root))


def expect(exc, fn, *words):
    try:
        fn()
    except exc as e:
        for w in words:
            assert w in str(e), (w, str(e))
        return
    raise AssertionError(f"{fn} did not raise {exc.__name__}")


def wrong_roots(base, lines):
    root = os.path.join(base, "new", "root")
    m = CheckpointManager(root)
    assert os.path.isdir(root), "a missing root is made"
    assert m.load(state(0)) is None
    assert lines.grep("starts from scratch", root), lines.lines
    m.save(1, state(1))
    m.close()
    ck = os.path.join(root, "step-1")
    before = sorted(os.listdir(ck))
    expect(ValueError, lambda: CheckpointManager(ck), "is a checkpoint", root, "load(step=N)")
    assert sorted(os.listdir(ck)) == before, "something was written inside the checkpoint"
    f = os.path.join(base, "a-file")
    open(f, "w").close()
    expect(NotADirectoryError, lambda: CheckpointManager(f), f, "is a file")
    d = os.path.join(base, "dcp-dir")
    dcp.save(state(2), checkpoint_id=d, no_dist=True)
    expect(ValueError, lambda: CheckpointManager(d), "DCP", "initial_load_path")


def owns_only_its_steps(base, lines):
    root = os.path.join(base, "retention")
    m = CheckpointManager(root, keep_latest_k=2)
    for step in (1, 2, 3):
        m.save(step, state(step))
        m.maybe_wait_for_staging()
    m.maybe_wait_for_saving()
    reshard = common.tool("ckpt-reshard")
    common.check([reshard, root, "step-3", "--to-mesh", "2"])                  # step-3-2
    common.check([reshard, root, "step-3", "--to-mesh", "2", "--name", "best-model",
                  "--out", root])
    dcp.save(state(100), storage_writer=CkptWriter(root, "ft-100", step=100), no_dist=True)
    for step in (9, 10):
        m.save(step, state(step))
        m.maybe_wait_for_staging()
    m.close()
    assert names(root) == ["best-model", "ft-100", "step-10", "step-3-2", "step-9"], names(root)
    assert newest_step(root) == 10
    assert m.stats.saves == 5 and m.stats.last_step == 10, m.stats
    assert m.stats.last_bytes >= 5 * 3 * 4 and m.stats.last_seconds >= 0, m.stats
    assert lines.grep("committed step-10", f"{m.stats.last_bytes} bytes", " s"), lines.lines
    got = state(0)
    assert CheckpointManager(root).load(got) == 10
    assert torch.equal(got["w"], torch.full((5, 3), 10.0)), got["w"]


def failed_save_goes_on(base, lines, mode):
    root = os.path.join(base, mode)
    m = CheckpointManager(root, async_mode=mode)
    for step in (1, 2, 3, 4):
        m.save(step, state(step))
    m.close()
    m = CheckpointManager(root, async_mode=mode)
    got = state(0)
    assert m.load(got, step=2) == 2 and int(got["step"]) == 2
    assert lines.grep("newer steps", "step-3", "discard_newer"), lines.lines
    m.save(3, state(3))                       # step-3 is committed: this save fails
    m.maybe_wait_for_staging()
    m.maybe_wait_for_saving()
    assert m.stats.failed == 1 and m.stats.saves == 0, (mode, m.stats)
    assert lines.grep("checkpoint step-3 under", "failed"), lines.lines
    assert m.load(got, step=2, discard_newer=True) == 2
    assert lines.grep("discard_newer: removed step-4") and \
        lines.grep("discard_newer: removed step-3"), lines.lines
    assert names(root) == ["step-1", "step-2"], names(root)
    m.save(3, state(33))
    m.close()
    assert m.stats.saves == 1 and m.stats.failed_in_a_row == 0, (mode, m.stats)
    got = state(0)
    assert CheckpointManager(root).load(got) == 3 and int(got["step"]) == 33, got


def main():
    lines = Lines()
    logging.getLogger("libshard").addHandler(lines)
    logging.getLogger("libshard").setLevel(logging.INFO)
    base = common.tmpdir("mgr-safe")
    wrong_roots(base, lines)
    owns_only_its_steps(base, lines)
    for mode in ("disabled", "async", "async_with_pinned_mem"):
        failed_save_goes_on(base, lines, mode)


if __name__ == "__main__":
    common.main(main)
