/* lr.h - the learning-rate schedule: linear warmup, then cosine decay to a floor. */
#ifndef TR_LR_H
#define TR_LR_H

typedef struct tr_lr {
    float max, min;        /* peak and floor */
    long warmup;           /* steps of linear warmup */
    long total;            /* the schedule's length in steps */
} tr_lr;

/* The rate of step (1-based): max * step / warmup during warmup, then
 * min + (max - min) (1 + cos(pi p)) / 2 with p going from 0 to 1 at `total`, and min
 * after it. */
float tr_lr_at(const tr_lr *s, long step);

#endif
