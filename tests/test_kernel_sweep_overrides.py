"""A tiling value given once for a sweep over kernels is each job's (issue 41): rewritten as a
one-value sweep, so Hydra applies it to every job's composed kernel, not to the default kernel of
the sweep's own config. A value that some of the swept kernels do not have is refused in one line
before any job runs (runner/config/preflight.py, kernel_sweep_error)."""

from test_bad_inputs_cli import gemmlab, one_error_line, runs

from runner.app import per_job_kernel_values
from runner.config.preflight import command_line_error, kernel_sweep_error


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


# A tiling value some of the swept kernels do not have: one line before any job runs, naming the
# kernels that lack it and those that have it (conf/kernel: matmul_1 has TS, matmul_5..7 TSM).

def test_a_value_some_swept_kernels_lack_is_refused_naming_them():
    line = kernel_sweep_error(["-m", "kernel=matmul_1,matmul_6", "kernel.params.TSM=64",
                               "size=64"])
    assert line is not None and "\n" not in line
    assert "kernel.params.TSM is a parameter of matmul_6 only" in line, line
    assert "matmul_1 has no TSM (its parameters: TS)" in line, line
    for argv in (["-m", "kernel=matmul_1,matmul_2,matmul_6", "kernel.params.TSM=32,64"],
                 ["--multirun", "kernel=choice(matmul_1,matmul_2,matmul_6)",
                  "kernel.params.TSM=range(32,65,32)"],
                 ["-m", "kernel=glob([matmul_1,matmul_2,matmul_6])", "kernel.params.TSM=64"]):
        line = kernel_sweep_error(argv)
        assert line is not None and "parameter of matmul_6 only" in line, (argv, line)
        assert "matmul_1, matmul_2 have no TSM" in line, (argv, line)
    line = kernel_sweep_error(["-m", "kernel=matmul_6,matmul_7", "kernel.defines.X=2"])
    assert line is not None and "none of the swept kernels has a define X" in line, line
    assert "matmul_6, matmul_7 have no X" in line, line


def test_a_value_every_swept_kernel_has_passes_through():
    for argv in (["-m", "kernel=matmul_5,matmul_6,matmul_7", "kernel.params.TSM=64"],
                 ["-m", "kernel=matmul_6,matmul_7", "kernel.params.TSM=32,64"],
                 ["-m", "kernel=matmul_1,matmul_2", "kernel.params.TS=8", "size=64"]):
        assert kernel_sweep_error(argv) is None, argv
        assert command_line_error(argv) is None, argv
    # not a sweep over kernels: Hydra's own rules, as before
    assert kernel_sweep_error(["kernel=matmul_1", "kernel.params.TSM=64"]) is None
    assert kernel_sweep_error(["-m", "kernel=matmul_1", "kernel.params.TSM=64"]) is None
    assert kernel_sweep_error(["kernel=matmul_1,matmul_6", "kernel.params.TSM=64"]) is None


def test_a_kernel_yaml_not_found_is_left_to_its_own_refusal():
    assert kernel_sweep_error(["-m", "kernel=matmul_1,no_such_kernel",
                               "kernel.params.TSM=64"]) is None


def test_the_kernels_of_a_searchpath_folder_are_read_where_hydra_finds_them(tmp_path):
    (tmp_path / "kernel").mkdir()
    (tmp_path / "kernel" / "my_step.yaml").write_text("name: my_step\nparams: {TSM: 32}\n")
    (tmp_path / "kernel" / "matmul_1.yaml").write_text("name: shadowed\nparams: {TSM: 32}\n")
    searchpath = f"hydra.searchpath=[file://{tmp_path}]"
    assert kernel_sweep_error(["-m", searchpath, "kernel=my_step,matmul_6",
                               "kernel.params.TSM=64"]) is None
    line = kernel_sweep_error(["-m", searchpath, "kernel=my_step,matmul_1",
                               "kernel.params.TSM=64"])  # conf/'s matmul_1 comes first
    assert line is not None and "parameter of my_step only" in line, line
    assert "matmul_1 has no TSM" in line, line


def test_the_command_line_refuses_it_in_one_line_before_any_job(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = gemmlab(tmp_path, "-m", "kernel=matmul_1,matmul_6", "kernel.params.TSM=64",
                   f"tracking.uri={uri}")  # on the CPU's OpenCL, at size=16
    one_error_line(done, "kernel.params.TSM is a parameter of matmul_6 only",
                   "matmul_1 has no TSM (its parameters: TS)")
    assert not (tmp_path / "mlflow.db").exists() or runs(uri) == []
    assert not (tmp_path / "multirun").exists()  # no job, not even the sweep's folder
