"""What a torchtitan-style training loop needs around CkptWriter and CkptReader.

    from libshard.loop import CheckpointManager

    ckpt = CheckpointManager("ckpt", keep_latest_k=3, interval=100)  # ckptd if $CKPTD_SOCKET
    start = ckpt.load(state) or 0                       # resume; staging made now
    for step in range(start + 1, steps + 1):
        train_step()                                    # optimizer.step() fences
        ckpt.save(step, state, last_step=step == steps) # every interval-th step
    ckpt.close()                                        # waits for the last save

The manager names its saves PREFIX<step> (``step-100``) and owns only those: it
resumes from the highest of them (by number), and keep_latest_k counts and removes
only them (the core's rule, ck/steps.h), never a ``best-model`` or a reshard's
``step-100-2x8`` in the same root. Options carry torchtitan's ``[checkpoint]`` names
(docs/pytorch.md has the table, and what differs).
"""
import errno
import logging
import os
import time

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from . import _ck, engine, hf, names
from .export import export_hf
from .reader import CkptReader, PLANNER_DATA_BLOB
from .writer import CkptWriter

log = logging.getLogger("libshard")

ASYNC_MODES = {            # torchtitan's async_mode -> (async_save, async_staging)
    "disabled": (False, False),
    "async": (True, False),
    "async_with_pinned_mem": (True, True),
}
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_SAVE_ERRORS = (Exception, CheckpointException)    # DCP's is a BaseException


def step_name(step, prefix="step-"):
    return f"{prefix}{step}"


def newest_step(root, prefix="step-"):
    """The highest step among the committed PREFIX<digits> of root, or None."""
    if not os.path.isdir(root):
        return None
    got = _ck.newest_step(root, prefix)
    return got[1] if got else None


def purge(root, keep_latest_k, prefix="step-"):
    """Removes all but the keep_latest_k newest committed PREFIX<digits> of root (by
    step number; no other name is counted or removed), each by the core's crash-safe
    removal. Returns the names removed."""
    if keep_latest_k <= 0:
        return []
    return _ck.prune(root, prefix, keep_latest_k)


def check_root(root):
    """Refuses a path that cannot be a checkpoint root, saying what it is and what to
    pass instead; returns quietly for a root, an empty or unrelated directory, or a
    path that does not exist yet."""
    kind = _ck.path_kind(root) if os.path.lexists(root) else None
    parent = os.path.dirname(os.path.abspath(root))
    if kind == "checkpoint":
        raise ValueError(
            f"CheckpointManager: {root} is a checkpoint, not a checkpoint root; pass the "
            f"directory that holds it ({parent}) as the root, and load(step=N) or "
            f"load(name={os.path.basename(os.path.abspath(root))!r}) to pick it")
    if os.path.lexists(root) and not os.path.isdir(root):
        raise NotADirectoryError(
            f"CheckpointManager: {root} is a file, not a directory; pass a directory as "
            "the checkpoint root (it is made if missing)")
    if kind is None and os.path.isfile(os.path.join(root, ".metadata")):
        raise ValueError(
            f"CheckpointManager: {root} is a checkpoint of DCP's FileSystemWriter, not a "
            f"checkpoint root; pass a root of its own, and start from it with "
            f"initial_load_path={root!r} (or bring it over: ckpt-import-dcp {root} ROOT NAME)")


class SaveStats:
    """What the manager's saves did: saves (committed), failed (in all), failed_in_a_row,
    last_step, last_bytes and last_seconds of the last committed save (bytes and
    seconds on rank 0: its data bytes, and save() to the commit)."""

    def __init__(self):
        self.saves = 0
        self.failed = 0
        self.failed_in_a_row = 0
        self.last_step = None
        self.last_bytes = None
        self.last_seconds = None

    def __repr__(self):
        return "SaveStats(" + ", ".join(f"{k}={v!r}" for k, v in vars(self).items()) + ")"


