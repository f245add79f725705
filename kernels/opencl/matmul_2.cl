// matmul_2: tiling in local memory, C = A * B (row-major; A is MxK, B is KxN, C is MxN).
// Over matmul_1: a TS x TS work-group loads a TS x TS tile of A and one of B into local memory
// (each work-item one element of each, coalesced), waits at a barrier, then every work-item
// reads TS values of each tile from fast local memory. Global traffic drops by a factor of TS.
// Edges: tile loads outside A or B store zero (adding nothing), stores outside C are skipped,
// and every work-item takes part in every barrier, so any M, N, K works.

#ifndef TS
#define TS 32  // tile size in M, N and K; the work-group is TS x TS work-items
#endif

__kernel void matmul_2(const int M, const int N, const int K,
                       const __global float* A, const __global float* B, __global float* C) {
    __local float Asub[TS][TS];
    __local float Bsub[TS][TS];
    const int tx = get_local_id(0);  // column within the tile
    const int ty = get_local_id(1);  // row within the tile
    const int col = get_group_id(0) * TS + tx;
    const int row = get_group_id(1) * TS + ty;

    float acc = 0.0f;
    const int num_tiles = (K + TS - 1) / TS;
    for (int t = 0; t < num_tiles; t++) {
        const int a_col = t * TS + tx;
        const int b_row = t * TS + ty;
        Asub[ty][tx] = (row < M && a_col < K) ? A[row * K + a_col] : 0.0f;
        Bsub[ty][tx] = (b_row < K && col < N) ? B[b_row * N + col] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < TS; k++) {
            acc += Asub[ty][k] * Bsub[k][tx];
        }
        barrier(CLK_LOCAL_MEM_FENCE);  // the next iteration overwrites the tiles
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
