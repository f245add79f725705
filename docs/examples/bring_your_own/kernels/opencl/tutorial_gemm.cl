// tutorial_gemm: three SGEMM steps in one file, picked by KERNEL, the way a tutorial's
// kernels.cl keeps them (written for gemmlab's examples; row-major, C = A·B, A is MxK).
//
// Nothing here is set by the source itself: KERNEL and every size macro come from the YAML
// that points at this file (conf/kernel/tutorial_gemm_<N>.yaml), the derived ones (RTSM, LPTA,
// ...) from its `defines`, so one file serves three YAMLs without a settings header.
// Every step is correct for any M, N, K >= 1: loads outside the matrices read zero, stores
// outside C are skipped.

#ifndef KERNEL
#error "KERNEL (1, 2 or 3) comes from the YAML's defines"
#endif

#if KERNEL == 1
// Step 1: one C element per work-item, straight from global memory.
__kernel void tutorial_gemm(const int M, const int N, const int K,
                            const __global float* A, const __global float* B,
                            __global float* C) {
    const int col = get_global_id(0);
    const int row = get_global_id(1);
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) {
        acc += A[row * K + k] * B[k * N + col];
    }
    C[row * N + col] = acc;
}

#elif KERNEL == 2
// Step 2: TS x TS tiles of A and B staged in local memory; one C element per work-item.
__kernel void tutorial_gemm(const int M, const int N, const int K,
                            const __global float* A, const __global float* B,
                            __global float* C) {
    __local float Asub[TS][TS];
    __local float Bsub[TS][TS];
    const int tx = get_local_id(0);
    const int ty = get_local_id(1);
    const int col = get_group_id(0) * TS + tx;
    const int row = get_group_id(1) * TS + ty;
    float acc = 0.0f;
    for (int t = 0; t < K; t += TS) {
        Asub[ty][tx] = (row < M && t + tx < K) ? A[row * K + t + tx] : 0.0f;
        Bsub[ty][tx] = (t + ty < K && col < N) ? B[(t + ty) * N + col] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < TS; k++) {
            acc += Asub[ty][k] * Bsub[k][tx];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

#elif KERNEL == 3
// Step 3: rectangular TSM x TSN tiles of C, TSK deep, each work-item a WPTM x WPTN block in
// registers. RTSM x RTSN work-items share the loads: LPTA elements of the A tile and LPTB of
// the B tile each. All four derived sizes are the YAML's defines.
#if !defined(RTSM) || !defined(RTSN) || !defined(LPTA) || !defined(LPTB)
#error "RTSM, RTSN, LPTA and LPTB come from the YAML's defines"
#endif
__kernel void tutorial_gemm(const int M, const int N, const int K,
                            const __global float* A, const __global float* B,
                            __global float* C) {
    __local float Asub[TSK][TSM];  // transposed: a column of the A tile is a row here
    __local float Bsub[TSK][TSN];
    const int tidn = get_local_id(0);
    const int tidm = get_local_id(1);
    const int tid = tidm * RTSN + tidn;
    const int offsetM = get_group_id(1) * TSM;
    const int offsetN = get_group_id(0) * TSN;

    float acc[WPTM][WPTN];
    for (int wm = 0; wm < WPTM; wm++)
        for (int wn = 0; wn < WPTN; wn++)
            acc[wm][wn] = 0.0f;

    for (int t = 0; t < K; t += TSK) {
        for (int l = 0; l < LPTA; l++) {
            const int id = l * RTSM * RTSN + tid;
            const int r = id / TSK, k = id % TSK;
            const int gr = offsetM + r, gk = t + k;
            Asub[k][r] = (gr < M && gk < K) ? A[gr * K + gk] : 0.0f;
        }
        for (int l = 0; l < LPTB; l++) {
            const int id = l * RTSM * RTSN + tid;
            const int k = id / TSN, c = id % TSN;
            const int gk = t + k, gc = offsetN + c;
            Bsub[k][c] = (gk < K && gc < N) ? B[gk * N + gc] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < TSK; k++) {
            float b[WPTN];
            for (int wn = 0; wn < WPTN; wn++) b[wn] = Bsub[k][tidn + wn * RTSN];
            for (int wm = 0; wm < WPTM; wm++) {
                const float a = Asub[k][tidm + wm * RTSM];
                for (int wn = 0; wn < WPTN; wn++) acc[wm][wn] += a * b[wn];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int wm = 0; wm < WPTM; wm++) {
        const int row = offsetM + tidm + wm * RTSM;
        for (int wn = 0; wn < WPTN; wn++) {
            const int col = offsetN + tidn + wn * RTSN;
            if (row < M && col < N) C[row * N + col] = acc[wm][wn];
        }
    }
}

#else
#error "KERNEL must be 1, 2 or 3"
#endif
