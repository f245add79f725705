"""Structured configs: the schema every composed config is checked against.

A typo in a key or a value of the wrong type fails at composition with Hydra's own message,
before anything is compiled or recorded.
"""

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra_plugins.hydra_optuna_sweeper.config import SamplerConfig
from omegaconf import II, MISSING


class Operation(Enum):
    sgemm = "sgemm"
    copy = "copy"
    transpose = "transpose"


class Precision(Enum):
    fp32 = "fp32"  # FP32 multiplies and adds (FFMA): the ladder's SIMT steps
    tf32 = "tf32"  # inputs rounded to TF32 on the tensor cores, FP32 sums: reduced precision
    tf32x3 = "tf32x3"  # three TF32 tensor-core products per term, error-compensated: FP32-accurate


class DeviceType(Enum):
    auto = "auto"  # a GPU if any platform has one, else the CPU
    gpu = "gpu"
    cpu = "cpu"
    accelerator = "accelerator"


@dataclass
class ConstraintConfig:
    rule: str = MISSING  # expression over the parameters, M, N, K
    reason: str = MISSING  # one line, shown when the rule fails


@dataclass
class SizeRuleConfig:
    when: str = MISSING  # expression over M, N, K
    params: Dict[str, int] = field(default_factory=dict)  # tiling values used when it holds
    # A register cap for these values (null: none); left out, the kernel's own max_registers.
    max_registers: Optional[int] = MISSING
    reason: str = MISSING  # one line: why these values at these sizes (recorded with the run)


@dataclass
class LaunchConfig:
    entry: str = MISSING  # kernel function name in the source file
    # In the kernel's parameter order: names (M, N, K, the operation's buffers, scratch
    # buffers) and scalars written `name=value`: a float32 constant with C's f suffix
    # ("alpha=1.0f") or an int32 expression over the parameters, defines and sizes ("lda=K").
    # For sgemm, scalars named alpha and beta mean C = alpha*A*B + beta*C.
    args: List[str] = MISSING
    local: List[str] = MISSING  # work-group size per dimension (expressions), dimension 0 first
    groups: List[str] = MISSING  # work-groups per dimension (expressions)
    # Dynamic local/shared memory in bytes (expression): CUDA's `extern __shared__` array (the
    # way past 48 KiB), OpenCL's trailing `__local` pointer argument; 0: none.
    local_bytes: str = "0"
    # Expression over the parameters and M, N, K: the launch runs only where it holds (a
    # pre-pass that some parameters or sizes do not need); None: always.
    when: Optional[str] = None
    # True: the launch the step is about (its registers, alpha and beta are the run's), where
    # it is neither named as the step nor last (a pass after it that unpads C); at most one.
    main: bool = False
    # Expression: where it holds, CUDA on sm_90+ launches this one as a programmatic dependent
    # of the launch before it, so it starts while that one finishes; its kernel must execute
    # `griddepcontrol.wait` before reading what that launch wrote. OpenCL ignores it.
    overlap_previous: Optional[str] = None


@dataclass
class WorkConfig:
    flops: str = "0"  # floating-point operations of one run (expression)
    bytes: str = MISSING  # minimum bytes any implementation must move (expression)


@dataclass
class SourcesConfig:
    # File names in kernels/opencl/ and kernels/cuda/. A step written for one backend's
    # hardware only (matmul_12: wgmma, which OpenCL cannot ask for) leaves the other out, and
    # runs on that backend are refused.
    opencl: Optional[str] = None
    cuda: Optional[str] = None


