"""A worker forked without exec (multiprocessing's fork context, as DataLoader and Pool
workers are) never keeps its trainer's save lock (issue 28, defect 5; decision 0144).
The trainer holds a save in flight (an embedded client's part of rank 0 of 2: the
engine holds .pending/step-1.lock waiting for rank 1), forks a worker that sleeps, and
is killed with SIGKILL. While the worker lives: step-1 is debris, not busy; recovery
removes it; and a new save of step-1 commits. On main the worker held the lock: step-1
was "busy" naming the dead trainer, and the save failed with EBUSY."""
import os
import signal
import subprocess
import sys

import torch
import torch.distributed.checkpoint as dcp

import common
import libshard
from libshard import _ck
from libshard.dcp import CkptWriter

TRAINER = r"""
import multiprocessing, sys, time
from libshard import _ck
root = sys.argv[1]
client = _ck.Client(root, embedded=True)
save = client.begin("step-1", 1, 0, _ck.job_id_new(), _ck.Decl(2, []))
save.blob("x", b"rank 0's part")
save.submit([])
for _ in range(3000):
    if _ck.name_state(root, "step-1")[0] == "busy":
        break
    time.sleep(0.01)
ctx = multiprocessing.get_context("fork")
running = ctx.Event()
def work():                 # once it runs, fork's child handlers have run in it
    running.set()
    time.sleep(600)
worker = ctx.Process(target=work)
worker.start()
running.wait(60)
print(_ck.name_state(root, "step-1")[0], worker.pid, flush=True)
time.sleep(600)
"""


def main():
    root = common.tmpdir("forkworker")
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, root], stdout=subprocess.PIPE,
                               text=True)
    worker = None
    try:
        state, pid = trainer.stdout.readline().split()
        worker = int(pid)
        assert state == "busy", f"the trainer's save was {state}"
        trainer.kill()
        trainer.wait()
        os.kill(worker, 0)                  # the worker lives on
        state, who = _ck.name_state(root, "step-1")
        assert state == "debris", f"step-1 is {state} ({who}) once its trainer died"
        assert _ck.recover(root) == 1
        dcp.save({"w": torch.arange(8.0)}, storage_writer=CkptWriter(root, "step-1"))
        assert [n for *_, n in libshard.committed(root)] == ["step-1"]
        os.kill(worker, 0)
    finally:
        if trainer.poll() is None:
            trainer.kill()
        if worker is not None:
            os.kill(worker, signal.SIGKILL)


if __name__ == "__main__":
    common.main(main)
