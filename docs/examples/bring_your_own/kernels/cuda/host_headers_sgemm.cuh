#pragma once

// host_headers_sgemm.cuh: a kernel file as kernel repositories keep them (written for gemmlab's
// examples in the style of SGEMM_CUDA's src/kernels/*.cuh): the host headers its project's
// runner needs at the top, glibc's `uint`, a template over the block size, BLAS's alpha and
// beta. gemmlab compiles it unchanged: NVRTC gets stand-ins for the host headers.

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#define CEIL_DIV(M, N) (((M) + (N)-1) / (N))

// One C element per thread; consecutive threads of a block take consecutive columns of C, so
// their loads of B and stores of C are coalesced. A 1-D block of BLOCKSIZE * BLOCKSIZE threads.
template <const uint BLOCKSIZE>
__global__ void sgemm_coalesced(int M, int N, int K, float alpha, const float *A,
                                const float *B, float beta, float *C) {
  assert(blockDim.x == BLOCKSIZE * BLOCKSIZE);
  const uint cRow = blockIdx.x * BLOCKSIZE + (threadIdx.x / BLOCKSIZE);
  const uint cCol = blockIdx.y * BLOCKSIZE + (threadIdx.x % BLOCKSIZE);

  if (cRow < M && cCol < N) {
    float tmp = 0.0;
    for (int i = 0; i < K; ++i) {
      tmp += A[cRow * K + i] * B[i * N + cCol];
    }
    C[cRow * N + cCol] = alpha * tmp + beta * C[cRow * N + cCol];
  }
}
