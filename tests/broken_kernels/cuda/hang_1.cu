// hang_1: matmul_1 with a fault added, a test fixture: Never returns: work-item (0, 0) spins on a value that never changes.
#ifndef TS
#define TS 16  // block is TS x TS threads (the kernel itself does not use it)
#endif

extern "C" __global__ void hang_1(const int M, const int N, const int K,
                                    const float* __restrict__ A, const float* __restrict__ B,
                                    float* __restrict__ C) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) {
        acc += A[row * K + k] * B[k * N + col];
    }
    if (row == 0 && col == 0) {
        volatile const float* a = A;
        while (a[0] != 7.0f) {}  // A is drawn from [-1, 1)
    }
    C[row * N + col] = acc;
}
