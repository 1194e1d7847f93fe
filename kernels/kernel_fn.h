/* kernel_fn.h - one spelling for functions that run on the CPU and on the GPU.
 *
 * Each element-wise operation is written once, as a KERNEL_FN in a *_elem.h header.
 * The CPU loops (*.c) and the CUDA kernels (*.cu) both call it, so the CPU unit tests
 * check the very arithmetic the GPU runs.
 */
#ifndef KERNEL_FN_H
#define KERNEL_FN_H

#if defined(__CUDACC__)
#define KERNEL_FN __host__ __device__ static inline
/* Tile loops over registers must unroll fully on the GPU (an array indexed by a loop
 * variable that stays a variable lives in local memory); the CPU ignores it. */
#define K_UNROLL _Pragma("unroll")
#else
#define KERNEL_FN static inline
#define K_UNROLL
#endif

#endif
