// tiled_namespace: a shared-memory tiled SGEMM inside a C++ namespace, as the cuda-learning
// notes keep each step (written for gemmlab's examples, not copied). The YAML's entry is the
// qualified name `matrixMul_tiled::matrixMul`; NVRTC resolves it, so the function needs no
// extern "C". TILE is an ordinary macro with its default here. Row-major, C = A·B; guarded
// loads and stores: any M, N, K >= 1.

#ifndef TILE
#define TILE 16  // the block is TILE x TILE threads; tiles of A and B are TILE x TILE
#endif

namespace matrixMul_tiled {

__global__ void matrixMul(const float* __restrict__ A, const float* __restrict__ B,
                          float* __restrict__ C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int col = blockIdx.x * TILE + threadIdx.x;
    const int row = blockIdx.y * TILE + threadIdx.y;
    float acc = 0.0f;
    for (int t = 0; t < K; t += TILE) {
        As[threadIdx.y][threadIdx.x] =
            (row < M && t + threadIdx.x < K) ? A[row * K + t + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] =
            (t + threadIdx.y < K && col < N) ? B[(t + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; k++) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

}  // namespace matrixMul_tiled
