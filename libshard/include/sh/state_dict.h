/* sh/state_dict.h - sharded and full state dicts.
 *
 * A sharded state dict lists this rank's local shards: for each tensor its global
 * shape, the mesh, one placement per mesh dim (R, or S(0) on the shard dim), this
 * rank's mesh coordinate, and the box (global offsets and lengths) that its data
 * covers. Shards follow torch.chunk on dim 0 (chunk = ceil(n / parts); trailing
 * shards short or empty, never padded), exactly the checkpoint core's layout
 * (ck/layout.h: ck_shard_box gives the same box), so the entries go to the checkpoint
 * client as they are. Data pointers alias the live shards: no copy.
 *
 * A full state dict holds whole tensors on rank 0 only (gathered on save, broadcast
 * from rank 0 on load), for export to single-process tools.
 */
#ifndef SH_STATE_DICT_H
#define SH_STATE_DICT_H

#include <stdbool.h>

#include "ck/layout.h"
#include "sh/module.h"
#include "sh/optim.h"

#define SH_NAME_MAX 256

typedef struct sh_shard_entry {
    char name[SH_NAME_MAX];        /* "blocks.0.w1", "blocks.0.w1.exp_avg" */
    ck_dtype dtype;
    int ndim;
    uint64_t shape[CK_MAX_NDIM];   /* global */
    ck_mesh mesh;
    ck_placement placement[CK_MAX_MESH_DIMS];
    uint32_t coord[CK_MAX_MESH_DIMS];
    ck_box box;                    /* the part of the global tensor `data` holds */
    void *data;                    /* NULL when the box is empty */
    sh_device device;              /* where data lives: SH_CUDA on a GPU rank; SH_CPU, or 0
                                      in a dict built by hand, is host memory */
} sh_shard_entry;

typedef struct sh_state_dict {
    sh_shard_entry *entry;
    size_t n;
    bool owns_data;                /* full state dicts own their tensors */
} sh_state_dict;

/* The model's parameters. */
int sh_model_state_dict(sh_module *root, sh_state_dict *out, ck_err *err);
/* The optimizer's state: "<param>.exp_avg" and "<param>.exp_avg_sq" (the step count
 * is sh_adamw_step_count, saved as a blob). */
int sh_optim_state_dict(sh_adamw *o, sh_state_dict *out, ck_err *err);
/* Copies each entry's data into the shard of the parameter of the same name; boxes
 * must match this rank's shards (load through the checkpoint core to reshard). */
int sh_model_load_state_dict(sh_module *root, const sh_state_dict *sd, ck_err *err);

/* Whole tensors on rank 0 (a world of entries with full boxes); other ranks get an
 * empty dict. Collective over the world. */
int sh_model_full_state_dict(sh_module *root, sh_state_dict *out, ck_err *err);
/* sd is read on rank 0 only (others may pass NULL): each tensor is broadcast and
 * every rank keeps its shard. Collective over the world. */
int sh_model_load_full_state_dict(sh_module *root, const sh_state_dict *sd, ck_err *err);

void sh_state_dict_free(sh_state_dict *sd);

#endif
