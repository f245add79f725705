"""Every name gemmlab records in MLflow, defined once: metrics, params and tags.

The recorder writes these and every reader (the sweep's parent, the report, the seeds' tables,
the tuning page, resume) reads them, so renaming one is one edit here and a typo is a
NameError at import, not an empty column in a page. Imports nothing.
"""

# ---------------------------------------------------------------- metrics (NVBench-style)
GFLOPS = "perf/gflops"
GBPS = "bw/gbps"
PCT_OF_VENDOR = "perf/pct_of_vendor"
TIME_MS_MEDIAN = "time_ms/median"
TIME_MS_MEAN = "time_ms/mean"
TIME_MS_MIN = "time_ms/min"
TIME_MS_MAX = "time_ms/max"
TIME_MS_Q1 = "time_ms/q1"
TIME_MS_Q3 = "time_ms/q3"
# The samples behind the median: their count, and the relative half-width of the median's 95%
# interval (runner/run/timing.py, median_noise); the adaptive mode stops on the latter.
TIME_NOISE = "time/noise"
TIME_SAMPLES = "time/samples"
# The checked launch and the timing: a job's own work (its wait for its inspection left out).
KERNEL_WORK_S = "time_s/kernel_work"
VENDOR_GFLOPS = "vendor/gflops"
VENDOR_GBPS = "vendor/gbps"
VENDOR_TIME_MS_MEDIAN = "vendor/time_ms_median"
VENDOR_REL_ERROR = "vendor/rel_error"
VENDOR_TIME_NOISE = "vendor/time_noise"
VENDOR_TIME_SAMPLES = "vendor/time_samples"
CHECK_REL_ERROR = "check/rel_error"
CHECK_PASSED = "check/passed"
CHECK_ERROR_VS_VENDOR = "check/error_vs_vendor"
RESOURCE_PREFIX = "kernel/"
REGISTERS = RESOURCE_PREFIX + "registers"
SPILL_BYTES = RESOURCE_PREFIX + "spill_bytes"
SHARED_BYTES = RESOURCE_PREFIX + "shared_bytes"
# A reduced-precision (TF32) step against cuBLAS in the same mode, as well as in FP32.
VENDOR_TF32_GFLOPS = "vendor_tf32/gflops"
VENDOR_TF32_TIME_MS_MEDIAN = "vendor_tf32/time_ms_median"
VENDOR_TF32_REL_ERROR = "vendor_tf32/rel_error"
PCT_OF_VENDOR_TF32 = "perf/pct_of_vendor_tf32"
# The headline %: against the vendor library of the step's own precision (cuBLAS TF32 for a
# TF32 step; cuBLAS SGEMM for FP32 and 3xTF32; numpy SGEMM on a CPU; the device copy for
# copies), one of the two above under the name every page shows; the tag REFERENCE names it.
PCT_OF_REFERENCE = "perf/pct_of_reference"
# What the device can do at most for the step's arithmetic (runner/run/ceiling.py): the rate
# against it, and the same for a copy against the device's memory bandwidth.
CEILING_GFLOPS = "perf/ceiling_gflops"
CEILING_GBPS = "bw/ceiling_gbps"
PCT_OF_PEAK = "perf/pct_of_peak"
# The launch after the timed ones, into poisoned outputs, checked like the first: its time.
TIME_MS_CHECKED = "time_ms/checked"
# Warm-up launches taken before the timed samples (until the rate was steady).
TIME_WARMUP_LAUNCHES = "time/warmup_launches"
VENDOR_WARMUP_LAUNCHES = "vendor/warmup_launches"
# The host's CPUs during the timed launches (runner/run/host_state.py): how many cores' worth of
# CPU time other processes took, of how many.
HOST_OTHER_CPU_CORES = "host/other_cpu_cores"
HOST_CPU_CORES = "host/cpu_cores"

# The GPU's state during the timed launches, through NVML (runner/run/gpu_state.py).
# The median SM clock during the timed launches (gpu/sm_clock_mhz_min the lowest): `gemmlab
# compare` scales times by it before calling a difference SLOWER or FASTER.
GPU_SM_CLOCK_MHZ = "gpu/sm_clock_mhz"
GPU_POWER_W = "gpu/power_w"
GPU_TEMP_C = "gpu/temp_c"
GPU_ENERGY_J_PER_LAUNCH = "gpu/energy_j_per_launch"
GFLOPS_PER_WATT = "perf/gflops_per_watt"
GBPS_PER_WATT = "bw/gbps_per_watt"
VENDOR_GPU_PREFIX = "vendor_gpu/"  # the same during the baseline's launches
# Work per joule over launches run back to back for `timing.energy_s` seconds (EnergySpan in
# runner/run/gpu_state.py): the kernel's, the vendor baseline's and, for a TF32 step, cuBLAS
# TF32's, in the same job; <prefix>gflops_per_watt, power_w, j_per_launch, gflops (sustained).
ENERGY_PREFIX = "energy/"
VENDOR_ENERGY_PREFIX = "vendor_energy/"
VENDOR_TF32_ENERGY_PREFIX = "vendor_tf32_energy/"
ENERGY_GFLOPS_PER_WATT = "energy/gflops_per_watt"
ENERGY_UNKNOWN = "energy.unknown"  # why a run asked for the work per joule has none
# The kernel's work per joule over the baseline's (2.4: 2.4 times the FLOP per joule).
X_VENDOR_PER_JOULE = "perf/x_vendor_per_joule"
X_VENDOR_TF32_PER_JOULE = "perf/x_vendor_tf32_per_joule"

