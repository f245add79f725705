// oob_1: matmul_1 with a fault added, a test fixture: Writes one row past the end of C.
#ifndef TS
#define TS 16  // block is TS x TS threads (the kernel itself does not use it)
#endif

extern "C" __global__ void oob_1(const int M, const int N, const int K,
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
    if (row == 0) C[M * N + col] = acc;  // row M: one row past the end
}
