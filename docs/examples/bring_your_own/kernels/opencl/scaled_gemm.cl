// scaled_gemm: C = alpha*A·B + beta*C with leading dimensions, in the argument order BLAS-style
// kernels use (written for gemmlab's examples; row-major). The scalars come from the YAML's
// `args` (alpha=1.5f, lda=K, ...); with beta != 0 the runner fills C with C0 before every launch
// and checks the result against alpha*A·B + beta*C0. Guarded: correct for any size >= 1.

#ifndef TS
#define TS 16  // work-group side
#endif

__kernel void scaled_gemm(const int M, const int N, const int K, const float alpha,
                          const __global float* A, const int lda,
                          const __global float* B, const int ldb,
                          const float beta, __global float* C, const int ldc) {
    const int col = get_global_id(0);
    const int row = get_global_id(1);
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) {
        acc += A[row * lda + k] * B[k * ldb + col];
    }
    C[row * ldc + col] = alpha * acc + beta * C[row * ldc + col];
}