# A sweep's parent before series runs: the best rate per kernel (and backend), the size as the
# step (sweeps recorded before the series runs below; no longer logged).
SERIES_GFLOPS = "gflops/"
SERIES_GBPS = "gbps/"
# A sweep's series runs (tag SERIES): one run per kernel and backend, and one per reference
# library, whose best rate per square size is one history under one shared key, the size
# (M = N = K, or M = N for copies) as the step, so that MLflow draws every kernel and the
# vendor on one chart; shapes that are not square under a key of their own.
SERIES_RATE_GFLOPS = "series/gflops"
SERIES_RATE_GBPS = "series/gbps"
SERIES_ODD_SUFFIX = "_not_square"  # series/gflops_not_square: step = round((M*N*K)^(1/3))

# ---------------------------------------------------------------- params (the knobs compared)
BACKEND_NAME = "backend.name"
KERNEL_NAME = "kernel.name"
KERNEL_PARAMS_PREFIX = "kernel.params."  # + each tiling value's name: kernel.params.TS
KERNEL_MAX_REGISTERS = "kernel.max_registers"
KERNEL_SPEC_HASH = "kernel.spec_hash"
KERNEL_PRECISION = "kernel.precision"
M, N, K = "M", "N", "K"
SEED = "seed"
TIMING_WARMUP = "timing.warmup"
TIMING_REPEATS = "timing.repeats"
TIMING_FLUSH_L2 = "timing.flush_l2"
TIMING_TARGET_NOISE = "timing.target_noise"  # these three only where the adaptive mode is on
TIMING_MIN_TIME_S = "timing.min_time_s"
TIMING_MAX_TIME_S = "timing.max_time_s"
CHECK_TOLERANCE = "check.tolerance"
SWEEP_PARAM_PREFIX = "sweep."  # a sweep's parent: sweep.<key> = its values
SWEEP_EXPECTED_JOBS = "sweep.expected_jobs"

# `gemmlab compare --log`: a run of its own in the experiment COMPARE_EXPERIMENT.
COMPARE_PAIRS = "compare/pairs"
COMPARE_COUNT_PREFIX = "compare/"  # + faster, slower, same, unclear, reused: pairs of each
COMPARE_GEOMEAN_SPEEDUP = "compare/geomean_speedup"

# ---------------------------------------------------------------- artifacts
SAMPLES_ARTIFACT = "timing/samples_ms.txt"  # the kernel's timed samples, one a line
VENDOR_SAMPLES_ARTIFACT = "timing/vendor_samples_ms.txt"  # the vendor baseline's
VENDOR_TF32_SAMPLES_ARTIFACT = "timing/vendor_tf32_samples_ms.txt"

