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

The copy into staging is the only stall. A save crosses into the core once: the
declaration (libshard._ck.Decl: the table's tensors and boxes, planned once) is built
when the plan is, and each save submits every source of the rank in one call, in the
declaration's order (its _Recipe): CPU tensors by address, copied by the client with the
GIL released; CUDA tensors by device address, each copied by one DMA, queued by the
client on a side stream straight into the staging area it page-locked once, and waited
for before the part is handed over.

A synchronous ``dcp.save`` (write_data without stage()) needs no staging at all where
the engine runs in this process: the part's CPU tensors are given by address and the
engine's writer copies them block by block while earlier blocks are written and hashed
(CK_SUBMIT_SYNC), so the copy overlaps the writes; write_data returns once the part is
durable. Through ckptd, or with CUDA tensors, it stages as above.

As the AsyncStager of ``dcp.async_save``, stage() plans and stages this rank's part. It
plans as DCP's default planner does (the same items, the same replica owners) on the
leaves DCP flattens the state dict to, in compact tuples rather than DCP's plan objects,
which cost tens of microseconds a tensor to make and to pickle: one gather and one
scatter of the plans, cached while the state dict keeps its structure (a marker goes
instead). Then:
- copy mode (the default): async_save returns once the copy is done;
- ``async_staging=True``: async_save returns once the copies are queued (a thread of the
  client, and the GPU's copy engine, do them while the next step computes), and
  ``maybe_wait_for_staging()`` must run before anything saved changes: before the
  optimizer step (CheckpointManager does it for every optimizer).
The thread DCP starts then only waits for the commit.
"""
import contextlib
import dataclasses
import gc
import io
import json
import os
import re
import time
import warnings
from collections.abc import Mapping

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.metadata import StorageMeta
from torch.distributed.checkpoint.metadata import MetadataIndex
from torch.distributed.checkpoint.planner import WriteItemType
from torch.distributed.checkpoint.planner_helpers import _create_write_items
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.distributed.checkpoint.utils import _DistWrapper, find_tensor_shard
from torch.distributed.tensor import DTensor
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


def _compact(it):
    """A write item of DCP's planner as the writer plans with it: (fqn, dtype code or
    None for an object, global shape, offsets, sizes, bytes)."""
    fqn = it.index.fqn
    if it.type == WriteItemType.BYTE_IO:
        return (fqn, None, None, None, None, 0)
    td = it.tensor_data
    return (fqn, dtype_code(td.properties.dtype, f"tensor {fqn}"), tuple(td.size),
            tuple(td.chunk.offsets), tuple(td.chunk.sizes), it.tensor_storage_size() or 0)


def _global(plans):
    """DCP's global plan (create_global_plan) of the ranks' local plans (lists of
    _compact items): each item that several ranks hold (a replica, an object) goes to
    the one with the fewest bytes planned so far, the lowest on a tie, in the order the
    items first appear (dedup_save_plans); then the table. Per rank: (the table, its
    tensor items in the declaration's order, its object items), items by their index in
    its local plan."""
    where = {}
    for r, items in enumerate(plans):
        for k, it in enumerate(items):
            e = where.get((it[0], it[3]))
            if e is None:
                where[(it[0], it[3])] = [it, r, k, None]
            elif e[3] is None:
                e[3] = [(e[1], e[2]), (r, k)]
            else:
                e[3].append((r, k))
    load = [0] * len(plans)
    keep = [bytearray(len(items)) for items in plans]
    for it, r, k, more in where.values():
        if more is not None:
            r, k = min(more, key=lambda rk: load[rk[0]])
        load[r] += it[5] or 1
        keep[r][k] = 1
    tensors, objects = {}, [[] for _ in plans]
    for r, items in enumerate(plans):
        for k, it in enumerate(items):
            if not keep[r][k]:
                continue
            if it[1] is None:
                objects[r].append(k)
                continue
            disk = names.encode(it[0])
            ent = tensors.get(disk)
            if ent is None:
                ent = tensors[disk] = (disk, it[1], it[2], [], [], [])
            ent[3].append((it[3], it[4]))
            ent[4].append(r)
            ent[5].append(k)
    order = sorted(tensors)
    table = _Table(tensors=[tensors[d][:5] for d in order], job=_job_id())
    sources = [[] for _ in plans]
    for d in order:
        _disk, _code, _shape, _boxes, writers, ks = tensors[d]
        for r, k in zip(writers, ks):
            sources[r].append(k)
    return [(table, sources[r], objects[r]) for r in range(len(plans))]


_PLAIN = (torch.Tensor, torch.nn.Parameter)


@contextlib.contextmanager
def _no_gc():
    """The stall without the cyclic collector: a save makes tens of thousands of small
    objects (a plan's tuples, a state dict's leaves), which set off full collections
    over every object the process tracks (a model's tensors among them), 0.05 to 0.1 s
    each at 10,000 tensors, in the middle of the stall. Nothing here makes cycles; what
    is garbage is collected after."""
    on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if on:
            gc.enable()


def _terminal(value):
    """DCP's rule (_traverse.traverse_state_dict): a list is a leaf unless it holds a
    tensor, a mapping or a list that is no leaf; anything but a mapping or list is."""
    if isinstance(value, Mapping):
        return False
    if not isinstance(value, list):
        return True
    return not any(isinstance(e, (torch.Tensor, Mapping)) or
                   (isinstance(e, list) and not _terminal(e)) for e in value)


_TENSORS = (*_PLAIN, DTensor)


def _leaves(state_dict, trace):
    """[(path, value)]: the leaves DCP's planner flattens state_dict to, with the paths
    and in the order of its traversal (traverse_state_dict), tensors taken first: a
    state dict is mostly tensors, and the generic checks cost microseconds each. Its
    structure, as far as its plan goes, is appended to trace: each mapping's size and
    keys, each list's size (negative), each leaf's _leaf_sig. _match compares a later
    state dict with it without making a path."""
    out = []

    def walk(path, value):
        if type(value) in _TENSORS:
            out.append((path, value))
            trace.append(_leaf_sig(value))
        elif type(value) is dict or isinstance(value, Mapping):
            trace.append(len(value))
            for k, v in value.items():
                trace.append(str(k))
                walk(path + (str(k),), v)
        elif _terminal(value):
            out.append((path, value))
            trace.append(_leaf_sig(value))
        else:
            trace.append(-1 - len(value))
            for i, v in enumerate(value):
                walk(path + (i,), v)

    trace.append(len(state_dict))
    for k, v in state_dict.items():
        trace.append(str(k))
        walk((str(k),), v)
    return out


def _leaf_sig(value):
    """What of a leaf its plan depends on: a tensor's type, dtype, shapes, device and
    (DTensor) its placements and mesh; an object's type (its bytes are saved anew each
    time, under its key)."""
    t = type(value)
    if t in _PLAIN:
        return (t, value.dtype, value.shape, value.is_cuda)
    if t is DTensor:
        local = value._local_tensor
        return (t, value.dtype, value.shape, local.shape, value.placements,
                id(value.device_mesh), local.is_cuda)
    if isinstance(value, torch.Tensor):
        return None                    # other tensor kinds: planned every time
    return t


def _match(state_dict, trace):
    """The values of state_dict's leaves, in _leaves' order, when its structure is the
    one trace describes; else None. Nothing it makes outlives the call but the list: a
    save of the same structure costs the collector nothing per tensor."""
    vals = []
    pos = 0

    def walk(value):
        nonlocal pos
        t = type(value)
        tok = trace[pos]
        pos += 1
        if t in _PLAIN:
            if (type(tok) is not tuple or tok[0] is not t or value.dtype != tok[1] or
                    value.shape != tok[2] or value.is_cuda != tok[3]):
                return False
        elif t is DTensor or not (t is dict or isinstance(value, Mapping)) and \
                _terminal(value):
            if _leaf_sig(value) != tok:
                return False
        elif t is dict or isinstance(value, Mapping):
            if type(tok) is not int or tok != len(value):
                return False
            for k, v in value.items():
                if trace[pos] != str(k):
                    return False
                pos += 1
                if not walk(v):
                    return False
            return True
        else:
            if type(tok) is not int or tok != -1 - len(value):
                return False
            return all(walk(v) for v in value)
        vals.append(value)
        return True

    try:
        ok = walk(state_dict) and pos == len(trace)
    except IndexError:
        ok = False
    return vals if ok else None


def _local_items(leaves):
    """This rank's local plan, as DCP's planner makes it (create_default_local_save_plan
    of the flattened state dict), in _compact items, with each item's leaf and the
    flattened keys' paths (DCP's mappings): a tensor is one item of all of it, a DTensor
    one of its local shard (none where this rank is outside its mesh), any other tensor
    as DCP's planner says, anything else an object."""
    items, leaf_of, paths = [], [], {}
    for i, (path, v) in enumerate(leaves):
        fqn = ".".join(map(str, path))
        if fqn in paths:
            raise ValueError(f"duplicated flatten key {fqn}")
        paths[fqn] = path
        t = type(v)
        if t in _PLAIN:
            shape = tuple(v.shape)
            items.append((fqn, dtype_code(v.dtype, f"tensor {fqn}"), shape, (0,) * len(shape),
                          shape, v.numel() * v.element_size()))
            leaf_of.append(i)
        elif t is DTensor and v.device_mesh.get_coordinate() is None:
            continue
        elif isinstance(v, torch.Tensor) or hasattr(v, "__create_write_items__"):
            for it in _create_write_items(fqn, v):
                items.append(_compact(it))
                leaf_of.append(i)
        else:
            items.append((fqn, None, None, None, None, 0))
            leaf_of.append(i)
    return items, leaf_of, paths


class _PlanCache:
    """The plans of the last async save of each process group (as DCP's
    enable_plan_caching): a rank whose state dict keeps its structure sends a marker
    instead of its local plan, and when every rank did, the coordinator sends the marker
    back and each rank reuses its recipe (plan, table, declaration). Any change re-plans
    in full."""
    entries = {}

    def __init__(self, key):
        self.key = key
        self.trace = None          # this rank's state dict's structure (_leaves)
        self.recipe = None         # this rank's _Recipe of it
        self.locals = None         # coordinator: every rank's local plan
        self.central = None        # coordinator: what it scattered (_global)
        self.hits = 0              # saves that reused the plans (tests, benchmarks)
        self.plans = 0             # saves that planned in full

    @classmethod
    def of(cls, process_group):
        key = id(process_group) if process_group is not None else None
        e = cls.entries.get(key)
        if e is None:
            e = cls.entries[key] = cls(key)
        return e


class _Recipe:
    """How this rank's part of a save is made from a state dict of one structure, known
    once its plan is: the declaration of the whole save (its plan made once, in the
    core), the leaf and item of each source this rank writes, in the declaration's order,
    the blob name and leaf of each object it saves, and each local item's leaf."""

    def __init__(self, mine, items, leaf_of, world, mappings):
        table, sources, objects = mine
        self.decl = _ck.Decl(world, table.tensors)
        self.job = table.job
        self.leaf = leaf_of
        self.sources = [(leaf_of[k], items[k]) for k in sources]
        self.objects = [(names.encode(items[k][0]), leaf_of[k]) for k in objects]
        self.mappings = json.dumps({k: list(v) for k, v in mappings.items()}).encode() \
            if mappings else None


def _serialized(obj):
    """An object's bytes, as DCP's planner makes them (torch.save)."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _local(value, item):
    """The local tensor of a source (a _compact item), as DCP's planner resolves it
    (find_tensor_shard), without its Protocol checks for the kinds a state dict holds."""
    t = type(value)
    if t in _PLAIN:
        return value
    if t is DTensor:
        return value._local_tensor
    return find_tensor_shard(value, MetadataIndex(item[0], torch.Size(item[3])))


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

    def __init__(self, eng, save, name, keep):
        self.engine = eng
        self.save = save
        self.name = name
        self.keep = keep           # source tensors a lazy submit's copies read
        self.handed = False

    def fence(self):
        try:
            self.engine.call(self.save.wait, 1)     # staged: the sources are free
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


# The commit levels a save can wait for (ck/client.h, ck_level).
COMMIT_LEVELS = {"local": 1, "replicated": 2, "durable": 3}
_LEVEL_NAMES = {v: k for k, v in COMMIT_LEVELS.items()}


class CkptWriter(StorageWriter, AsyncStager):
    """``dcp.save(sd, storage_writer=CkptWriter("/ckpt", "step-100"))``, or
    ``dcp.save(sd, checkpoint_id="/ckpt/step-100", storage_writer=CkptWriter())``.

    socket: ckptd's socket (default $CKPTD_SOCKET; neither: the embedded engines).
    hash: SHA-256 of every 4 MiB block (ckpt-verify --deep checks them).
    step: the step recorded in the checkpoint (default: the name's trailing digits).
    process_group: the group of the save, for async staging (default: the world).
    async_staging: async_save returns once the copies are queued; call
        maybe_wait_for_staging() before the state changes (module docstring).
    commit_level: where the checkpoint must be before the save returns (ckptd with
        --local-root; docs/decisions/0175-commit-levels.md): "local", "replicated" or
        "durable"; None: the daemon's default. After the save, committed_level says
        the level reached and level_note why it is lower than asked (a replica's peer
        lost: the save is committed, not failed).
    """

    should_synchronize_after_execute = False

    def __init__(self, root=None, name=None, *, socket=None, hash=True, step=None,
                 process_group=None, async_staging=False, commit_level=None):
        super().__init__()
        if commit_level is not None and commit_level not in COMMIT_LEVELS:
            raise ValueError(f"CkptWriter: commit_level {commit_level!r}: one of "
                             f"{', '.join(COMMIT_LEVELS)} (or None)")
        self.commit_level = commit_level
        self.committed_level = None
        self.level_note = ""
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
        mine = _global([[_compact(it) for it in p.items] for p in plans])
        return [dataclasses.replace(p, storage_data=m) for p, m in zip(plans, mine)]

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

    def _submit(self, recipe, values, mode):
        """Stages this rank's part of the save recipe plans, from the state dict whose
        leaves' values are values, and on rank 0 asks for the commit: one begin and one submit
        of every source (mode: 0 copy, 1 lazy, 2 synchronous, where no source is on a
        device), and a blob per object."""
        addrs, keep, devs, device = [], [], None, None
        for leaf, it in recipe.sources:
            t = _local(values[leaf], it)
            if not t.is_contiguous():
                t = t.contiguous()     # one copy here; by address from there
            if t.is_cuda:
                if devs is None:
                    devs, device = bytearray(len(addrs)), t.device
                devs.append(1)
            elif devs is not None:
                devs.append(0)
            elif t.device.type != "cpu":
                raise ValueError(f"CkptWriter: tensor {it[0]} is on {t.device}; "
                                 "CPU and CUDA tensors are saved")
            keep.append(t)
            addrs.append(t.data_ptr())
        blobs = [(name, _serialized(values[leaf])) for name, leaf in recipe.objects]
        if self.is_coordinator and recipe.mappings:
            blobs.append((PLANNER_DATA_BLOB, recipe.mappings))
        stream = 0
        if devs is not None:
            side = _side_stream(device)
            side.wait_stream(torch.cuda.current_stream(device))   # the latest values
            stream = side.cuda_stream
            if mode == 2:
                mode = 0               # device sources go through staging
        eng = self._engine(device.index if device is not None else -1)
        step = self.step if self.step is not None else _step_of(self.name)
        with eng.lock:
            save = eng.client.begin(self.name, step, self.rank, recipe.job, recipe.decl,
                                    self.hash, COMMIT_LEVELS.get(self.commit_level, 0))
            try:
                for name, data in blobs:
                    save.blob(name, data)
                save.submit(addrs, mode, devs, stream, self.is_coordinator)
            except BaseException:
                save.close()
                raise
        self._part = _Part(eng, save, self.name, keep if mode == 1 else [])

    def write_data(self, plan, planner):
        if self._staged():
            results = []               # stage() staged it
        else:
            self._done_with_last()
            leaves = _leaves(planner.state_dict, [])      # flattened: keys are fqns
            at = {path[0]: i for i, (path, _v) in enumerate(leaves)}
            values = [v for _p, v in leaves]
            items = [_compact(it) for it in plan.items]
            recipe = _Recipe(plan.storage_data, items, [at[it[0]] for it in items], self.world,
                             getattr(planner, "mappings", None))
            self._submit(recipe, values, 2)
            results = []
            for it, c, leaf in zip(plan.items, items, recipe.leaf):
                v = values[leaf]
                t = None if c[1] is None else _local(v, c)
                results.append(WriteResult(index=it.index, storage_data=None, size_in_bytes=len(
                    _serialized(v)) if t is None else t.numel() * t.element_size()))
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
                level, self.level_note = self._part.engine.call(self._part.save.level)
                self.committed_level = _LEVEL_NAMES.get(level)
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
        with _no_gc():
            return self._stage(state_dict)

    def _stage(self, state_dict):
        self._done_with_last()
        _warn_default_group(self.process_group)
        if self.name is None:
            raise ValueError("CkptWriter: async_save stages before DCP passes checkpoint_id "
                             "to the writer; give the name as CkptWriter(root, name)")
        recipe, values = self._plan(state_dict, True)
        self._submit(recipe, values, 1 if self.async_staging else 0)
        return {}

    def _plan(self, state_dict, named):
        """The recipe of a save of state_dict, and its leaves' values: the cached one
        when every rank's state dict keeps the structure it was planned for, else
        planned anew (one gather and one scatter over the process group); named: the
        save's name is checked on the coordinator."""
        dw = _DistWrapper(self.process_group, dist.is_initialized(), 0)
        self.set_up_storage_writer(dw.is_coordinator, rank=dw.rank)
        cache = _PlanCache.of(self.process_group)
        values = _match(state_dict, cache.trace) if cache.recipe is not None and \
            cache.trace is not None else None
        same = values is not None
        leaves, trace, local = None, [], None

        def local_step():
            nonlocal leaves, local
            if same:
                return _SAME
            leaves = _leaves(state_dict, trace)
            local = _local_items(leaves)
            return local[0]

        def global_step(plans):
            if named:
                self._check_new()
            if all(p == _SAME for p in plans) and cache.central is not None:
                return [_SAME] * len(plans)
            if any(p == _SAME for p in plans) and cache.locals is None:
                raise RuntimeError("CkptWriter: the plan caches of the ranks disagree")
            full = [cache.locals[i] if p == _SAME else p for i, p in enumerate(plans)]
            cache.locals, cache.central = full, _global(full)
            return cache.central

        got = dw.reduce_scatter("plan", local_step, global_step)
        if got == _SAME:
            recipe = cache.recipe
            cache.hits += 1
        else:
            if local is None:          # another rank re-planned: this one too
                leaves = _leaves(state_dict, trace)
                local = _local_items(leaves)
            items, leaf_of, paths = local
            recipe = _Recipe(got, items, leaf_of, self.world,
                             paths if dw.is_coordinator else None)
            # A leaf no signature describes (another tensor kind) is planned every time.
            cache.trace = None if any(tok is None for tok in trace) else trace
            cache.recipe = recipe
            cache.plans += 1
            values = [v for _p, v in leaves]
        return recipe, values

    def synchronize_staging(self):
        pass

    def reserve(self, state_dict, slack=1 << 20, wait=False, plan=True):
        """Makes what the saves of state_dict need now, so that the first one stalls no
        longer than the others: this process's staging, large enough for its local
        tensors laid out as the core lays out a part and slack bytes for the blobs, and
        for CUDA tensors page-locked, on the client's thread, overlapping what the
        caller does next (the first save waits for what remains; with wait, before it
        returns); and with plan, the saves' plan and declaration, cached as a save
        caches them. Planning is collective, one gather and one scatter over the
        process group: with plan, every rank of it calls reserve, as it calls the
        saves."""
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
        if plan:
            with _no_gc():
                self._plan(state_dict, False)

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
