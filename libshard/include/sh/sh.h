/* sh/sh.h - libshard's training library: FSDP2's contract in C. One include. */
#ifndef SH_SH_H
#define SH_SH_H

#include "sh/checkpoint.h"
#include "sh/comm.h"
#include "sh/fsdp.h"
#include "sh/module.h"
#include "sh/ops.h"
#include "sh/optim.h"
#include "sh/state_dict.h"
#include "sh/tensor.h"
#include "sh/world.h"

#endif
