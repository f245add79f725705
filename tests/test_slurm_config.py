"""What gemmlab's Slurm presets ask of Slurm, read from the sbatch script submitit would submit
(no cluster needed), and what a Slurm job records of where it ran. The cluster's own answers are
tests/test_slurm.py's, on a real one-node Slurm."""

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from hydra_plugins.gemmlab_launcher.slurm_launcher import GemmlabSlurmLauncher
from runner.config.paths import CONF_DIR
from runner.record import names
from runner.record.slurm_env import slurm_job_tags
from runner.sweep.slurm import array_tasks, gpus_of, job_name, minutes_of


def sbatch_script(tmp_path, *overrides: str) -> str:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        config = compose("config", overrides=list(overrides), return_hydra_config=True)
    params = OmegaConf.to_container(config.hydra.launcher, resolve=False)
    params.pop("_target_")
    params["submitit_folder"] = str(tmp_path / ".submitit" / "%j")
    params.pop("name")
    launcher = GemmlabSlurmLauncher(**params)
    executor = launcher.executor(job_name("kernel=matmul_9 size=4096,8192 · cuda sweep"))
    return executor._executor._make_submission_file_text("python -m job", "uid")


def test_the_gpu_preset_asks_for_one_gpu_per_job_as_slurm_expects(tmp_path):
    script = sbatch_script(tmp_path, "hydra/launcher=slurm", "hydra.launcher.partition=gpu")
    lines = set(script.splitlines())
    assert "#SBATCH --gpus-per-node=1" in lines
    assert "#SBATCH --cpus-per-task=8" in lines
    assert "#SBATCH --partition=gpu" in lines
    assert "#SBATCH --time=60" in lines
    assert "#SBATCH --no-requeue" in lines  # a failed node's job is not run again behind the sweep
    assert "#SBATCH --job-name='gemmlab kernel=matmul_9 size=4096,8192 cuda sweep'" in lines
    assert not any(line.startswith("#SBATCH --exclusive") for line in lines)


def test_the_cpu_preset_asks_for_a_node_of_its_own_and_no_gpu(tmp_path):
    script = sbatch_script(tmp_path, "hydra/launcher=slurm_cpu")
    lines = set(script.splitlines())
    assert "#SBATCH --exclusive" in lines  # a CPU job times every core of its node
    assert not any("gpu" in line for line in lines if line.startswith("#SBATCH"))
    assert not any(line.startswith("#SBATCH --mem") for line in lines)


def test_a_slurm_job_records_its_ids_node_partition_and_gpus():
    env = {"SLURM_JOB_ID": "1042", "SLURM_ARRAY_JOB_ID": "1040", "SLURM_ARRAY_TASK_ID": "2",
           "SLURMD_NODENAME": "gpu-07", "SLURM_JOB_PARTITION": "gpu", "SLURM_JOB_GPUS": "3"}
    assert slurm_job_tags(env) == {
        names.SLURM_JOB_ID: "1040_2", names.SLURM_ARRAY_JOB_ID: "1040",
        names.SLURM_ARRAY_TASK_ID: "2", names.SLURM_NODE: "gpu-07",
        names.SLURM_PARTITION: "gpu", names.SLURM_GPUS: "3"}
    assert slurm_job_tags({"PATH": "/usr/bin"}) == {}  # not a Slurm job: nothing


def test_slurms_texts_read_as_slurm_writes_them():
    assert gpus_of("gpu:h100:8(S:0-1)") == 8
    assert gpus_of("gpu:a:2,gpu:b:2") == 4
    assert gpus_of("(null)") == 0
    assert minutes_of("infinite") is None
    assert minutes_of("1-00:00:00") == 1440
    assert minutes_of("2:30:00") == 150
    assert minutes_of("30:00") == 30
    assert array_tasks("12_[1-3,5%4]") == ["12_1", "12_2", "12_3", "12_5"]
    assert array_tasks("12_3") == ["12_3"]
