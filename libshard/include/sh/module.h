/* sh/module.h - modules: the C form of torch.nn.Module and of `model(inputs)`.
 *
 * A module is a node in a tree with a name, parameters, children, and forward and
 * backward callbacks. C has no autograd, so a module's backward is written by hand:
 * it receives the gradient of its output, writes the gradient of its input, and adds
 * its parameters' gradients into the buffers sh_param_grad hands out. A callback
 * keeps what its backward needs (activations) in its own `user` state; the tensors it
 * receives are valid only during the call.
 *
 * Run modules through sh_module_forward / sh_module_backward, never by calling the
 * callbacks: those two run FSDP's hooks around the callback (unshard, prefetch,
 * reshard, reduce-scatter), as `model(inputs)` does in torch. A callback run any other
 * way finds its sharded parameters not unsharded, and sh_param_value says so.
 */
#ifndef SH_MODULE_H
#define SH_MODULE_H

#include <stdbool.h>
#include <stdint.h>

#include "sh/tensor.h"
#include "sh/world.h"

typedef struct sh_module sh_module;
typedef struct sh_param sh_param;

/* The callbacks may resize `out` / `grad_in` (sh_tensor_resize). */
typedef int (*sh_forward_fn)(sh_module *m, const sh_tensor *in, sh_tensor *out, void *user,
                             ck_err *err);
typedef int (*sh_backward_fn)(sh_module *m, const sh_tensor *grad_out, sh_tensor *grad_in,
                              void *user, ck_err *err);

/* A module; parent NULL makes a root. Its full name is the parent's plus ".name";
 * the root's name is not part of its descendants' names (torch's named_parameters():
 * "blocks.0.w1"). Callbacks may be NULL for pure containers. */
int sh_module_new(sh_world *w, sh_module *parent, const char *name, sh_forward_fn forward,
                  sh_backward_fn backward, void *user, sh_module **out, ck_err *err);
/* Frees a root and everything under it. */
void sh_module_free(sh_module *root);
const char *sh_module_name(const sh_module *m);    /* full name */
sh_world *sh_module_world(const sh_module *m);
int sh_module_num_children(const sh_module *m);
sh_module *sh_module_child(const sh_module *m, int i);

/* A parameter of m, f32, on META (no storage) until sh_module_to_empty. Shapes are
 * up to CK_MAX_NDIM dims; FSDP shards dim 0. */
int sh_param_new(sh_module *m, const char *name, int ndim, const int64_t *shape,
                 sh_init_spec init, sh_param **out, ck_err *err);
const char *sh_param_name(const sh_param *p);      /* full name: "blocks.0.w1" */
int sh_param_ndim(const sh_param *p);
const int64_t *sh_param_shape(const sh_param *p);

/* Materializes every parameter under root on dev: only the local shard of a sharded
 * parameter is allocated (the meta-init flow: build on META, fully_shard, to_empty,
 * reset_parameters). dev SH_CUDA is reserved: -ENOTSUP in a CPU build. */
int sh_module_to_empty(sh_module *root, sh_device dev, ck_err *err);
/* Fills every parameter under root from its sh_init_spec (see sh_init_fill). */
int sh_module_reset_parameters(sh_module *root, uint64_t seed, ck_err *err);

/* The full (unsharded) parameter, in the group's param_dtype. Only while its FSDP
 * group is unsharded, i.e. inside sh_module_forward/backward of its group's module;
 * otherwise -EPERM with a message naming the parameter and the module to call. A
 * parameter outside any FSDP group is always available (plain, unsharded training). */
int sh_param_value(sh_param *p, sh_tensor **out, ck_err *err);

/* The full-size f32 gradient buffer to accumulate into (+=). Zeroed when it is first
 * handed out after a reduce-scatter or a zero_grad; kept across backward passes while
 * gradient sync is off. Only inside sh_module_backward (of its group's module for a
 * sharded parameter); otherwise -EPERM. */
int sh_param_grad(sh_param *p, float **out, ck_err *err);

/* Runs m's forward callback inside FSDP's hooks (see above). */
int sh_module_forward(sh_module *m, const sh_tensor *in, sh_tensor *out, ck_err *err);
/* Runs m's backward callback inside FSDP's hooks. On the root of an FSDP tree it also
 * ends the backward pass: waits for every reduce-scatter and leaves the sharded
 * gradients ready for clipping and the optimizer. */
int sh_module_backward(sh_module *m, const sh_tensor *grad_out, sh_tensor *grad_in,
                       ck_err *err);

#endif
