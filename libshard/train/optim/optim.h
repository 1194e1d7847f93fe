/* optim/optim.h - what the optimizer shows the state dicts (checkpoint/state_dict.c):
 * the parameters it steps, in order, and their f32 state. */
#ifndef SH_OPTIM_OPTIM_H
#define SH_OPTIM_OPTIM_H

#include "sh/optim.h"

int sh_adamw_num_params(const sh_adamw *o);
sh_param *sh_adamw_param(const sh_adamw *o, int i);
float *sh_adamw_exp_avg(const sh_adamw *o, int i);
float *sh_adamw_exp_avg_sq(const sh_adamw *o, int i);

#endif
