/* comm/comm.c - the backend-neutral collectives: argument checks, then the ops table. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/comm.h"

int sh_comm_rank(const sh_comm *c) { return c->rank; }
int sh_comm_size(const sh_comm *c) { return c->size; }
const char *sh_comm_name(const sh_comm *c) { return c->name; }

/* Starts a handle; a NULL `work` asks for completion before returning. */
static int begin(sh_comm *c, const char *what, size_t count, sh_work **out, sh_work **w,
                 ck_err *err)
{
    /* MPI and NCCL both count elements in an int. */
    if (count > INT_MAX)
        return ck_err_set(err, -EOVERFLOW, "%s on %s: %zu elements exceed one call's limit",
                          what, c->name, count);
    *w = calloc(1, sizeof **w);
    if (!*w)
        return ck_err_set(err, -ENOMEM, "%s on %s: out of memory", what, c->name);
    (*w)->comm = c;
    (*w)->what = what;
    if (out)
        *out = NULL;
    return 0;
}

static int finish(int rc, sh_work *w, sh_work **out, ck_err *err)
{
    if (rc) {
        free(w);
        return rc;
    }
    if (out) {
        *out = w;
        return 0;
    }
    return sh_work_wait(w, err);
}

#define COLLECTIVE(what, count, call)                                                   \
    do {                                                                                \
        sh_work *w;                                                                     \
        int rc_ = begin(c, what, count, work, &w, err);                                 \
        if (rc_)                                                                        \
            return rc_;                                                                 \
        return finish(call, w, work, err);                                              \
    } while (0)

int sh_all_gather(sh_comm *c, const void *send, void *recv, size_t count, ck_dtype dt,
                  sh_work **work, ck_err *err)
{
    COLLECTIVE("all-gather", count * (size_t)c->size,
               c->ops->all_gather(c, send, recv, count, dt, w, err));
}

int sh_reduce_scatter(sh_comm *c, const void *send, void *recv, size_t count, ck_dtype dt,
                      sh_reduce_op op, sh_work **work, ck_err *err)
{
    COLLECTIVE("reduce-scatter", count * (size_t)c->size,
               c->ops->reduce_scatter(c, send, recv, count, dt, op, w, err));
}

int sh_all_reduce(sh_comm *c, const void *send, void *recv, size_t count, ck_dtype dt,
                  sh_reduce_op op, sh_work **work, ck_err *err)
{
    COLLECTIVE("all-reduce", count, c->ops->all_reduce(c, send, recv, count, dt, op, w, err));
}

int sh_broadcast(sh_comm *c, void *buf, size_t count, ck_dtype dt, int root, sh_work **work,
                 ck_err *err)
{
    COLLECTIVE("broadcast", count, c->ops->broadcast(c, buf, count, dt, root, w, err));
}

int sh_gather(sh_comm *c, const void *send, void *recv, size_t count, ck_dtype dt, int root,
              sh_work **work, ck_err *err)
{
    COLLECTIVE("gather", count * (size_t)c->size,
               c->ops->gather(c, send, recv, count, dt, root, w, err));
}

int sh_barrier(sh_comm *c, sh_work **work, ck_err *err)
{
    COLLECTIVE("barrier", 0, c->ops->barrier(c, w, err));
}

int sh_work_wait(sh_work *w, ck_err *err)
{
    if (!w)
        return 0;
    int rc = w->comm->ops->wait(w, err);
    free(w);
    return rc;
}

int sh_comm_split(sh_comm *c, int color, int key, const char *name, sh_comm **out,
                  ck_err *err)
{
    return c->ops->split(c, color, key, name, out, err);
}

void sh_comm_free(sh_comm *c)
{
    if (c)
        c->ops->destroy(c);
}
