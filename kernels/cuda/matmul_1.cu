// matmul_1: naive SGEMM, C = A * B (row-major; A is MxK, B is KxN, C is MxN).
// One thread computes one element of C with a dot product over K, reading A and B straight
// from global memory: every element of A is read N times and every element of B M times.
// threadIdx.x walks along the columns of C, so a warp's reads of B and writes of C are
// coalesced; its reads of A are one broadcast address per k.
// Edges: threads outside C return at once (no barrier follows), so any M, N, K works.

#ifndef TS
#define TS 16  // block is TS x TS threads (the kernel itself does not use it)
#endif

extern "C" __global__ void matmul_1(const int M, const int N, const int K,
                                    const float* __restrict__ A, const float* __restrict__ B,
                                    float* __restrict__ C) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) {
        acc += A[row * K + k] * B[k * N + col];
    }
    C[row * N + col] = acc;
}
