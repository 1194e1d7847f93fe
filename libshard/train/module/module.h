/* module/module.h - the module tree's private structures: modules, parameters, and
 * the table of hooks through which whoever takes a module over (sh_fully_shard)
 * runs around its callbacks. The tree knows only the table, never the installer.
 */
#ifndef SH_MODULE_MODULE_H
#define SH_MODULE_MODULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ck/error.h"
#include "sh/module.h"

/* Whoever takes a module over (sh_fully_shard) installs these on it; module.c runs
 * them and knows nothing else about the installer. Any entry may be NULL. */
typedef struct sh_module_hooks {
    /* Around the forward callback. pre_forward may hand the callback another input,
     * built in *scratch (freed after the callback), as a torch forward pre-hook may
     * replace the args; post_forward may rewrite the output. */
    int (*pre_forward)(void *state, const sh_tensor **in, sh_tensor *scratch, ck_err *err);
    int (*post_forward)(void *state, sh_tensor *out, ck_err *err);
    int (*pre_backward)(void *state, ck_err *err);
    int (*post_backward)(void *state, ck_err *err);
    /* 0 when the full value (grad: the gradient buffer) of p, a parameter these hooks
     * govern, may be handed out now; else a negative errno and a message saying what
     * to call instead. */
    int (*check_param)(void *state, const sh_param *p, bool grad, ck_err *err);
    /* Frees the state; runs before the module's parameters are freed. */
    void (*release)(void *state);
    void *state;                 /* the installer's; non-NULL once installed */
} sh_module_hooks;

struct sh_param {
    sh_module *owner;
    char name[256];              /* full name */
    int ndim;
    int64_t shape[CK_MAX_NDIM];
    size_t numel, rows, row_elems;   /* rows: dim 0 (1 for 0-D) */
    sh_init_spec init;
    /* The module whose hooks govern this parameter (fully_shard grouped it there);
     * NULL: not sharded, its value always available. */
    sh_module *sharded_by;
    bool materialized;
    /* The local f32 shard: rows [shard_row, shard_row + shard_rows) of dim 0, set when
     * the parameter is created (all rows) or sharded; storage once materialized. */
    float *shard;
    size_t shard_row, shard_rows, shard_numel;
    /* The unsharded parameter in param_dtype: storage only while unsharded. For a
     * parameter outside any group it aliases `shard`. */
    sh_tensor value;
    float *grad_full;            /* unsharded f32 gradient, NULL when none */
    /* CPU offload on a CUDA rank: the shard, its sharded gradient and its optimizer
     * state live in pinned host memory, which the device reaches directly. */
    bool host_state;
    float *grad_shard;           /* sharded f32 gradient, NULL when none */
};

struct sh_module {
    sh_world *world;
    sh_module *parent;
    char name[256];              /* full name */
    sh_forward_fn forward;
    sh_backward_fn backward;
    void *user;
    sh_module **child;
    int nchild;
    sh_param **param;
    int nparam;
    sh_module_hooks hooks;       /* zero until installed */
};

/* Visits every module under root (root first, pre-order). */
typedef int (*sh_module_visit_fn)(sh_module *m, void *arg, ck_err *err);
int sh_module_walk(sh_module *root, sh_module_visit_fn fn, void *arg, ck_err *err);

#endif