@dataclass
class KernelConfig:
    name: str = MISSING
    operation: Operation = MISSING
    summary: str = MISSING
    sources: SourcesConfig = field(default_factory=SourcesConfig)
    params: Dict[str, int] = field(default_factory=dict)  # macro name -> value
    allowed: Dict[str, List[int]] = field(default_factory=dict)  # macro name -> allowed values
    # Macros beyond the tiling parameters, each passed as -DNAME=<int>: a fixed value
    # (`KERNEL: 6`) or an integer expression over the parameters and the defines above it
    # (`RTSM: TSM // WPTM`). In scope of the launch geometry, scratch and work expressions too.
    defines: Dict[str, str] = field(default_factory=dict)
    # backend -> headers beside the source, included ahead of it in this order: what a host
    # program that joins files into one program text does (myGEMM: settings.h + kernels.cl).
    include_first: Dict[str, List[str]] = field(default_factory=dict)
    constraints: List[ConstraintConfig] = field(default_factory=list)
    launches: List[LaunchConfig] = MISSING
    scratch: Dict[str, str] = field(default_factory=dict)  # buffer name -> float count (expression)
    edges: str = MISSING  # how sizes that are not tile multiples are handled
    work: WorkConfig = field(default_factory=WorkConfig)
    # Registers per work-item the compiler may use (None: its own choice). One cap for both
    # backends, so two work-groups of 256 fit an SM in OpenCL too, which has no launch bounds.
    max_registers: Optional[int] = None
    # What the arithmetic is (recorded with every run; tf32 is labelled reduced precision).
    precision: Precision = Precision.fp32
    # The step's own check tolerance, in place of check.tolerance (the FP32 steps' default),
    # for a step whose precision cannot meet it; None: check.tolerance.
    tolerance: Optional[float] = None
    # NVIDIA compute capability (major*10+minor) the source needs, e.g. 80 for mma.sync TF32
    # inline PTX: any other device is refused before a compile. None: any device.
    requires_compute_capability: Optional[int] = None
    # True: that compute capability exactly, no later one; the source uses instructions only
    # its architecture has (wgmma on sm_90a), which CUDA compiles for as sm_XXa.
    requires_exact_architecture: bool = False
    # Tile shapes chosen by problem size: the first rule whose `when` holds sets its params,
    # unless one of them is given on the command line (or by a sweep); kernel.size_rules=[]
    # turns the rules off.
    size_rules: List[SizeRuleConfig] = field(default_factory=list)


@dataclass
class OpenCLConfig:
    name: str = "opencl"
    platform: Optional[str] = None  # index or part of the name; None: search every platform
    device: Optional[str] = None  # index or part of the name, within the chosen platform(s)
    device_type: DeviceType = DeviceType.auto


@dataclass
class CUDAConfig:
    name: str = "cuda"
    device: int = 0  # CUDA device id
    # Compute capability to compile for when no GPU is present (compile-only checks, CI).
    compile_only_cc: int = 90


@dataclass
class TimingConfig:
    warmup: int = 5  # untimed launches after the checked one, at least (0: none at all)
    # ... over at least this many seconds, then until the rate is steady (two windows of warm-up
    # samples agree, runner/run/timing.py) or warmup_max_s has passed: a GPU's clocks take
    # tens of milliseconds to come up from idle, and a count of launches may not cover them.
    warmup_min_s: float = 0.1
    warmup_max_s: float = 1.0
    repeats: int = 20  # timed launches; the median is the headline number
    # Adaptive repetitions (null: off, `repeats` samples): sample until the median is known to
    # within this fraction (0.005: ±0.5%, the 95% interval of the median, runner/run/timing.py),
    # with at least 10 samples over at least min_time_s, or until max_time_s has passed.
    # `timing.target_noise=0.005` turns it on; `repeats` is then unused.
    target_noise: Optional[float] = None
    min_time_s: float = 0.1  # seconds of timed samples the adaptive mode takes at least
    max_time_s: float = 10.0  # seconds after which the adaptive mode stops, stable or not
    # Evict L2 before every sample (warm-up and timed, the kernel's and the baseline's), so each
    # starts with its inputs in device memory only: the cold-cache figure.
    flush_l2: bool = False
    # Seconds a kernel may run before it is taken to be hung: the checked launch, each timed
    # sample and each baseline sample must finish within it, else the job's worker process is
    # killed (the only way to stop a kernel that never returns) and the run is FAILED with
    # status `timeout`. The slowest step, matmul_1, takes about 2 s a launch at 16384 on an H100
    # (5.1 TFLOPS at 8192: docs/benchmarks/sgemm_ladder.md).
    timeout_s: float = 60.0
    # Seconds the compiler may take for one kernel (NVRTC or the OpenCL driver).
    compile_timeout_s: float = 120.0
    # Refuse a number measured while another process used the GPU or its clocks were held back
    # for heat (gpu.hygiene, NVIDIA GPUs): measure again once after a pause, then FAILED.
    require_clean: bool = False
    # Seconds of launches back to back, after the timed ones, whose energy (NVML's counter, an
    # NVIDIA GPU) gives the work per joule of the kernel and of the vendor library in the same
    # job (energy/*, vendor_energy/*): where the power limit sets the clock, the fair judge.
    # 0: off. At least 1 (the counter moves in steps of tens of milliseconds).
    energy_s: float = 0.0


