"""CkptWriter: a torch.distributed.checkpoint StorageWriter (and AsyncStager) that
writes a committed libshard checkpoint.

Every write item becomes a box of a box-list tensor (format 1.1) written by the rank
DCP's planner gave it to (replicas deduplicated as DCP does); BYTE_IO items (optimizer
param_groups, Python objects) become blobs; 0-d tensors (AdamW's step) are tensors.
The coordinator turns all ranks' plans into one table (every tensor's shape, dtype,
boxes and writers) that goes back to every rank, so that each declares the same save.

One path, whatever engine carries it: each rank hands its part to this process's client
(libshard.engine: one per root and engine, reused by every writer), which stages it and
gives it to the engine; rank 0 asks for the commit, and the checkpoint is visible only
once every rank's part is durable. The engine is ckptd (``socket=`` or $CKPTD_SOCKET:
once every part is staged and the commit asked for, the save commits even if every
trainer process dies), or embedded: the engines of the job's processes, one each, meet
through the root's file system as the daemons of several nodes do.

The copy into staging is the only stall. A CPU tensor's bytes are copied by the client
(its address is given, the GIL released); a CUDA tensor's by one DMA straight into the
staging area, which the client page-locked once when it made it: the copies run on a
side stream, back to back, and the part is handed over when their event has happened.

A synchronous ``dcp.save`` (write_data without stage()) needs no staging at all where
the engine runs in this process: the part's CPU tensors are given by address and the
engine's writer copies them block by block while earlier blocks are written and hashed
(ck_client_save_sync), so the copy overlaps the writes; write_data returns once the
part is durable. Through ckptd, or with CUDA tensors, it stages as above.

As the AsyncStager of ``dcp.async_save``, stage() plans (one gather and one scatter of
the plans; cached while the state dict keeps its structure) and stages this rank's part:
- copy mode (the default): async_save returns once the copy is done;
- ``async_staging=True``: async_save returns once the copies are queued (a thread of the
  client, and the GPU's copy engine, do them while the next step computes), and
  ``maybe_wait_for_staging()`` must run before anything saved changes: before the
  optimizer step (CheckpointManager does it for every optimizer).
The thread DCP starts then only waits for the commit.
"""
import dataclasses
import json
import os
import re
import time
import warnings

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.metadata import StorageMeta
from torch.distributed.checkpoint.planner import WriteItemType
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.distributed.checkpoint.utils import _DistWrapper
from torch.futures import Future

from . import _ck, engine, names
from .reader import PLANNER_DATA_BLOB, split_checkpoint_id
from .torchio import dtype_code

try:                                   # torch >= 2.4
    from torch.distributed.checkpoint.staging import AsyncStager
except ImportError:                    # pragma: no cover
    AsyncStager = object


@dataclasses.dataclass
class _Table:
    """The whole save, as the coordinator planned it: sent to every rank."""
    tensors: list                      # [(name, dtype code, shape, boxes, writers)]
    job: bytes                         # the coordinator's job id: every rank's begin


_job = None


def _job_id():
    """This process's job id (libshard._ck.job_id_new; docs/FORMAT.md, "Job identity"):
    made once, where the coordinator plans, and sent to every rank in the table, with
    the plans DCP scatters over the save's group anyway, so it costs no collective of
    its own. A process is one job's: every save it coordinates carries the same id."""
    global _job
    if _job is None:
        _job = _ck.job_id_new()
    return _job


_SAME = "libshard: the same plan as the last save"


def _step_of(name):
    m = re.search(r"(\d+)$", name)
    return int(m.group(1)) if m else 0


def _table(plans):
    tensors = {}
    for rank, plan in enumerate(plans):
        for it in plan.items:
            if it.type == WriteItemType.BYTE_IO:
                continue
            key = it.index.fqn
            td = it.tensor_data
            disk = names.encode(key)
            ent = tensors.get(disk)
            if ent is None:
                ent = tensors[disk] = (disk, dtype_code(td.properties.dtype, f"tensor {key}"),
                                       tuple(int(x) for x in td.size), [], [])
            ent[3].append((tuple(int(x) for x in td.chunk.offsets),
                           tuple(int(x) for x in td.chunk.sizes)))
            ent[4].append(rank)
    return _Table(tensors=[tensors[k] for k in sorted(tensors)], job=_job_id())


