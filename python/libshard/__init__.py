"""libshard: crash-safe, fast, mesh-portable checkpoints (the C core, for Python).

``libshard.dcp`` holds the PyTorch Distributed Checkpoint storage layer
(``CkptWriter``, ``CkptReader``, ``import_dcp``); ``libshard.loop`` the helpers of a
training loop (newest committed step, keep-last-K purge). This module needs no torch.
"""
import errno
import warnings

from ._ck import Checkpoint, CkptError, scan

__all__ = ["Checkpoint", "CkptError", "scan", "committed", "newest"]


def committed(root):
    """[(step, time_ns, name)] of the committed checkpoints under root, oldest first.

    The directories are the truth (a catalog entry may lag a crash by one commit). A
    checkpoint that cannot be read is left out with a warning naming it and why."""
    out = []
    for name in scan(root)[0]:
        try:
            ck = Checkpoint(root, name)
        except CkptError as e:
            if e.errno != errno.ENOENT:     # ENOENT: removed while we looked (a purge)
                warnings.warn(f"libshard: skipping checkpoint {name} of {root}: {e}",
                              RuntimeWarning, stacklevel=2)
            continue
        info = ck.info()
        ck.close()
        out.append((info["step"], info["time_ns"], name))
    out.sort()
    return out


def newest(root):
    """The name of the committed checkpoint with the highest step (the latest commit
    among equal steps), or None."""
    cks = committed(root)
    return cks[-1][2] if cks else None
