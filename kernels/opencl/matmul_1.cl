// matmul_1: naive SGEMM, C = A * B (row-major; A is MxK, B is KxN, C is MxN).
// One work-item computes one element of C with a dot product over K, reading A and B straight
// from global memory: every element of A is read N times and every element of B M times.
// Dimension 0 walks along the columns of C, so a warp's reads of B and writes of C are
// coalesced; its reads of A are one broadcast address per k.
// Edges: work-items outside C return at once (no barrier follows), so any M, N, K works.

#ifndef TS
#define TS 16  // work-group is TS x TS work-items (the kernel itself does not use it)
#endif

__kernel void matmul_1(const int M, const int N, const int K,
                       const __global float* A, const __global float* B, __global float* C) {
    const int col = get_global_id(0);
    const int row = get_global_id(1);
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) {
        acc += A[row * K + k] * B[k * N + col];
    }
    C[row * N + col] = acc;
}
