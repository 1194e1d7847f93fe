/* world/world.c - joining the job (sh_init), a rank on its device, and the memory
 * counters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "world/attach.h"
#include "world/world.h"

/* An env var as an int, or -1 when unset or not a number. */
static int env_int(const char *name)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return -1;
    char *end;
    long v = strtol(s, &end, 10);
    return *end || v < 0 || v > (1 << 30) ? -1 : (int)v;
}

/* A launcher's view that disagrees with MPI's means two launchers were nested or a
 * script exported stale variables: training would silently mis-shard, so stop. */
static int check_env(const char *name, int mpi_value, const char *what, ck_err *err)
{
    int v = env_int(name);
    if (v >= 0 && v != mpi_value)
        return ck_err_set(err, -EINVAL,
                          "%s=%d but MPI says this process's %s is %d: the launcher's "
                          "environment does not match the MPI job", name, v, what,
                          mpi_value);
    return 0;
}

int sh_init(int *argc, char ***argv, sh_world **out, ck_err *err)
{
    *out = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided;
        if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return ck_err_set(err, -EIO, "MPI_Init_thread failed");
    }
    sh_world *w = calloc(1, sizeof *w);
    if (!w)
        return ck_err_set(err, -ENOMEM, "sh_init: out of memory");
    w->owns_mpi = !inited;
    w->device = SH_CPU;
    MPI_Comm world, local;
    MPI_Comm_dup(MPI_COMM_WORLD, &world);
    MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
    MPI_Comm_rank(world, &w->rank);
    MPI_Comm_size(world, &w->size);
    /* Ranks sharing memory are the ranks of this host, whatever the launcher. */
    MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &w->local_rank);
    MPI_Comm_size(local, &w->local_size);
    int prc = sh_comm_job_new(w->rank, w->size, local, w->local_size, &w->job, err);
    MPI_Comm_free(&local);
    if (sh_comm_mpi_new(w->job, world, "world", &w->comm)) {
        MPI_Comm_free(&world);
        sh_finalize(w);
        return ck_err_set(err, -ENOMEM, "sh_init: out of memory");
    }

    int rc = prc ? prc : check_env("RANK", w->rank, "rank", err);
    if (!rc)
        rc = check_env("WORLD_SIZE", w->size, "world size", err);
    if (!rc)
        rc = check_env("LOCAL_RANK", w->local_rank, "local rank", err);
    if (rc) {
        ck_err_set(err, rc, "rank %d", w->rank);
        sh_finalize(w);
        return rc;
    }
    *out = w;
    return 0;
}

void sh_finalize(sh_world *w)
{
    if (!w)
        return;
    sh_comm_free(w->comm);
    sh_cuda_detach(w);
    sh_comm_job_free(w->job);
    if (w->owns_mpi)
        MPI_Finalize();
    free(w);
}

int sh_world_set_device(sh_world *w, sh_device dev, ck_err *err)
{
    if (dev == w->device)
        return 0;
    if (dev != SH_CUDA)
        return ck_err_set(err, -EINVAL, "rank %d: a world moves from CPU to CUDA, not "
                          "back nor to META", w->rank);
    /* What the library holds was allocated on the CPU and would be freed on CUDA. */
    if (w->mem.state_cur || w->mem.cur[SH_MEM_COMM])
        return ck_err_set(err, -EBUSY, "rank %d: sh_world_set_device after %llu bytes of "
                          "parameters, gradients or buffers were made on the CPU: call it "
                          "first, before any module is materialized", w->rank,
                          (unsigned long long)(w->mem.state_cur + w->mem.cur[SH_MEM_COMM]));
    /* Every rank must agree before any of them starts a NCCL bootstrap, which would
     * wait forever for a rank that has no device. */
    int rc = sh_cuda_attach(w, err), bad = -rc, worst_bad = EIO;
    ck_err ignore = {0};
    sh_all_reduce(w->comm, &bad, &worst_bad, 1, CK_I32, SH_MAX, NULL, &ignore);
    int worst = -worst_bad;
    if (worst) {
        if (!rc)
            ck_err_set(err, worst, "rank %d: another rank has no usable CUDA device", w->rank);
        return worst;
    }
    rc = sh_cuda_attach_comm(w, err);
    if (!rc)
        w->device = SH_CUDA;
    return rc;
}

sh_device sh_world_device(const sh_world *w) { return w->device; }

int sh_world_rank(const sh_world *w) { return w->rank; }
int sh_world_size(const sh_world *w) { return w->size; }
int sh_world_local_rank(const sh_world *w) { return w->local_rank; }
int sh_world_local_size(const sh_world *w) { return w->local_size; }
sh_comm *sh_world_comm(sh_world *w) { return w->comm; }

void sh_mem_get(const sh_world *w, sh_mem_stats *out) { *out = w->mem; }

void sh_mem_reset_peak(sh_world *w)
{
    memcpy(w->mem.peak, w->mem.cur, sizeof w->mem.peak);
    w->mem.state_peak = w->mem.state_cur;
}

static void counted(sh_world *w, sh_mem_kind kind, size_t bytes)
{
    sh_mem_stats *m = &w->mem;
    m->cur[kind] += bytes;
    if (m->cur[kind] > m->peak[kind])
        m->peak[kind] = m->cur[kind];
    if (kind != SH_MEM_COMM) {
        m->state_cur += bytes;
        if (m->state_cur > m->state_peak)
            m->state_peak = m->state_cur;
    }
}

static void uncounted(sh_world *w, sh_mem_kind kind, size_t bytes)
{
    w->mem.cur[kind] -= bytes;
    if (kind != SH_MEM_COMM)
        w->mem.state_cur -= bytes;
}

void *sh_alloc(sh_world *w, sh_mem_kind kind, size_t bytes, bool zero)
{
    void *p;
    if (bytes == 0 || sh_dev(w)->alloc(&p, bytes, zero))
        return NULL;
    counted(w, kind, bytes);
    return p;
}

void sh_free(sh_world *w, sh_mem_kind kind, void *p, size_t bytes)
{
    if (!p)
        return;
    sh_dev(w)->free(p);
    uncounted(w, kind, bytes);
}

void *sh_alloc_state(sh_world *w, bool host, sh_mem_kind kind, size_t bytes, bool zero)
{
    void *ptr;
    if (!host)
        return sh_alloc(w, kind, bytes, zero);
    if (bytes == 0 || sh_pinned_alloc(&ptr, bytes, zero))
        return NULL;
    counted(w, kind, bytes);
    return ptr;
}

void sh_free_state(sh_world *w, bool host, sh_mem_kind kind, void *ptr, size_t bytes)
{
    if (!host) {
        sh_free(w, kind, ptr, bytes);
    } else if (ptr) {
        sh_pinned_free(ptr);
        uncounted(w, kind, bytes);
    }
}
