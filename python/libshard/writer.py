"""CkptWriter: a torch.distributed.checkpoint StorageWriter (and AsyncStager) that
writes a committed libshard checkpoint.

Every write item becomes a box of a box-list tensor (format 1.1) written by the rank
DCP's planner gave it to (replicas deduplicated as DCP does); BYTE_IO items (optimizer
param_groups, Python objects) become blobs; 0-d tensors (AdamW's step) are tensors.
The coordinator's prepare_global_plan turns all ranks' plans into one table (every
tensor's shape, dtype, boxes and writers) that goes back to every rank in its plan, so
that each declares the same save.

Two engines, one result:
- through ckptd (``socket=`` or $CKPTD_SOCKET): each rank stages its boxes into the
  daemon's shared memory (ck_client_save_async) and rank 0 asks for the commit; once
  every rank staged, the checkpoint commits even if every trainer process dies.
- embedded: the part records of ck/save.h. Rank 0 creates the pending directory in
  prepare_global_plan and its token travels in the plans; each rank writes its own
  data file durably in write_data and returns its part record in its WriteResults;
  finish (rank 0) adopts every record and commits.

In both, the checkpoint is visible only when every rank's part is durable, and a name
that is already committed is refused before anything is written.

As the AsyncStager of ``dcp.async_save``, stage() runs DCP's planning (one gather and
one scatter of the plans) and copies this rank's boxes once, straight into the
engine's staging (ckptd's memfd, or the embedded engine's file image); async_save
returns after that copy. The thread DCP starts then only writes (embedded) or waits for
ckptd, and commits. Wait for an async save's future before starting the next one with
the same writer.
"""
import dataclasses
import json
import os
import re
import time

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.metadata import MetadataIndex, StorageMeta
from torch.distributed.checkpoint.planner import WriteItemType
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.distributed.checkpoint.utils import _DistWrapper
from torch.futures import Future

from . import _ck, names
from .reader import PLANNER_DATA_BLOB, split_checkpoint_id
from .torchio import dtype_code

try:                                   # torch >= 2.4
    from torch.distributed.checkpoint.staging import AsyncStager
except ImportError:                    # pragma: no cover
    AsyncStager = object

_PART_FQN = "__libshard_part__"


@dataclasses.dataclass
class _Table:
    """The whole save, as the coordinator planned it: sent to every rank."""
    name: str
    step: int
    world: int
    token: str | None                  # embedded: the shared pending directory
    tensors: list                      # [(name, dtype code, shape, boxes, writers)]


@dataclasses.dataclass
class _Part:
    """What a rank returns to the coordinator besides DCP's WriteResults."""
    rank: int
    record: bytes | None               # embedded: the part record
    blobs: dict                        # embedded: {name: bytes} this rank was given


def _step_of(name):
    m = re.search(r"(\d+)$", name)
    return int(m.group(1)) if m else 0


def _table(plans, name, step):
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
    return _Table(name=name, step=step, world=len(plans), token=None,
                  tensors=[tensors[k] for k in sorted(tensors)])


def _declare(save, table):
    for disk, code, shape, boxes, writers in table.tensors:
        save.tensor_boxes(disk, code, shape, boxes, writers)


