// prefetch_tiles.cuh: the tile loads of prefetch_sgemm.cu, in a header beside it (a kernel
// folder's own files may be #included; NVRTC gets the folder as an include path).
#pragma once

// A BM x BK tile of A (rows row0.., columns k0..) into shared memory transposed (As[k][m]),
// and a BK x BN tile of B (rows k0.., columns col0..) as it is; outside the matrices: zeros.
template <int BM, int BK, int BN, int THREADS>
__device__ __forceinline__ void load_tiles(const float* __restrict__ A,
                                           const float* __restrict__ B,
                                           float (*As)[BM], float (*Bs)[BN],
                                           int M, int N, int K, int row0, int col0, int k0,
                                           int tid) {
    for (int i = tid; i < BM * BK; i += THREADS) {
        const int m = i / BK, k = i % BK;
        const int gm = row0 + m, gk = k0 + k;
        As[k][m] = (gm < M && gk < K) ? A[gm * K + gk] : 0.0f;
    }
    for (int i = tid; i < BK * BN; i += THREADS) {
        const int k = i / BN, n = i % BN;
        const int gk = k0 + k, gn = col0 + n;
        Bs[k][n] = (gk < K && gn < N) ? B[gk * N + gn] : 0.0f;
    }
}
