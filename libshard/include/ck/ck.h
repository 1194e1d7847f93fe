/* ck/ck.h - the checkpoint core's entry point: which header serves which task.
 *
 * Including this header includes every public header of the core; including only
 * the one a task needs is as good. Every function returns 0 or a negative errno
 * code and fills a ck_err whose message names the checkpoint, file, tensor or rank
 * (ck/error.h). The on-disk format is docs/FORMAT.md; examples/save_and_load.c shows
 * a save, a load onto another mesh and a verify in about a hundred lines.
 *
 *   task                                   header          start with
 *   -------------------------------------  --------------  -----------------------------
 *   describe tensors, meshes, placements   ck/types.h      ck_mesh_parse, ck_placements_parse
 *   compute a rank's shard (torch.chunk)   ck/layout.h     ck_shard_box, ck_chunk
 *   list a root's checkpoints, recover it  ck/catalog.h    ck_root_scan, ck_catalog_list
 *   remove a checkpoint (crash-safe)       ck/catalog.h    ck_root_remove
 *   a run's saves PREFIX<step>: newest,    ck/steps.h      ck_root_newest, ck_root_prune
 *     keep the last K
 *   inspect a checkpoint                   ck/ckpt.h       ck_open, ck_tensors_each, ck_shards_get
 *   declare what a save holds, once       ck/decl.h       ck_decl_new, ck_decl_tensor,
 *     (placements, or DCP's box lists)                     ck_decl_tensor_boxes
 *   save (one process, every rank's part)  ck/save.h       ck_save_begin ... ck_save_commit
 *   store any state-dict key as a name     ck/ckpt.h       ck_key_encode, ck_key_decode
 *   async save from training ranks         ck/client.h     ck_client_begin, ck_client_submit,
 *     (embedded, or through ckptd)                         ck_client_wait
 *   restore through ckptd's tiers          ck/client.h     ck_client_resolve, _restore_open
 *   load any box onto any mesh             ck/load.h       ck_reader_open, ck_reader_read_shard
 *   verify (structure, deep re-hash)       ck/verify.h     ck_verify
 *   compare two checkpoints element-wise   ck/compare.h    ck_compare
 *   reshard for another mesh               ck/reshard.h    ck_reshard
 *   synthetic checkpoints (the formula)    ck/synth.h      ck_synth_fill
 *   route a save's file I/O (tests wrap    ck/engine.h     ck_engine_default
 *     it: tests/engines/test_engines.h)
 *
 * Export to safetensors is a library of its own (export/safetensors.h, it adds
 * jansson); the collective save of a training job is the training library's
 * (sh/checkpoint.h, over MPI).
 */
#ifndef CK_CK_H
#define CK_CK_H

#include "ck/error.h"
#include "ck/types.h"
#include "ck/layout.h"
#include "ck/synth.h"
#include "ck/engine.h"
#include "ck/ckpt.h"
#include "ck/catalog.h"
#include "ck/steps.h"
#include "ck/decl.h"
#include "ck/load.h"
#include "ck/save.h"
#include "ck/verify.h"
#include "ck/compare.h"
#include "ck/reshard.h"
#include "ck/client.h"

#endif
