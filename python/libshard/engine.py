"""The save engines of this process: one client (libshard._ck.Client) per checkpoint
root and engine, shared by every CkptWriter and by CheckpointManager.

A client owns the staging areas a save is copied into (faulted in ahead, page-locked
for the GPU when it saves CUDA tensors) and the connection to ckptd, or the embedded
engine with its threads. Making them costs far more than a save's copy, so they are
made once per process and reused by every save, whichever writer object starts it (the
usual loop makes a new CkptWriter per save).

Embedded, each process of a job runs one engine, and the engines meet through the root
(docs/FORMAT.md, "Saves served by several daemons"), so the client is keyed by the
number of processes too. A client is used by one thread at a time (ck/client.h): every
call goes through Engine.lock, and waiting for a commit polls, so that a save's
background thread never holds the client while the training thread starts the next
save.
"""
import atexit
import logging
import os
import threading
import time

from . import _ck

log = logging.getLogger("libshard")
_engines = {}
_engines_lock = threading.Lock()


class Engine:
    """A client and the lock that keeps it to one thread at a time."""

    def __init__(self, root, socket, nodes, pin):
        # Reentrant: a writer's garbage collected part may free its save from a thread
        # that holds the lock already.
        self.lock = threading.RLock()
        try:
            self.client = _ck.Client(root, socket, embedded=socket is None, nodes=nodes,
                                     pin=pin)
        except _ck.CkptError as e:
            if pin < 0:
                raise
            # No driver to page-lock with: the copies still work, at pageable speed.
            log.warning("libshard: staging not page-locked for GPU %d (%s); device copies "
                        "into it run at pageable speed", pin, e)
            self.client = _ck.Client(root, socket, embedded=socket is None, nodes=nodes)
        self.reserved = 0

    @property
    def connected(self):
        return self.client.connected

    def reserve(self, nbytes, wait=False):
        """Staging for parts of nbytes made now (and pinned), off the first save's path."""
        if nbytes <= self.reserved:
            return
        with self.lock:
            self.client.reserve(nbytes, wait)
        self.reserved = nbytes

    def call(self, fn, *args):
        with self.lock:
            return fn(*args)

    def wait(self, save, poll=0.005):
        """Blocks until save is committed (or raises its error), holding the client only
        for each look."""
        while True:
            with self.lock:
                state = save.poll()
            if state == 3:
                return
            time.sleep(poll)

    def close(self):
        with self.lock:
            self.client.close()


def socket_of(socket):
    """ckptd's socket: the one given, else $CKPTD_SOCKET, else None (embedded)."""
    return socket or os.environ.get("CKPTD_SOCKET") or None


def engine(root, socket, nodes, pin=-1):
    """This process's engine for root: ckptd's at socket, or the embedded one whose
    job has nodes processes. pin: a CUDA device the staging must be page-locked for (a
    client made without it is replaced, once, by one with it)."""
    socket = socket_of(socket)
    # Through ckptd the count is of daemons ($CKPTD_NODES), not of processes.
    nodes = 0 if socket else nodes
    key = (os.path.realpath(root) if root else None, socket, nodes)
    with _engines_lock:
        e = _engines.get(key)
        if e is not None and pin >= 0 and not e.client.pinned:
            e.close()
            e = None
        if e is None:
            e = _engines[key] = Engine(root, socket, nodes, pin)
        return e


def close_all():
    """Closes every engine of this process: each waits until the parts it staged are
    durable (and, embedded, until the saves it can finish are committed)."""
    with _engines_lock:
        engines = list(_engines.values())
        _engines.clear()
    for e in engines:
        e.close()


def _forget_after_fork():
    # A forked child has the parent's clients without their threads (and perhaps the
    # lock as another thread held it): it makes its own. Dropping the parent's never
    # reaches their engines (_ck's clients know the process that opened them).
    global _engines_lock
    _engines.clear()
    _engines_lock = threading.Lock()


atexit.register(close_all)
os.register_at_fork(after_in_child=_forget_after_fork)
