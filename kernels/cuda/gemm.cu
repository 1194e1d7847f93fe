/* gemm.cu - row-major GEMMs through cuBLAS, f32 accumulation.
 *
 * cuBLAS is column-major: a row-major C = op(A) op(B) is the column-major
 * C^T = op(B)^T op(A)^T, so the operands swap and the shapes read n, m, k. f32 runs
 * cublasSgemm in the default math mode (no TF32: results stay within f32 rounding of
 * the CPU's); bf16 inputs go through cublasGemmEx with f32 compute and f32 output.
 */
#include <cublas_v2.h>

#include "launch.h"

extern "C" {
#include "kernels_cuda.h"
}

extern "C" int k_cuda_blas_new(void **out)
{
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
        return -EIO;
    *out = h;
    return 0;
}

extern "C" void k_cuda_blas_free(void *h)
{
    if (h)
        cublasDestroy((cublasHandle_t)h);
}

extern "C" int k_cuda_gemm(void *blas, void *stream, k_gemm_type type, bool ta, bool tb,
                           int m, int n, int k, float alpha, const void *a, int lda,
                           const void *b, int ldb, float beta, float *c, int ldc)
{
    cublasHandle_t h = (cublasHandle_t)blas;
    if (m == 0 || n == 0)
        return 0;
    if (cublasSetStream(h, (cudaStream_t)stream) != CUBLAS_STATUS_SUCCESS)
        return -EIO;
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t st;
    if (type == K_GEMM_F32)
        st = cublasSgemm(h, ob, oa, n, m, k, &alpha, (const float *)b, ldb, (const float *)a,
                         lda, &beta, c, ldc);
    else
        st = cublasGemmEx(h, ob, oa, n, m, k, &alpha, b, CUDA_R_16BF, ldb, a, CUDA_R_16BF,
                          lda, &beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : -EIO;
}