def _signature(plan):
    """What makes a local plan: its items' keys, kinds, dtypes, shapes and chunks."""
    sig = []
    for it in plan.items:
        td = it.tensor_data
        sig.append((it.index.fqn, tuple(it.index.offset or ()), it.type,
                    None if td is None else (td.properties.dtype, tuple(td.size),
                                             tuple(td.chunk.offsets), tuple(td.chunk.sizes))))
    return tuple(sig)


class _PlanCache:
    """The plans of the last async save of each process group (as DCP's
    enable_plan_caching): a rank whose local plan is unchanged sends a marker instead,
    and when every rank did, the coordinator sends the marker back and each rank reuses
    its final plan and the table. Any change re-plans in full."""
    entries = {}

    def __init__(self, key):
        self.key = key
        self.sig = None            # this rank's local plan's signature
        self.final = None          # this rank's final plan, and the table
        self.table = None
        self.locals = None         # coordinator: every rank's local plan
        self.central = None        # coordinator: the plans it scattered
        self.hits = 0              # saves that reused the plans (tests, benchmarks)
        self.plans = 0             # saves that planned in full

    @classmethod
    def of(cls, process_group):
        key = id(process_group) if process_group is not None else None
        e = cls.entries.get(key)
        if e is None:
            e = cls.entries[key] = cls(key)
        return e


def _mkroot(root):
    """The root is made when missing, with its parents, as FileSystemWriter does (the
    coordinator, before any rank opens it); a file, a FIFO or a link to nothing there is
    refused as not a directory, naming it (the core's check)."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(root)), exist_ok=True)
    except OSError as e:
        raise OSError(e.errno, f"CkptWriter: the checkpoint root {root}: {e.strerror}") from None
    _ck.root_make(root)


class _Part:
    """This rank's part of a save: the client's save and what it reads until the part
    is staged. handed: DCP's save of it got past write_data (a later save of the same
    writer may start)."""

    def __init__(self, eng, save, name, keep, event):
        self.engine = eng
        self.save = save
        self.name = name
        self.keep = keep           # source tensors the copies read
        self.event = event         # the CUDA copies' event, or None
        self.handed = False

    def fence(self):
        try:
            self.engine.call(self.save.fence)
        finally:
            self.keep = []

    def close(self):
        """Frees the client's save once the part no longer needs its staging."""
        save, self.save = self.save, None
        if save is not None:
            self.engine.call(save.close)
        self.keep = []

    def __del__(self):
        self.close()


