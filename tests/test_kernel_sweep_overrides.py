"""A tiling value given once for a sweep over kernels is each job's (issue 41): rewritten as a
one-value sweep, so Hydra applies it to every job's composed kernel, not to the default kernel of
the sweep's own config."""

from runner.app import per_job_kernel_values


def test_a_tiling_value_in_a_sweep_over_kernels_becomes_each_jobs():
    argv = ["-m", "kernel=matmul_6,matmul_7", "kernel.params.TSM=64", "kernel.defines.X=2",
            "size=128"]
    assert per_job_kernel_values(argv) == ["-m", "kernel=matmul_6,matmul_7",
                                           "kernel.params.TSM=choice(64)",
                                           "kernel.defines.X=choice(2)", "size=128"]


def test_anything_else_is_left_as_given():
    single = ["kernel=matmul_6", "kernel.params.TSM=64"]
    assert per_job_kernel_values(single) == single  # no sweep
    one_kernel = ["-m", "kernel=matmul_6", "kernel.params.TSM=64,128"]
    assert per_job_kernel_values(one_kernel) == one_kernel  # one kernel: Hydra's own rules
    swept = ["-m", "kernel=matmul_6,matmul_7", "kernel.params.TSM=64,128",
             "kernel.params.TSN=range(64,129,64)"]
    assert per_job_kernel_values(swept) == swept  # already sweeps
