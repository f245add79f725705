// tutorial_kernels.cl: a tutorial's kernels.cl (written for gemmlab's examples in the style of
// myGEMM's): every step in one file behind `#if KERNEL == N`, built by the tutorial's host code
// after its settings header (tutorial_settings.h), whose macros it uses. Row-major, C = A·B.

#if KERNEL == 7
// Each work-item computes a WPTM x WPTN block of C, its rows RTSM apart and its columns RTSN
// apart, straight from global memory; a work-group covers a TSM x TSN tile.
__kernel void gemm7(const int M, const int N, const int K,
                    const __global float* A, const __global float* B, __global float* C) {
    const int id = get_local_id(1) * RTSN + get_local_id(0);
    const int tx = MOD2(id, RTSN);
    const int ty = DIV2(id, RTSN);
    float acc[WPTM][WPTN];
    for (int wm = 0; wm < WPTM; wm++)
        for (int wn = 0; wn < WPTN; wn++)
            acc[wm][wn] = 0.0f;
    for (int k = 0; k < K; k++) {
        for (int wm = 0; wm < WPTM; wm++) {
            const int row = get_group_id(1) * TSM + ty + wm * RTSM;
            const float a = row < M ? A[row * K + k] : 0.0f;
            for (int wn = 0; wn < WPTN; wn++) {
                const int col = get_group_id(0) * TSN + tx + wn * RTSN;
                acc[wm][wn] += a * (col < N ? B[k * N + col] : 0.0f);
            }
        }
    }
    for (int wm = 0; wm < WPTM; wm++) {
        const int row = get_group_id(1) * TSM + ty + wm * RTSM;
        for (int wn = 0; wn < WPTN; wn++) {
            const int col = get_group_id(0) * TSN + tx + wn * RTSN;
            if (row < M && col < N) C[row * N + col] = acc[wm][wn];
        }
    }
}

#elif KERNEL == 8
// One C element per work-item (the tutorial's next step would go here).
__kernel void gemm8(const int M, const int N, const int K,
                    const __global float* A, const __global float* B, __global float* C) {
    const int col = get_global_id(0);
    const int row = get_global_id(1);
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) acc += A[row * K + k] * B[k * N + col];
    C[row * N + col] = acc;
}
#endif