class CkptWriter(StorageWriter, AsyncStager):
    """``dcp.save(sd, storage_writer=CkptWriter("/ckpt", "step-100"))``, or
    ``dcp.save(sd, checkpoint_id="/ckpt/step-100", storage_writer=CkptWriter())``.

    socket: ckptd's socket (default $CKPTD_SOCKET; neither: the embedded engines).
    hash: SHA-256 of every 4 MiB block (ckpt-verify --deep checks them).
    step: the step recorded in the checkpoint (default: the name's trailing digits).
    process_group: the group of the save, for async staging (default: the world).
    async_staging: async_save returns once the copies are queued; call
        maybe_wait_for_staging() before the state changes (module docstring).
    """

    should_synchronize_after_execute = False

    def __init__(self, root=None, name=None, *, socket=None, hash=True, step=None,
                 process_group=None, async_staging=False):
        super().__init__()
        self.root = os.fspath(root) if root is not None else None
        self.name = name
        self.socket = socket
        self.hash = hash
        self.step = step
        self.process_group = process_group
        self.async_staging = async_staging
        self._reset_run()

    # Handles to the C core live only in the process that made them: a pickled writer
    # (async_save with the process executor) starts without any, and knows only the
    # name of the save the training process staged.
    def __getstate__(self):
        state = self.__dict__.copy()
        state["_part"] = None
        state["_elsewhere"] = self._part.name if self._part is not None else None
        return state

    def _reset_run(self):
        self.rank = 0
        self.world = 1
        self.is_coordinator = True
        self._part = None          # the save this writer staged, until committed
        self._elsewhere = None     # unpickled: the name staged in the training process

    # ---- StorageWriter ----

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            root, name = split_checkpoint_id(checkpoint_id)
            staged = self._part.name if self._part is not None else self._elsewhere
            if staged is not None and (root, name) != (self.root, staged):
                raise ValueError(f"CkptWriter: staged {staged} under {self.root}, "
                                 f"asked to save {checkpoint_id}")
            self.root, self.name = root, name

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        root, name = split_checkpoint_id(checkpoint_id)
        return name is not None

    def storage_meta(self):
        cid = os.path.join(self.root, self.name) if self.root and self.name else None
        return StorageMeta(checkpoint_id=cid)

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        self.is_coordinator = is_coordinator
        rank = kwargs.get("rank")
        if rank is None:
            rank = dist.get_rank(self.process_group) if dist.is_initialized() else 0
        self.rank = rank
        self.world = dist.get_world_size(self.process_group) if dist.is_initialized() else 1

    def prepare_local_plan(self, plan):
        return plan

    def _staged(self):
        """stage() planned and staged the save DCP is running now."""
        return self._elsewhere is not None or (self._part is not None and
                                               not self._part.handed)

    def _done_with_last(self):
        """A part whose save got past write_data is over for this rank (its commit is
        rank 0's): freed before this writer starts another."""
        if self._part is not None:
            if not self._part.handed:
                raise RuntimeError("CkptWriter: the previous async save of this writer is "
                                   "still running; wait for its future first")
            self._release()

    def prepare_global_plan(self, plans):
        if self._staged():
            return plans               # stage() planned and staged this save already
        self._check_new()
        table = _table(plans)
        return [dataclasses.replace(p, storage_data=table) for p in plans]

    def _check_new(self):
        if self.root is None or self.name is None:
            raise ValueError("CkptWriter: no checkpoint root/name (give CkptWriter(root, name) "
                             "or checkpoint_id=ROOT/NAME)")
        _ck.name_check("checkpoint", self.name)
        _mkroot(self.root)
        if _ck.name_state(self.root, self.name)[0] == "committed":
            raise FileExistsError(f"{self.root}: checkpoint {self.name} is already committed; "
                                  "a committed checkpoint is never replaced")

    def _engine(self, pin):
        return engine.engine(self.root, self.socket, self.world, pin)

    def _stage_part(self, plan, planner, table, lazy, sync=False):
        """Declares the save on this rank, stages its boxes and blobs (lazy: queues the
        copies and returns; sync: returns once the part is durable, read from the
        sources themselves where it can), and on rank 0 asks for the commit. Returns
        the WriteResults of its items."""
        items, results, blobs = [], [], {}
        cuda = None
        for it in plan.items:
            data = planner.resolve_data(it)
            if it.type == WriteItemType.BYTE_IO:
                buf = data.getvalue()
                blobs[names.encode(it.index.fqn)] = buf
                results.append(WriteResult(index=it.index, size_in_bytes=len(buf),
                                           storage_data=None))
                continue
            t = data.detach()
            if t.device.type == "cuda":
                cuda = t.device
            elif t.device.type != "cpu":
                raise ValueError(f"CkptWriter: tensor {it.index.fqn} is on {t.device}; "
                                 "CPU and CUDA tensors are saved")
            items.append((it, t))
            results.append(WriteResult(index=it.index, size_in_bytes=t.numel() *
                                       t.element_size(), storage_data=None))
        if self.is_coordinator:
            mappings = getattr(planner, "mappings", None)
            if mappings:
                blobs[PLANNER_DATA_BLOB] = json.dumps(
                    {k: list(v) for k, v in mappings.items()}).encode()
        pin = cuda.index if cuda is not None else -1
        eng = self._engine(pin)
        step = self.step if self.step is not None else _step_of(self.name)
        save = eng.call(eng.client.begin, self.name, step, self.rank, self.world, table.job,
                        self.hash)
        try:
            keep, event = eng.call(self._fill, save, table, items, blobs)
            if lazy:
                eng.call(save.save_lazy, event.cuda_event if event is not None else 0)
            elif sync and event is None:
                eng.call(save.save_sync)       # durable when it returns
            else:
                eng.call(save.save_async, event.cuda_event if event is not None else 0)
            if self.is_coordinator:
                eng.call(save.commit)
        except BaseException:
            if cuda is not None:       # copies queued before the failure still land
                _side_stream(cuda).synchronize()
            eng.call(save.close)
            raise
        self._part = _Part(eng, save, self.name, keep if lazy else [], event)
        return results

    def _fill(self, save, table, items, blobs):
        """Declares the table, gives CPU boxes by address and copies CUDA boxes into the
        staging area on a side stream. Returns the tensors the copies read and the CUDA
        event that says they are done (None without CUDA boxes). With the client's lock."""
        index = {}
        for disk, code, shape, boxes, writers in table.tensors:
            save.tensor_boxes(disk, code, shape, boxes, writers)
            index[disk] = {b[0]: i for i, (b, w) in enumerate(zip(boxes, writers))
                           if w == self.rank}
        for disk, buf in blobs.items():
            save.blob(disk, buf)
        placed, keep = [], []
        for it, t in items:
            disk = names.encode(it.index.fqn)
            box = index[disk][tuple(int(x) for x in it.tensor_data.chunk.offsets)]
            if t.device.type == "cpu" and t.is_contiguous():
                save.box(disk, box, t.data_ptr())
                keep.append(t)
            else:
                placed.append((disk, box, t))
        if not placed:
            return keep, None
        save.place()
        view = save.staging()
        if not len(view):
            return keep, None
        staging = torch.frombuffer(view, dtype=torch.uint8)
        base = staging.data_ptr()
        dsts, srcs = [], []
        for disk, box, t in placed:
            at = save.box_at(disk, box)
            if at is None:             # not this rank's to write (DCP gave it a replica)
                continue
            n = t.numel() * t.element_size()
            dsts.append(staging[at - base:at - base + n].view(t.dtype).view(t.shape))
            srcs.append(t)
        cpu = [(d, s) for d, s in zip(dsts, srcs) if s.device.type == "cpu"]
        for d, s in cpu:               # non-contiguous CPU tensors: one strided copy
            d.copy_(s)
        gpu = [(d, s) for d, s in zip(dsts, srcs) if s.device.type == "cuda"]
        if not gpu:
            return keep, None
        device = gpu[0][1].device
        side = _side_stream(device)
        side.wait_stream(torch.cuda.current_stream(device))   # the latest values
        with torch.cuda.stream(side):
            for d, s in gpu:
                d.copy_(s, non_blocking=True)
        for _d, s in gpu:
            s.record_stream(side)      # the allocator keeps s until the copy is done
        event = torch.cuda.Event()
        event.record(side)
        return keep + [s for _d, s in gpu], event

    def write_data(self, plan, planner):
        if self._staged():
            results = []               # stage() staged it
        else:
            self._done_with_last()
            results = self._stage_part(plan, planner, plan.storage_data, lazy=False,
                                       sync=True)
        if self._part is not None:
            self._part.handed = True
        fut = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata, results):
        try:
            if self._elsewhere is not None:
                self._wait_committed_elsewhere(self._elsewhere)
            elif self.is_coordinator:
                self._part.engine.wait(self._part.save)
        finally:
            self._release()

    def _release(self):
        part, self._part, self._elsewhere = self._part, None, None
        if part is not None:
            part.close()

    def _wait_committed_elsewhere(self, name):
        """The checkpoint process of AsyncCheckpointerType.PROCESS: the training
        process staged the save and rank 0 asked for its commit. Its owner holds the
        save's lock until the save is committed or removed (docs/FORMAT.md, "Owners and
        locks"); its reason for a failure went to the training process."""
        while (state := _ck.name_state(self.root, name)[0]) != "committed":
            if state != "busy":
                raise RuntimeError(f"CkptWriter: {name}: the save ended without committing; "
                                   "the training process's error says why")
            time.sleep(0.02)

    # ---- AsyncStager ----

    def stage(self, state_dict):
        self._done_with_last()
        _warn_default_group(self.process_group)
        if self.name is None:
            raise ValueError("CkptWriter: async_save stages before DCP passes checkpoint_id "
                             "to the writer; give the name as CkptWriter(root, name)")
        planner = DefaultSavePlanner()
        dw = _DistWrapper(self.process_group, dist.is_initialized(), 0)
        self.set_up_storage_writer(dw.is_coordinator, rank=dw.rank)
        cache = _PlanCache.of(self.process_group)

        def local_step():
            planner.set_up_planner(state_dict, storage_meta=self.storage_meta(),
                                   is_coordinator=dw.is_coordinator)
            local = planner.create_local_plan()
            sig = _signature(local)
            same = cache.final is not None and sig == cache.sig
            local_step.sig = sig
            return _SAME if same else local

        def global_step(plans):
            self._check_new()
            if all(p == _SAME for p in plans) and cache.central is not None:
                return [_SAME] * len(plans)
            if any(p == _SAME for p in plans) and cache.locals is None:
                raise RuntimeError("CkptWriter: the plan caches of the ranks disagree")
            full = [cache.locals[i] if p == _SAME else p for i, p in enumerate(plans)]
            central, _md = planner.create_global_plan(full)
            table = _table(central)
            cache.locals = full
            cache.central = [dataclasses.replace(p, storage_data=table) for p in central]
            return cache.central

        got = dw.reduce_scatter("plan", local_step, global_step)
        if got == _SAME:
            plan, table = cache.final, cache.table
            cache.hits += 1
        else:
            plan = planner.finish_plan(got)
            table = plan.storage_data
            cache.sig, cache.final, cache.table = local_step.sig, plan, table
            cache.plans += 1
        self._stage_part(plan, planner, table, lazy=self.async_staging)
        return {}

    def synchronize_staging(self):
        pass

    def reserve(self, state_dict, slack=1 << 20, wait=False):
        """Makes this process's staging large enough for saves of state_dict (its local
        tensors, laid out as the core lays out a part, and slack bytes for the blobs)
        and, for CUDA tensors, page-locks it, so that the first save stalls no longer than the
        others. On the client's thread, overlapping what the caller does next (the first
        save waits for what remains); with wait, before it returns."""
        sizes, pin = [], -1
        for t in _local_tensors(state_dict):
            sizes.append(t.numel() * t.element_size())
            if t.device.type == "cuda":
                pin = t.device.index
        nbytes = _ck.file_bytes(sizes) + slack
        self.set_up_storage_writer(True)
        if self.socket is None and engine.socket_of(None) is None:
            _mkroot(self.root)
        self._engine(pin).reserve(nbytes, wait)

    def maybe_wait_for_staging(self):
        """Returns once the staged save no longer reads the state (its copies are done):
        call it before anything saved changes. Raises the save's error if the staging
        failed."""
        part = self._part
        if part is not None and part.keep:
            part.fence()

    def close(self):
        self._release()


