/* comm/dtypes.h - the one table of how each dtype travels in a collective: its MPI
 * type, the reductions it needs beside MPI's own, and its NCCL type.
 *
 * One row per dtype the collectives carry, keyed by ck_dtype (the core's dtype
 * table, ck/types.h, says everything else about it). Each backend expands the columns
 * it needs, so that no file has a switch of its own: mpi.c the MPI type, job.c the
 * reductions it creates for the job at sh_init, nccl.c (the CUDA build, which alone
 * has nccl.h) the NCCL type. A dtype that has no row is refused by every
 * collective with -EINVAL naming it.
 *
 * bf16 and f16 have no MPI type: they travel as MPI_UINT16_T and reduce through the
 * functions job.c defines (each pair widened to f32 and rounded once, as NCCL
 * does); NULL reductions are MPI_SUM and MPI_MAX.
 *
 *   X(dtype,  MPI type,     sum,      max,      NCCL type)
 */
#ifndef SH_COMM_DTYPES_H
#define SH_COMM_DTYPES_H

#define SH_COMM_DTYPES(X)                                         \
    X(CK_F32,  MPI_FLOAT,    NULL,     NULL,     ncclFloat32)     \
    X(CK_F64,  MPI_DOUBLE,   NULL,     NULL,     ncclFloat64)     \
    X(CK_I32,  MPI_INT32_T,  NULL,     NULL,     ncclInt32)       \
    X(CK_I64,  MPI_INT64_T,  NULL,     NULL,     ncclInt64)       \
    X(CK_BF16, MPI_UINT16_T, sum_bf16, max_bf16, ncclBfloat16)    \
    X(CK_F16,  MPI_UINT16_T, sum_f16,  max_f16,  ncclFloat16)

#endif
