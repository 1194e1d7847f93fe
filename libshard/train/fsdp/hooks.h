/* fsdp/hooks.h - FSDP's hooks on a module (hooks.c): installing them, and finding a
 * module's group through them. */
#ifndef SH_FSDP_HOOKS_H
#define SH_FSDP_HOOKS_H

#include "fsdp/group.h"

/* Makes g's module run FSDP's hooks; the module frees g with them. */
void sh_fsdp_install_hooks(sh_group *g);

/* The group fully_shard made of m (the state of FSDP's hooks on it), or NULL. */
sh_group *sh_fsdp_group(const sh_module *m);

#endif