def _warn_default_group(process_group):
    """An async save of several ranks on the default group: DCP finishes it on a thread
    of its own with collectives (the plan, the results, the commit's all-reduce) which
    interleave with the training thread's own collectives in different orders on
    different ranks: gloo aborts with a collective mismatch, NCCL hangs. Said with a
    warning (shown once per place by the warnings module) naming what to pass."""
    if process_group is None and dist.is_initialized() and dist.get_world_size() > 1:
        warnings.warn(
            "CkptWriter: dcp.async_save on the default process group: if the training "
            "thread runs collectives while the save finishes (an all_reduce of the loss, "
            "FSDP's), they interleave with DCP's and abort or hang. Make a group once, "
            "pg = dist.new_group(backend='gloo'), and pass it to both: "
            "CkptWriter(root, name, process_group=pg) and "
            "dcp.async_save(..., process_group=pg) (CheckpointManager does this)",
            stacklevel=3)


def _local_tensors(obj):
    """The tensors of a (nested) state dict, DTensors as their local shards."""
    if isinstance(obj, torch.Tensor):
        yield obj.to_local() if hasattr(obj, "to_local") else obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _local_tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _local_tensors(v)
    elif hasattr(obj, "state_dict") and callable(obj.state_dict):
        yield from _local_tensors(obj.state_dict())


_side_streams = {}


def _side_stream(device):
    """One side stream per device for the copies into staging, reused by every save."""
    s = _side_streams.get(device.index)
    if s is None:
        s = _side_streams[device.index] = torch.cuda.Stream(device)
    return s