class Sanitizer(Enum):
    memcheck = "memcheck"  # compute-sanitizer (CUDA): out-of-bounds and misaligned accesses
    racecheck = "racecheck"  # compute-sanitizer: shared-memory data races
    synccheck = "synccheck"  # compute-sanitizer: barriers in divergent code
    initcheck = "initcheck"  # compute-sanitizer: reads of device memory never written
    oclgrind = "oclgrind"  # Oclgrind (OpenCL, simulated): out-of-bounds accesses, data races


@dataclass
class TrackingConfig:
    uri: str = "sqlite:///mlflow.db"  # MLflow's own local store, in the working directory
    experiment: str = "gemmlab"
    # Record the kernel's inspection (PTX, SASS, instruction mix) with every run. Once per
    # compiled program, but disassembling a new CUDA program takes about a second: the tile-shape
    # search presets turn it off, python -m runner.inspect gives the same files on demand.
    inspect: bool = True


@dataclass
class CheckConfig:
    tolerance: float = 5.0e-5  # relative Frobenius error allowed for float results
    # Above this many multiply-adds the float64 reference is computed on sampled rows and columns.
    full_reference_max_macs: int = 1 << 27
    sample_rows: int = 64
    sample_cols: int = 64
    # Run the checked launch under a correctness tool (null: none); the run then verifies and
    # reports, and times nothing (a tool slows kernels by orders of magnitude).
    sanitizer: Optional[Sanitizer] = None
    # timing.timeout_s under a tool: minutes, as racecheck ran past 60 s on a 256^3 sgemm.
    sanitizer_timeout_s: float = 600.0


@dataclass
class Config:
    backend: Any = MISSING
    kernel: KernelConfig = MISSING
    size: int = 1024  # sets M = N = K unless m, n or k is given
    m: int = II("size")
    n: int = II("size")
    k: int = II("size")
    seed: int = 0  # inputs are drawn from this seed; it is logged with the run
    # With hydra/launcher=gpus: how many GPUs the parallel jobs share, one job per GPU at a time
    # (0: no pool, backend.device as given).
    gpus: int = 0
    timing: TimingConfig = field(default_factory=TimingConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    check: CheckConfig = field(default_factory=CheckConfig)
    # Folders with the user's own kernel sources (each holding opencl/ and cuda/), searched before
    # GEMMLAB_KERNEL_PATH's and the packaged kernels: adding a kernel never means editing the
    # installed package.
    kernel_dirs: List[str] = field(default_factory=list)
    # Run the kernel in a worker process that this one supervises (time limits, Ctrl-C at once,
    # a crash costs one run). false: in this process, for a debugger; a hang or a device fault
    # then ends the whole command.
    isolate: bool = True
    # A sweep reuses only clean runs; true: one timed on a shared host/GPU or noisy too (marked).
    reuse_unclean: bool = False


# Keys outside the schema that a command adds with `+` (read with cfg.get): name -> what it does.
FLAGS = {"rerun": "a sweep measures every job again, even one measured before"}


@dataclass
class ValidSpaceSamplerConfig(SamplerConfig):
    """Optuna sampler that draws only configurations the kernel's spec accepts, each once
    (runner/sweep/valid_space.py): `override /hydra/sweeper/sampler: valid_space`."""
    _target_: str = "runner.sweep.valid_space.ValidSpaceSampler"
    _recursive_: bool = False  # the kernel is a config, not objects to build (and may hold ???)
    seed: Optional[int] = None
    n_startup_trials: int = 10  # drawn at random among the valid points, before TPE proposes
    # What the spec is checked with, as the sweep's jobs will be composed.
    kernel: Any = II("kernel")
    problem: Any = field(default_factory=lambda: {
        "M": II("m"), "N": II("n"), "K": II("k"), "backend": II("backend.name")})
    space: Any = II("hydra.sweeper.params")
    overrides: Any = II("hydra.overrides.task")


def register_configs() -> None:
    # The backends' schemas are stored outside the `backend` group, so they are not backends a
    # user can choose: conf/backend/<name>.yaml extends one with `- /<name>_schema@_here_`.
    store = ConfigStore.instance()
    store.store(name="gemmlab_schema", node=Config)
    store.store(name="opencl_schema", node=OpenCLConfig)
    store.store(name="cuda_schema", node=CUDAConfig)
    store.store(group="hydra/sweeper/sampler", name="valid_space", node=ValidSpaceSamplerConfig,
                provider="gemmlab")
