// oob_1: matmul_1 with a fault added, a test fixture: Writes one row past the end of C.
#ifndef TS
#define TS 16  // work-group is TS x TS work-items (the kernel itself does not use it)
#endif

__kernel void oob_1(const int M, const int N, const int K,
                       const __global float* A, const __global float* B, __global float* C) {
    const int col = get_global_id(0);
    const int row = get_global_id(1);
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) {
        acc += A[row * K + k] * B[k * N + col];
    }
    C[row * N + col] = acc;
    if (row == 0) C[M * N + col] = acc;  // row M: one row past the end
}
