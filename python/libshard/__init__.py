"""libshard: crash-safe, fast, mesh-portable checkpoints (the C core, for Python).

``libshard.dcp`` holds the PyTorch Distributed Checkpoint storage layer
(``CkptWriter``, ``CkptReader``, ``import_dcp``); ``libshard.loop`` the helpers of a
training loop (newest committed step, keep-last-K purge); ``libshard.export`` writes a
checkpoint's model as Hugging Face safetensors. This module needs no torch.
"""
import errno
import os as _os
import warnings

try:
    from ._ck import VERSION as __version__, Checkpoint, CkptError, scan
except ImportError:
    _here = _os.path.dirname(_os.path.abspath(__file__))
    if not _os.path.exists(_os.path.join(_here, "meson.build")):
        raise
    # The source tree's python/libshard shadows the package that has the compiled
    # extension: Python put the current directory (python/) first on sys.path, and
    # there _ck is the folder of the extension's C sources.
    raise ImportError(
        f"libshard was imported from the source tree ({_here}), which has no compiled "
        f"extension libshard._ck: the source tree came first on sys.path (the current "
        f"directory, or PYTHONPATH) and shadows the built package. Run from another "
        f"directory than python/, or point Python at the build tree "
        f"(PYTHONPATH=build/python after scripts/build build), or install it (pip install .)",
        name=__name__ + "._ck") from None

__all__ = ["Checkpoint", "CkptError", "scan", "committed", "newest", "__version__"]


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