class CkptWriter(StorageWriter, AsyncStager):
    """``dcp.save(sd, storage_writer=CkptWriter("/ckpt", "step-100"))``, or
    ``dcp.save(sd, checkpoint_id="/ckpt/step-100", storage_writer=CkptWriter())``.

    socket: ckptd's socket (default $CKPTD_SOCKET; neither: the embedded engine).
    hash: SHA-256 of every 4 MiB block (ckpt-verify --deep checks them).
    step: the step recorded in the checkpoint (default: the name's trailing digits).
    process_group: the group of the save, for async staging (default: the world).
    """

    should_synchronize_after_execute = False

    def __init__(self, root=None, name=None, *, socket=None, hash=True, step=None,
                 process_group=None):
        super().__init__()
        self.root = os.fspath(root) if root is not None else None
        self.name = name
        self.socket = socket
        self.hash = hash
        self.step = step
        self.process_group = process_group
        self._reset_run()

    # Handles to the C core live only in the process that made them: a pickled writer
    # (async_save with the process executor) starts without any.
    def __getstate__(self):
        state = self.__dict__.copy()
        for k in ("_save", "_client", "_csave", "_table"):
            state[k] = None
        state["_keep"] = []
        if self._staged is not None:
            state["_staged"] = _Staged(name=self._staged.name, pending=None)
        state["_unpickled"] = True
        return state

    def _reset_run(self):
        self.rank = 0
        self.is_coordinator = True
        self._save = None          # embedded: this rank's _ck.Save
        self._client = None        # connected: _ck.Client, kept across saves
        self._csave = None         # connected: this rank's _ck.ClientSave
        self._keep = []            # tensors whose memory the engine reads until staged
        self._table = None
        self._staged = None        # set between stage() and the background save
        self._unpickled = False

    # ---- StorageWriter ----

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            root, name = split_checkpoint_id(checkpoint_id)
            if self._staged is not None and (root, name) != (self.root, self._staged.name):
                raise ValueError(f"CkptWriter: staged {self._staged.name} under {self.root}, "
                                 f"asked to save {checkpoint_id}")
            self.root, self.name = root, name

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        root, name = split_checkpoint_id(checkpoint_id)
        return name is not None and os.path.isdir(root)

    def storage_meta(self):
        cid = os.path.join(self.root, self.name) if self.root and self.name else None
        return StorageMeta(checkpoint_id=cid)

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        self.is_coordinator = is_coordinator
        rank = kwargs.get("rank")
        if rank is None:
            rank = dist.get_rank(self.process_group) if dist.is_initialized() else 0
        self.rank = rank

    def prepare_local_plan(self, plan):
        return plan

    def _connected(self):
        return bool(self.socket or os.environ.get("CKPTD_SOCKET"))

    def _staged_elsewhere(self):
        """In the checkpoint process of AsyncCheckpointerType.PROCESS, after this writer
        staged the save in the training process: True through ckptd, which has every
        part and the commit request and finishes alone; embedded, the staged part is in
        the training process's memory, out of this process's reach: an error."""
        if self._staged is None or not self._unpickled:
            return False
        if not self._connected():
            raise RuntimeError(
                f"CkptWriter: {self._staged.name} was staged into the training process's "
                "memory (embedded engine), which the checkpoint process of "
                "AsyncCheckpointerType.PROCESS cannot reach; pass "
                "async_stager=DefaultStager() to dcp.async_save, or save through ckptd")
        return True

    def _wait_committed_elsewhere(self):
        """ckptd owns the save: it holds the save's lock until the save is committed or
        removed (docs/FORMAT.md, "Owners and locks"). Its reason for a failure went to
        the training process's client."""
        name = self._staged.name
        while (state := _ck.name_state(self.root, name)[0]) != "committed":
            if state != "busy":
                raise RuntimeError(f"CkptWriter: {name}: ckptd ended the save without "
                                   "committing it; the training process's error says why")
            time.sleep(0.02)

    def prepare_global_plan(self, plans):
        self._staged_elsewhere()
        if self._staged is not None:
            return plans               # stage() planned and staged this save already
        table = self._plan_save(plans)
        return [dataclasses.replace(p, storage_data=table) for p in plans]

    def _plan_save(self, plans):
        if self.root is None or self.name is None:
            raise ValueError("CkptWriter: no checkpoint root/name (give CkptWriter(root, name) "
                             "or checkpoint_id=ROOT/NAME)")
        _ck.name_check("checkpoint", self.name)
        if os.path.exists(os.path.join(self.root, self.name)):
            raise FileExistsError(f"{self.root}: checkpoint {self.name} is already committed; "
                                  "a committed checkpoint is never replaced")
        step = self.step if self.step is not None else _step_of(self.name)
        table = _table(plans, self.name, step)
        if not self._connected():
            self._abandon()
            save = _ck.Save(self.root, self.name, step, table.world, self.hash)
            _declare(save, table)
            table.token = save.share()
            self._save = save
        return table

    def _abandon(self):
        """Drops what a failed save left on this rank (its pending directory stays as
        debris that ckptd or ck_root_recover removes)."""
        if self._save is not None:
            self._save.abort()
        self._save = None
        if self._csave is not None:
            self._csave.close()
        self._csave = None
        self._keep = []

    def _offer(self, plan, planner, table):
        """Declares the save on this rank and offers its boxes and blobs; returns the
        WriteResults of its items and the blobs it holds."""
        index = {}
        for disk, _code, _shape, boxes, writers in table.tensors:
            index[disk] = {b[0]: i for i, (b, w) in enumerate(zip(boxes, writers))
                           if w == self.rank}
        if self._connected():
            if self._client is None:
                self._client = _ck.Client(self.root, self.socket)
            if self._csave is not None:
                self._csave.close()
            target = self._csave = self._client.begin(table.name, table.step, self.rank,
                                                      table.world, self.hash)
        else:
            if not self.is_coordinator:
                self._abandon()
                self._save = _ck.Save(self.root, table.name, table.step, table.world,
                                      self.hash)
            target = self._save
        if not self.is_coordinator or self._connected():
            _declare(target, table)
        if not self.is_coordinator and not self._connected():
            target.join(table.token, self.rank)
        results, blobs = [], {}
        if self.is_coordinator:
            mappings = getattr(planner, "mappings", None)
            if mappings:
                blobs[PLANNER_DATA_BLOB] = json.dumps(
                    {k: list(v) for k, v in mappings.items()}).encode()
        for it in plan.items:
            key = it.index.fqn
            disk = names.encode(key)
            data = planner.resolve_data(it)
            if it.type == WriteItemType.BYTE_IO:
                buf = data.getvalue()
                blobs[disk] = buf
                results.append(WriteResult(index=it.index, size_in_bytes=len(buf),
                                           storage_data=None))
                continue
            t = data.detach()
            if t.device.type != "cpu":
                t = t.cpu()
            t = t.contiguous()
            offsets = tuple(int(x) for x in it.tensor_data.chunk.offsets)
            target.box(disk, index[disk][offsets], t.data_ptr())
            self._keep.append(t)
            results.append(WriteResult(index=it.index, size_in_bytes=t.numel() *
                                       t.element_size(), storage_data=None))
        if self._connected():
            for disk, buf in blobs.items():
                target.blob(disk, buf)
            blobs = {}
        return results, blobs

    def _stage_copy(self):
        """The one copy of this rank's bytes into the engine's staging."""
        try:
            if self._connected():
                self._csave.save_async()
                if self.is_coordinator:
                    self._csave.commit()
            else:
                self._save.stage_rank(self.rank)
        finally:
            self._keep = []

    def _write(self, results, blobs):
        """After the copy: this rank's file (embedded), and the part for rank 0."""
        record = None
        if not self._connected():
            self._save.write_rank(self.rank)
            record = self._save.part(self.rank)
            if not self.is_coordinator:
                self._save.abort()
                self._save = None
        part = _Part(rank=self.rank, record=record, blobs=blobs)
        results.append(WriteResult(index=MetadataIndex(_PART_FQN), size_in_bytes=0,
                                   storage_data=part))
        return results

    def write_data(self, plan, planner):
        try:
            if self._staged_elsewhere():
                results = []
            elif self._staged is not None:
                results = self._write(*self._staged.pending)
            else:
                results, blobs = self._offer(plan, planner, plan.storage_data)
                self._stage_copy()
                results = self._write(results, blobs)
        except BaseException:
            if not self.is_coordinator:
                self._abandon()
            raise
        fut = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata, results):
        try:
            if self._staged_elsewhere():
                self._wait_committed_elsewhere()
                return
            if self._connected():
                self._csave.wait()
                self._csave.close()
                self._csave = None
                return
            save = self._save
            for rank_results in results:
                for r in rank_results:
                    part = r.storage_data
                    if not isinstance(part, _Part):
                        continue
                    if part.record is not None and part.rank != self.rank:
                        save.adopt(part.record)
                    for disk, buf in part.blobs.items():
                        save.blob(disk, buf)
            self._save = None
            save.commit()
        finally:
            self._staged = None
            self._abandon()

    # ---- AsyncStager ----

    def stage(self, state_dict):
        if self._staged is not None:
            raise RuntimeError("CkptWriter: the previous async save of this writer is still "
                               "running; wait for its future first")
        if self.name is None:
            raise ValueError("CkptWriter: async_save stages before DCP passes checkpoint_id "
                             "to the writer; give the name as CkptWriter(root, name)")
        planner = DefaultSavePlanner()
        dw = _DistWrapper(self.process_group, dist.is_initialized(), 0)
        self.set_up_storage_writer(dw.is_coordinator, rank=dw.rank)

        def local_step():
            planner.set_up_planner(state_dict, storage_meta=self.storage_meta(),
                                   is_coordinator=dw.is_coordinator)
            return planner.create_local_plan()

        def global_step(plans):
            plans, _md = planner.create_global_plan(plans)
            table = self._plan_save(plans)
            return [dataclasses.replace(p, storage_data=table) for p in plans]

        central = dw.reduce_scatter("plan", local_step, global_step)
        plan = planner.finish_plan(central)
        try:
            results, blobs = self._offer(plan, planner, plan.storage_data)
            self._stage_copy()
        except BaseException:
            self._abandon()
            raise
        self._staged = _Staged(name=self.name, pending=(results, blobs))
        return {}

    def synchronize_staging(self):
        pass

    def close(self):
        self._abandon()
        if self._client is not None:
            self._client.close()
        self._client = None


@dataclasses.dataclass
class _Staged:
    name: str
    pending: tuple