# ---------------------------------------------------------------- tags
STATUS = "gemmlab.status"  # ok, cached, refused, failed, impossible, timeout, killed
FAILURE_REASON = "failure_reason"
OPERATION = "gemmlab.operation"  # sgemm, copy, transpose
KERNEL = "gemmlab.kernel"
BACKEND = "gemmlab.backend"
COMMAND = "gemmlab.command"
GIT_COMMIT = "gemmlab.git_commit"
RUNNER_VERSION = "gemmlab.runner_version"
MEASUREMENT_KEY = "gemmlab.measurement_key"
REUSED_FROM = "gemmlab.reused_from"
# A cached run whose source was not clean (its host shared, its GPU shared or throttled, or its
# samples noisy), reused only because the command said reuse_unclean=true: why, in words.
REUSED_UNCLEAN = "gemmlab.reused_unclean"
# A sweep job measured again where an earlier run had its key but was not clean: which, and why.
NOT_REUSED = "gemmlab.not_reused"
# A run's own id, given by gemmlab as it opens the run (before the server gives it its run id):
# a record kept while the server was not answering is written once (runner/record/spool.py).
RECORD_ID = "gemmlab.record_id"
SIZE_RULE = "kernel.size_rule"
DEVICE_NAME = "device.name"
DEVICE_VENDOR = "device.vendor"
DEVICE_PLATFORM = "device.platform"
DEVICE_DRIVER = "device.driver"
DEVICE_TYPE = "device.type"
DEVICE_COMPUTE_CAPABILITY = "device.compute_capability"
DEVICE_INDEX = "device.index"
DEVICE_SELECTION = "device.selection"  # why this OpenCL device was chosen, in words
TIMING_LAUNCHES = "timing.launches"
CHECK_METHOD = "check.method"
VENDOR_NAME = "vendor.name"
VENDOR_TF32_NAME = "vendor_tf32.name"
VENDOR_DEVICE = "vendor.device"  # which device the baseline ran on
VENDOR_GPU_HYGIENE = "vendor_gpu.hygiene"
GPU_HYGIENE = "gpu.hygiene"  # clean, shared or throttled
GPU_HYGIENE_REASONS = "gpu.hygiene_reasons"
GPU_OTHER_PROCESSES = "gpu.other_processes"  # pids with a context on the GPU, busy or not
GPU_CLOCK_REASONS = "gpu.clock_reasons"  # every clocks-event reason NVML reported
HOST_HYGIENE = "host.hygiene"  # clean or shared: other processes' CPU use while timing
HOST_HYGIENE_REASONS = "host.hygiene_reasons"
CEILING_BASIS = "perf.ceiling_basis"  # how the ceiling was found, in words
REFERENCE = "perf.reference"  # the library PCT_OF_REFERENCE is against: "cuBLAS TF32"
VENDOR_UNUSABLE = "vendor.unusable"  # why no % of the vendor was recorded (a noisy baseline)
SANITIZER = "check.sanitizer"  # the tool the checked launch ran under (check.sanitizer=…)
WORKER_PID = "job.worker_pid"  # the worker process that ran the job (runner/job/)
# A job run by Slurm (hydra/launcher=slurm): where and as what it ran, from Slurm's environment.
SLURM_JOB_ID = "slurm.job_id"  # the job's own id (an array task's: <array>_<task>)
SLURM_ARRAY_JOB_ID = "slurm.array_job_id"
SLURM_ARRAY_TASK_ID = "slurm.array_task_id"
SLURM_NODE = "slurm.node"
SLURM_PARTITION = "slurm.partition"
SLURM_GPUS = "slurm.gpus"  # the GPUs Slurm gave the job (SLURM_JOB_GPUS), as it numbers them
SLURM_TAGS = (SLURM_JOB_ID, SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID, SLURM_NODE,
              SLURM_PARTITION, SLURM_GPUS)

# `gemmlab compare --log`: its runs live in an experiment of their own (never among the data a
# report reads), tagged gemmlab.compare = "true", with the two selectors and its table.
COMPARE_EXPERIMENT = "gemmlab-compare"
COMPARE = "gemmlab.compare"
COMPARE_A = "compare.a"  # params: the selectors as given, and the settings
COMPARE_B = "compare.b"
COMPARE_PAIR_BY = "compare.pair_by"
COMPARE_MIN_EFFECT = "compare.min_effect"
COMPARE_ALPHA = "compare.alpha"
COMPARE_ARTIFACT = "compare.md"

# A ceilings run (`python -m runner.ceiling --experiment …`): the device's pipes, measured.
CEILING = "gemmlab.ceiling"
CEILING_FFMA = "ceiling/ffma_tflops"
CEILING_FFMA_AT_CLOCK = "ceiling/ffma_tflops_at_clock"
CEILING_MMA_TF32 = "ceiling/mma_tf32_tflops"
CEILING_WGMMA_TF32 = "ceiling/wgmma_tf32_tflops"
CEILING_CLOCK_MHZ = "ceiling/clock_mhz"

# A sweep's parent run: gemmlab.sweep = "true", and gemmlab.sweep.<what> for the rest.
SWEEP = "gemmlab.sweep"
SWEEP_PREFIX = SWEEP + "."
SWEEP_BEST = SWEEP_PREFIX + "best"
SWEEP_SWEEPER = SWEEP_PREFIX + "sweeper"
SWEEP_LAUNCHER = SWEEP_PREFIX + "launcher"
SWEEP_OVERRIDES = SWEEP_PREFIX + "overrides"
SWEEP_DIR = SWEEP_PREFIX + "dir"
# A sweep's series run (a chart's line, never a job): gemmlab.series = "true", under the parent;
# its gemmlab.status is SERIES_STATUS, so that a reader counting jobs by status never takes it
# for a measurement. SERIES_OF says whose line it is: a kernel and backend, or a library.
SERIES = "gemmlab.series"
SERIES_OF = "gemmlab.series.of"
SERIES_STATUS = "series"

# MLflow's own tags
PARENT_RUN_ID = "mlflow.parentRunId"
RUN_NAME = "mlflow.runName"
NOTE = "mlflow.note.content"  # the run's description
EXPERIMENT_KIND = "mlflow.experimentKind"
