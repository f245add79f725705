// hang_1: matmul_1 with a fault added, a test fixture: Never returns: work-item (0, 0) spins on a value that never changes.
#ifndef TS
#define TS 16  // work-group is TS x TS work-items (the kernel itself does not use it)
#endif

__kernel void hang_1(const int M, const int N, const int K,
                       const __global float* A, const __global float* B, __global float* C) {
    const int col = get_global_id(0);
    const int row = get_global_id(1);
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) {
        acc += A[row * K + k] * B[k * N + col];
    }
    if (row == 0 && col == 0) {
        volatile __global const float* a = A;
        while (a[0] != 7.0f) {}  // A is drawn from [-1, 1)
    }
    C[row * N + col] = acc;
}
