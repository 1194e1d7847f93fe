/* lr.c - see lr.h. */
#include "lr.h"

#include <math.h>

float tr_lr_at(const tr_lr *s, long step)
{
    if (step <= s->warmup)
        return s->max * (float)step / (float)s->warmup;
    if (step >= s->total)
        return s->min;
    double p = (double)(step - s->warmup) / (double)(s->total - s->warmup);
    return s->min + (float)(0.5 * (1.0 + cos(M_PI * p))) * (s->max - s->min);
}
