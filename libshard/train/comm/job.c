/* comm/job.c - what the communicators of one job share (comm.h's sh_comm_job): this
 * rank's place, the reductions MPI has no type for, and the peer watchdog. */
#include <stdlib.h>

#include "cast_elem.h"
#include "comm/comm.h"
#include "comm/dtypes.h"
#include "comm/peers.h"

/* Reductions MPI has no type for (dtypes.h): bf16 and f16 travel as MPI_UINT16_T
 * with these ops, widening each pair to f32 and rounding the result once, as NCCL
 * does. */
#define HALF_OP(fn, to_f32, from_f32, combine)                                          \
    static void fn(void *in, void *inout, int *len, MPI_Datatype *dt)                   \
    {                                                                                   \
        (void)dt;                                                                       \
        const uint16_t *a = in;                                                         \
        uint16_t *b = inout;                                                            \
        for (int i = 0; i < *len; i++) {                                                \
            float x = to_f32(a[i]), y = to_f32(b[i]);                                   \
            b[i] = from_f32(combine(x, y));                                             \
        }                                                                               \
    }
#define ADD(x, y) ((x) + (y))
#define MAX(x, y) ((x) > (y) || (y) != (y) ? (x) : (y))
HALF_OP(sum_bf16, k_bf16_to_f32_elem, k_f32_to_bf16_elem, ADD)
HALF_OP(sum_f16, k_f16_to_f32_elem, k_f32_to_f16_elem, ADD)
HALF_OP(max_bf16, k_bf16_to_f32_elem, k_f32_to_bf16_elem, MAX)
HALF_OP(max_f16, k_f16_to_f32_elem, k_f32_to_f16_elem, MAX)

#define USER_OPS(dt, type, sum, max, nccl) [dt] = { sum, max },
static MPI_User_function *const user_ops[CK_DTYPE_MAX + 1][2] = { SH_COMM_DTYPES(USER_OPS) };
#undef USER_OPS

/* Each dtype's sum and max: MPI's own, or ours where the table names them. */
static void ops_create(sh_comm_job *j)
{
    for (int dt = 1; dt <= CK_DTYPE_MAX; dt++) {
        j->op_sum[dt] = MPI_SUM;
        j->op_max[dt] = MPI_MAX;
        if (user_ops[dt][0])
            MPI_Op_create(user_ops[dt][0], 1, &j->op_sum[dt]);
        if (user_ops[dt][1])
            MPI_Op_create(user_ops[dt][1], 1, &j->op_max[dt]);
    }
}

static void ops_free(sh_comm_job *j)
{
    for (int dt = 1; dt <= CK_DTYPE_MAX; dt++) {
        if (user_ops[dt][0])
            MPI_Op_free(&j->op_sum[dt]);
        if (user_ops[dt][1])
            MPI_Op_free(&j->op_max[dt]);
    }
}

int sh_comm_job_new(int rank, int size, MPI_Comm local, int local_size, sh_comm_job **out,
                    ck_err *err)
{
    *out = NULL;
    sh_comm_job *j = calloc(1, sizeof *j);
    if (!j)
        return ck_err_set(err, -ENOMEM, "rank %d: out of memory for the communicators",
                          rank);
    j->rank = rank;
    j->size = size;
    int rc = sh_peers_new(j, local, local_size, &j->peers, err);
    if (rc) {
        free(j);
        return rc;
    }
    ops_create(j);
    *out = j;
    return 0;
}

void sh_comm_job_free(sh_comm_job *j)
{
    if (!j)
        return;
    sh_peers_free(j->peers);
    ops_free(j);
    free(j);
}