class CheckpointManager:
    """save (one async_save in flight: the next waits for it), load (the run's newest
    committed step, a given step or name, or an initial checkpoint), maybe_wait_for_
    staging, maybe_wait_for_saving, close, and a keep_latest_k purge by rank 0 after
    each commit. Options named as torchtitan's (docs/pytorch.md):

    root (torchtitan's folder): the checkpoint root. A checkpoint, a file or a DCP
        checkpoint directory is refused, saying what to pass; a missing root is made.
    prefix: the run's names are PREFIX<step>; only they are resumed from and purged.
    keep_latest_k: keep the k newest of the run's steps (0: all).
    interval, enable_first_step_checkpoint: save(step) saves when step % interval == 0,
        at step 1 if asked, and always with last_step=True (interval=1: every call).
    async_mode: "disabled" (dcp.save), "async" (save returns once the copy is staged),
        "async_with_pinned_mem" (the default: save returns once the copies are queued;
        they run during the next forward and backward, and optimizer.step() waits for
        them). Or the older async_save / async_staging flags.
    load_step: the step load() loads (-1: the newest). exclude_from_loading: top-level
        keys of the state dict that load() leaves alone. load_only: never save.
    initial_load_path, initial_load_model_only: where load() starts when the root holds
        no step of the run: a checkpoint (ROOT/NAME), a root (its newest step), a DCP
        FileSystemWriter directory, or Hugging Face safetensors (model only); with
        initial_load_model_only only state_dict[model_key] is loaded.
    last_save_model_only, export_dtype, last_save_in_hf, hf_key_map, hf_folder: the
        save with last_step=True keeps only state_dict[model_key], floating tensors in
        export_dtype, as the checkpoint step-N; with last_save_in_hf, rank 0 also
        exports it as hf_folder/step-N/model.safetensors (sharded above 5 GB) under the
        model's own keys mapped by hf_key_map (default hf_folder: ROOT-hf beside the
        root), streaming: no rank gathers the model.
    enable_checkpoint: False makes save and load do nothing.
    commit_level: where each save must be before it counts as saved, through a ckptd
        with a local tier (CkptWriter's commit_level: "local", "replicated",
        "durable"; None: the daemon's default).

    A failed save does not stop training: it is logged and counted (stats.failed,
    stats.failed_in_a_row), and the next save goes on. max_failed_saves=K raises instead
    once K saves in a row have failed (0: never). Every rank gets the same verdict.

    process_group: the group DCP's collectives run on. By default, with async saves and
    torch.distributed initialized, a gloo group the manager makes, so that the save's
    background collectives never interleave with the training thread's (every rank
    makes its manager: new_group is collective).
    """

    def __init__(self, root, *, keep_latest_k=0, socket=None, hash=True, async_save=True,
                 async_staging=True, process_group=None, max_failed_saves=0, prefix="step-",
                 async_mode=None, interval=1, enable_first_step_checkpoint=False,
                 load_step=-1, exclude_from_loading=(), load_only=False,
                 initial_load_path=None, initial_load_model_only=True,
                 last_save_model_only=False, export_dtype="float32", last_save_in_hf=False,
                 hf_key_map=None, hf_folder=None, model_key="model", enable_checkpoint=True,
                 commit_level=None):
        self.root = os.fspath(root)
        self.commit_level = commit_level
        self.enable = enable_checkpoint
        if async_mode is not None:
            if async_mode not in ASYNC_MODES:
                raise ValueError(f"CheckpointManager: async_mode {async_mode!r} is not one of "
                                 f"{sorted(ASYNC_MODES)}")
            async_save, async_staging = ASYNC_MODES[async_mode]
        if interval < 1:
            raise ValueError(f"CheckpointManager: interval {interval} must be at least 1")
        if last_save_in_hf and not last_save_model_only:
            raise ValueError("CheckpointManager: last_save_in_hf needs last_save_model_only "
                             "(safetensors holds the model's tensors only)")
        self.export_dtype = _DTYPES.get(export_dtype, export_dtype)
        if self.export_dtype not in _DTYPES.values():
            raise ValueError(f"CheckpointManager: export_dtype {export_dtype!r} is not one of "
                             f"{sorted(_DTYPES)}")
        _ck.name_check("checkpoint", prefix + "0")
        self.prefix = prefix
        self.keep_latest_k = keep_latest_k
        self.socket = socket
        self.hash = hash
        self.async_save = async_save
        self.async_staging = async_staging and async_save
        self.interval = interval
        self.enable_first_step_checkpoint = enable_first_step_checkpoint
        self.load_step = load_step
        self.exclude_from_loading = list(exclude_from_loading)
        self.load_only = load_only
        self.initial_load_path = os.fspath(initial_load_path) if initial_load_path else None
        self.initial_load_model_only = initial_load_model_only
        self.last_save_model_only = last_save_model_only
        self.last_save_in_hf = last_save_in_hf
        self.hf_key_map = hf_key_map
        self.hf_folder = hf_folder or os.path.abspath(self.root).rstrip("/") + "-hf"
        self.model_key = model_key
        self.process_group = process_group
        self.max_failed_saves = max_failed_saves
        self.stats = SaveStats()
        self._future = None
        self._writer = None
        self._hook = None
        self._t0 = None
        if not self.enable:
            return
        check_root(self.root)
        os.makedirs(self.root, exist_ok=True)
        if process_group is None and async_save and dist.is_available() and \
                dist.is_initialized():
            # DCP runs the rest of an async save (its plan, the results, the commit's
            # all-reduce) on a thread of its own. On the group the training thread also
            # uses, the two threads' collectives interleave in different orders on
            # different ranks and both hang. A gloo group of its own, as torchtitan makes
            # for async checkpointing; new_group is collective, so every rank makes its
            # manager at the same point, as it does anyway.
            self.process_group = dist.new_group(backend="gloo")
        if self.async_staging and not load_only:
            self._hook = register_optimizer_step_pre_hook(
                lambda _opt, _args, _kwargs: self.maybe_wait_for_staging())

    # The counts as they were named before stats.
    failed_saves = property(lambda self: self.stats.failed)
    failed_in_a_row = property(lambda self: self.stats.failed_in_a_row)

    def _rank(self):
        return dist.get_rank(self.process_group) if dist.is_initialized() else 0

    # ---- save ----

    def _should_save(self, step, last_step):
        if not self.enable or self.load_only:
            return False
        if step == 1 and self.enable_first_step_checkpoint:
            return True
        return last_step or step % self.interval == 0

    def save(self, step, state_dict, *, last_step=False):
        """Saves state_dict as PREFIX<step> when the step calls for it (interval,
        enable_first_step_checkpoint, last_step); returns whether a save began. The save
        with last_step=True is synchronous, and model-only (or safetensors) when
        last_save_model_only (last_save_in_hf) says so."""
        if not self._should_save(step, last_step):
            return False
        self.maybe_wait_for_saving()
        name = step_name(step, self.prefix)
        self._t0 = time.time_ns()
        if last_step and self.last_save_model_only:
            return self._save_model_only(step, name, state_dict)
        self._writer = CkptWriter(self.root, name, socket=self.socket, hash=self.hash,
                                  step=step, process_group=self.process_group,
                                  async_staging=self.async_staging and not last_step,
                                  commit_level=self.commit_level)
        try:
            if self.async_save and not last_step:
                self._future = dcp.async_save(state_dict, storage_writer=self._writer,
                                              process_group=self.process_group)
                return True
            dcp.save(state_dict, storage_writer=self._writer, process_group=self.process_group)
        except _SAVE_ERRORS as e:      # the save is over, training is not
            self._failed(name, e)
        else:
            self._after_commit(name, step)
        return True

    def _model_state(self, state_dict):
        if self.model_key not in state_dict:
            raise KeyError(f"CheckpointManager: the state dict has no {self.model_key!r} "
                           f"(model_key) for a model-only save or load; it has "
                           f"{sorted(state_dict)}")
        m = state_dict[self.model_key]
        return m.state_dict() if hasattr(m, "state_dict") and callable(m.state_dict) else m

    def _save_model_only(self, step, name, state_dict):
        """The last save, torchtitan's way: the model alone, floating tensors in
        export_dtype, committed as PREFIX<step> holding {model_key: ...}; with
        last_save_in_hf, rank 0 then exports that checkpoint as safetensors under the
        model's own keys (hf_key_map applied) into hf_folder/PREFIX<step> through the
        streaming exporter (libshard.export: every tensor whole with bounded memory,
        whatever the mesh; nothing is gathered into one rank's memory), and every rank
        returns once the export is written."""
        msd = self._model_state(state_dict)
        cast = {k: v.to(self.export_dtype) if v.is_floating_point() else v
                for k, v in msd.items()}
        try:
            self._writer = CkptWriter(self.root, name, socket=self.socket, hash=self.hash,
                                      step=step, process_group=self.process_group,
                                      commit_level=self.commit_level)
            dcp.save({self.model_key: cast}, storage_writer=self._writer,
                     process_group=self.process_group)
        except _SAVE_ERRORS as e:
            self._failed(name, e)
            return True
        self._after_commit(name, step)
        if self.last_save_in_hf:
            self._export_hf(step, name)
        return True

    def _export_hf(self, step, name):
        """Rank 0 exports the committed model-only checkpoint name; the ranks agree on
        the outcome, so a failed export counts as a failed save on every rank."""
        err = None
        if self._rank() == 0:
            out = os.path.join(self.hf_folder, name)
            try:
                os.makedirs(self.hf_folder, exist_ok=True)
                res = export_hf(self.root, name, out, prefix=self.model_key + ".",
                                key_map=self.hf_key_map)
                log.info("libshard: step %d: the model as safetensors in %s (%d tensors, "
                         "%d bytes, %.2f s)", step, res["dir"], res["tensors"],
                         res["bytes"], res["seconds"])
            except Exception as e:          # reported as a failed save, training goes on
                err = f"{type(e).__name__}: {e}"
        if dist.is_initialized():
            box = [err]
            dist.broadcast_object_list(box, src=dist.get_global_rank(self.process_group, 0)
                                       if self.process_group is not None else 0,
                                       group=self.process_group)
            err = box[0]
        if err is not None:
            self._failed(name, RuntimeError(f"the export of {name} as safetensors failed: "
                                            f"{err}"))

    def reserve(self, state_dict):
        """Makes (and for CUDA tensors page-locks) the staging for saves of state_dict
        now, so that the first save stalls no longer than the others. load() does it."""
        CkptWriter(self.root, socket=self.socket, process_group=self.process_group,
                   async_staging=self.async_staging).reserve(state_dict)

    def maybe_wait_for_staging(self):
        """Returns once the save in flight no longer reads the state (its copies into
        staging are done and the engine has this rank's part: through ckptd, once every
        rank got past it, the save commits even if every trainer process dies); a failed
        staging counts as a failed save."""
        if self._writer is None:
            return
        try:
            self._writer.maybe_wait_for_staging()
        except _SAVE_ERRORS as e:
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
            except _SAVE_ERRORS as e:
                self._failed(w.name if w else "?", e)
            else:
                self._after_commit(w.name, w.step)

    @staticmethod
    def _wait_quietly(f):
        if f is not None:
            try:
                f.result()
            except _SAVE_ERRORS:
                pass

    def _failed(self, name, e):
        s = self.stats
        s.failed += 1
        s.failed_in_a_row += 1
        log.warning("libshard: checkpoint %s under %s failed (%d in a row, %d in all): %s",
                    name, self.root, s.failed_in_a_row, s.failed, e)
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self.max_failed_saves and s.failed_in_a_row >= self.max_failed_saves:
            raise RuntimeError(f"CheckpointManager: {s.failed_in_a_row} saves in a row "
                               f"failed under {self.root} (max_failed_saves="
                               f"{self.max_failed_saves}); the last: {e}") from e

    def _after_commit(self, name, step):
        s = self.stats
        s.saves += 1
        s.failed_in_a_row = 0
        s.last_step = step
        level, note = None, ""
        if self._writer is not None:
            level, note = self._writer.committed_level, self._writer.level_note
            self._writer.close()
            self._writer = None
        if self._rank() != 0:
            return
        if level in ("local", "replicated"):
            # In the daemons' local tiers, not under root: what it holds and its
            # retention are the tiers' (ckpt-inspect, --keep-local).
            log.info("libshard: committed %s in the local tiers at level %s%s%s: step %d",
                     name, level, ": " if note else "", note, step)
            return
        ck = _ck.Checkpoint(self.root, name)
        info = ck.info()
        ck.close()
        s.last_bytes = info["data_bytes"]
        s.last_seconds = max(0, info["time_ns"] - self._t0) / 1e9
        log.info("libshard: committed %s under %s: step %d, %d bytes, %.3f s", name,
                 self.root, step, s.last_bytes, s.last_seconds)
        for gone in purge(self.root, self.keep_latest_k, self.prefix):
            log.info("libshard: keep_latest_k=%d: removed %s", self.keep_latest_k, gone)

    # ---- load ----

    def load(self, state_dict, step=None, *, name=None, discard_newer=False):
        """Loads into state_dict, and returns the step loaded (0 for a model-only
        initial load), or None when there was nothing to load: training starts from
        scratch (logged, naming the root). What is loaded, decided by rank 0 and used by
        every rank: name if given; else PREFIX<step> (step, else load_step when >= 0);
        else the run's newest step; else initial_load_path. discard_newer (with a step
        or name): the run's steps newer than the one loaded are removed first, through
        the core, each logged, so that training rolls back and its next saves can be
        made. Reserves the staging of saves of state_dict."""
        if not self.enable:
            return None
        if step is None and name is None and self.load_step is not None and \
                self.load_step >= 0:
            step = self.load_step
        if discard_newer and step is None and name is None:
            raise ValueError("CheckpointManager.load: discard_newer needs the step (or name) "
                             "to roll back to")
        for k in self.exclude_from_loading:
            if k not in state_dict:
                raise ValueError(f"CheckpointManager: exclude_from_loading names {k!r}, "
                                 f"which the state dict lacks ({sorted(state_dict)})")
        # A checkpoint holding only the model (a last save with last_save_model_only)
        # loads into the model alone when the state dict holds more.
        partial = any(k != self.model_key for k in state_dict)
        plan, mine = self._resolve(step, name, discard_newer, partial)
        if self.async_save and not self.load_only:
            self.reserve(state_dict)
        kind = plan[0]
        if kind == "error":
            raise mine if mine is not None else _rebuild(plan[1], plan[2])
        if kind == "scratch":
            return None
        if kind == "ckpt":
            _kind, root, ckname, model_only = plan
            states = self._states_to_load(state_dict, model_only)
            reader = CkptReader(root, ckname, socket=self.socket)
            dcp.load(states, storage_reader=reader, process_group=self.process_group)
            return 0 if model_only and root != self.root else reader.loaded_step
        _kind, path, fmt, model_only = plan
        states = self._states_to_load(state_dict, model_only)
        if fmt == "hf":
            msd = self._model_state(state_dict)
            hf.load_model_hf(msd, path, key_map=self.hf_key_map,
                             process_group=self.process_group)
            m = state_dict[self.model_key]
            if msd is not m:               # a Stateful: loaded into its state_dict()
                m.load_state_dict(msd)
        else:                              # DCP's own FileSystemWriter layout
            dcp.load(states, checkpoint_id=path, process_group=self.process_group)
        return 0

    def _states_to_load(self, state_dict, model_only):
        if model_only:
            self._model_state(state_dict)          # names the missing key, if it is
            return {self.model_key: state_dict[self.model_key]}
        return {k: v for k, v in state_dict.items() if k not in self.exclude_from_loading}

    def _resolve(self, step, name, discard_newer, partial):
        """Rank 0 decides what to load (and removes, recovers, logs); every rank gets
        its decision, so that a commit meanwhile (ckptd finishing a dead job's last
        save) cannot make ranks load different checkpoints. Returns the plan and, on
        rank 0, the error it met (the other ranks rebuild it from the plan)."""
        plan = mine = None
        if self._rank() == 0:
            try:
                plan = self._resolve_here(step, name, discard_newer, partial)
            except Exception as e:         # every rank must hear of it, or they hang
                plan, mine = ("error", type(e).__name__, str(e)), e
        if dist.is_initialized():
            box = [plan]
            dist.broadcast_object_list(box, group=self.process_group, group_src=0)
            plan = box[0]
        return plan, mine

    def _resolve_here(self, step, name, discard_newer, partial):
        # Without a ckptd (whose start recovers the root), rank 0 removes what dead runs
        # left (pending saves, their engines' heartbeats) before this run saves.
        if engine.socket_of(self.socket) is None:
            _ck.recover(self.root)
        elif name is None and step is None and (tiers := self._resolve_tiers(partial)):
            return tiers
        steps = _ck.steps(self.root, self.prefix)
        if engine.socket_of(self.socket) is not None and (step is not None or name is not None):
            want = name if name is not None else \
                next((n for s, n in reversed(steps) if s == step), step_name(step, self.prefix))
            if _ck.name_state(self.root, want)[0] != "committed" and \
                    (tiers := self._resolve_tiers(partial, want)):
                return tiers
        if name is not None:
            if _ck.name_state(self.root, name)[0] != "committed":
                raise FileNotFoundError(f"CheckpointManager: {self.root} holds no committed "
                                        f"checkpoint {name}")
            got = [s for s, n in steps if n == name]
            at = got[0] if got else None
        elif step is not None:
            got = [n for s, n in steps if s == step]
            if not got:
                raise FileNotFoundError(
                    f"CheckpointManager: {self.root} holds no committed {self.prefix}{step} "
                    f"(the run's steps there: {[n for _s, n in steps][-8:] or 'none'})")
            name, at = got[-1], step
        elif steps:
            at, name = steps[-1]
        else:
            return self._initial_plan(partial)
        newer = [n for s, n in steps if at is not None and s > at]
        if newer and discard_newer:
            for n in reversed(newer):
                _ck.remove(self.root, n)
                log.warning("libshard: discard_newer: removed %s (newer than %s) under %s",
                            n, name, self.root)
        elif newer:
            log.warning("libshard: loading %s under %s, which holds newer steps (%s): saving "
                        "those steps again fails (a committed name is never replaced); "
                        "load(step=..., discard_newer=True) rolls back", name, self.root,
                        ", ".join(newer))
        model_only = partial and self._is_model_only(self.root, name)
        log.info("libshard: loading %s under %s%s", name, self.root,
                 " (it holds the model only: the rest of the state stays as it is)"
                 if model_only else "")
        return ("ckpt", self.root, name, model_only)

    def _resolve_tiers(self, partial, want=None):
        """Through ckptd: the run's newest step whose every data file has a live copy in
        its tiers (this node's local tier, its peers', the durable root), which may be
        newer than the root's; or (want) that checkpoint, which the root itself may lack.
        None when the daemon knows no such checkpoint."""
        cl = _ck.Client(self.root, engine.socket_of(self.socket))
        try:
            name, why = cl.resolve(want, False) if want else cl.resolve(self.prefix, True)
        except _ck.CkptError as e:
            if e.errno == errno.ENOENT:
                return None
            raise
        finally:
            cl.close()
        if why:
            log.warning("libshard: %s", why)
        model_only = partial and _ck.name_state(self.root, name)[0] == "committed" and \
            self._is_model_only(self.root, name)
        log.info("libshard: loading %s through ckptd's tiers", name)
        return ("ckpt", self.root, name, model_only)

    def _initial_plan(self, partial):
        path = self.initial_load_path
        if path is None:
            log.info("libshard: no checkpoint %s<step> under %s: training starts from scratch",
                     self.prefix, self.root)
            return ("scratch",)
        model_only = self.initial_load_model_only
        kind = _ck.path_kind(path) if os.path.exists(path) else None
        if kind == "checkpoint":
            root, name = os.path.split(os.path.abspath(path))
        elif kind == "root":
            got = _ck.newest_step(path, self.prefix)
            if got is None:
                raise FileNotFoundError(f"CheckpointManager: initial_load_path {path} holds "
                                        f"no checkpoint {self.prefix}<step>")
            root, name = path, got[0]
        elif kind is None and os.path.exists(path) and hf.is_hf_export(path):
            if not model_only:
                raise ValueError(f"CheckpointManager: initial_load_path {path} is safetensors, "
                                 "which hold the model only: set initial_load_model_only")
            log.info("libshard: no checkpoint under %s: starting from the model in %s",
                     self.root, path)
            return ("initial", path, "hf", True)
        elif kind is None and os.path.isfile(os.path.join(path, ".metadata")):
            log.info("libshard: no checkpoint under %s: starting from DCP's checkpoint %s%s",
                     self.root, path, " (model only)" if model_only else "")
            return ("initial", path, "dcp", model_only)
        else:
            raise FileNotFoundError(
                f"CheckpointManager: initial_load_path {path} is no checkpoint (ROOT/NAME), "
                "checkpoint root, DCP checkpoint directory or safetensors")
        model_only = model_only or (partial and self._is_model_only(root, name))
        log.info("libshard: no checkpoint under %s: starting from %s/%s%s", self.root, root,
                 name, " (model only)" if model_only else "")
        return ("ckpt", root, name, model_only)

    def _is_model_only(self, root, name):
        """Whether every key of checkpoint NAME lies under model_key (a last save with
        last_save_model_only): loading it leaves the rest of the state alone."""
        ck = _ck.Checkpoint(root, name)
        try:
            keys = [names.decode(n) for n, *_ in ck.tensors()]
            keys += [names.decode(n) for n in ck.blob_names() if n != PLANNER_DATA_BLOB]
        finally:
            ck.close()
        head = self.model_key + "."
        return bool(keys) and all(k.startswith(head) for k in keys)

    def close(self):
        self.maybe_wait_for_saving()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None


def _rebuild(kind, msg):
    """The error rank 0 met, raised on every rank as the same type."""
    return {"FileNotFoundError": FileNotFoundError, "ValueError": ValueError,
            "NotADirectoryError": NotADirectoryError}.get(kind, RuntimeError)(msg)
