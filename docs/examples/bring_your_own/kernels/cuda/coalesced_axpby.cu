// coalesced_axpby: C = alpha*A·B + beta*C with a template block size, in the argument order of
// SGEMM_CUDA's kernels, (M, N, K, alpha, A, B, beta, C) (written for gemmlab's examples, not
// copied). One C element per thread; consecutive threads take consecutive columns, so a warp
// reads a row of B and writes a row of C in whole sectors. Guarded: any M, N, K >= 1.

template <const unsigned BLOCKSIZE>
__global__ void sgemm_coalesce(int M, int N, int K, float alpha, const float* A,
                               const float* B, float beta, float* C) {
    const int row = blockIdx.y * BLOCKSIZE + threadIdx.x / BLOCKSIZE;
    const int col = blockIdx.x * BLOCKSIZE + threadIdx.x % BLOCKSIZE;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++) acc += A[row * K + k] * B[k * N + col];
        C[row * N + col] = alpha * acc + beta * C[row * N + col];
    }
}
