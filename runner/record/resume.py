"""Resume and cache: a sweep skips points already measured, found in MLflow by a measurement key.

Two runs measure the same thing when they share the kernel's source (hashed), its parameters,
the size, the device and its driver, the seed, the timing and check settings and the runner's
version. Every run records that key as the tag `gemmlab.measurement_key`; a sweep job whose
key matches a finished run copies that run's results into its own record (status `cached`, tag
`gemmlab.reused_from`) instead of measuring again, unless `+rerun=true`. A sweep that was
interrupted therefore resumes where it stopped when the same command is launched again.

A cached run carries its source's caveats: its host's and GPU's hygiene with their reasons, and
its samples' noise (a metric, copied with the rest). A measurement that was not clean (its host
shared, its GPU shared or throttled, its median not known to within NOISE_LIMIT: records.unclean)
is not reused unasked: the job measures again (tag `gemmlab.not_reused`), unless the command
says `reuse_unclean=true`, and then the copy says so (tag `gemmlab.reused_unclean`).
"""

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Optional

from runner import __version__
from runner.backends.base import Backend
from runner.backends.includes import local_includes
from runner.config.measurement import Repetitions, Warmup, check_tolerance
from runner.config.paths import kernel_source_path, kernel_source_text
from runner.config.spec import KernelPlan
from runner.errors import Refused, RunError
from runner.record import names, server
from runner.record.store import holding_signals
from runner.results.records import unclean

KEY_TAG = names.MEASUREMENT_KEY
REUSED_TAG = names.REUSED_FROM
# Tags that describe the measurement itself, copied with its metrics.
_COPIED_TAGS = (names.DEVICE_NAME, names.DEVICE_VENDOR, names.DEVICE_PLATFORM,
                names.DEVICE_DRIVER, names.DEVICE_TYPE, names.DEVICE_COMPUTE_CAPABILITY,
                names.DEVICE_INDEX, names.TIMING_LAUNCHES, names.CHECK_METHOD, names.VENDOR_NAME,
                names.VENDOR_TF32_NAME, names.REFERENCE, names.CEILING_BASIS,
                names.HOST_HYGIENE, names.HOST_HYGIENE_REASONS, names.GPU_HYGIENE,
                names.GPU_HYGIENE_REASONS, names.GPU_CLOCK_REASONS, names.GPU_OTHER_PROCESSES,
                names.VENDOR_GPU_HYGIENE, names.VENDOR_UNUSABLE)
# The finished runs of one key looked through for a clean one, newest first.
_LOOKED_AT = 20


def measurement_key(cfg, backend: Backend, plan: KernelPlan) -> Optional[str]:
    """The key of what this run would measure, or None when its source cannot be read."""
    try:
        path = kernel_source_path(backend.name, getattr(cfg.kernel.sources, backend.name),
                                  cfg.kernel_dirs)
    except RunError:
        return None  # the run itself says why, when it compiles
    device = backend.device_info()
    identity = {
        "backend": backend.name, "device": device.name, "platform": device.platform,
        "driver": device.driver, "kernel": plan.name,
        "source_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "params": dict(plan.params), "max_registers": plan.max_registers,
        "size": plan.size.as_names(), "seed": cfg.seed,
        # Fixed repeats keep the key they always had; the adaptive settings join it when on.
        "timing": [*Warmup.of(cfg.timing).key(), *Repetitions.of(cfg.timing).key(),
                   cfg.timing.flush_l2],
        "check": [check_tolerance(cfg), cfg.check.full_reference_max_macs,
                  cfg.check.sample_rows, cfg.check.sample_cols],
        "runner": __version__,
    }
    energy_s = float(cfg.timing.get("energy_s", 0.0) or 0.0)
    if energy_s:  # a run asked for its work per joule measures more: no earlier run stands in
        identity["energy_s"] = energy_s
    if plan.extra_defines:  # left out when there are none, so earlier keys still match
        identity["defines"] = dict(plan.extra_defines)
    if plan.scalars:
        identity["scalars"] = plan.scalars
    try:
        source = kernel_source_text(path, plan.include_first.get(backend.name, ()))
    except Refused:
        return None  # the run itself says why, when it compiles
    headers = local_includes(source, path.parent)
    if headers:  # the files beside the source that it includes are part of what is measured
        identity["headers_sha256"] = {included.name: hashlib.sha256(included.read_bytes())
                                      .hexdigest() for included in headers}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Earlier:
    """What a sweep job found measured before under its key: `run` to reuse (None: measure),
    `unclean` why it was not clean where it is reused only as asked; or, where the job measures
    again because the newest such run was not clean, that run (`passed_over`) and why."""
    run: Any = None
    unclean: str = ""
    passed_over: Any = None

    @property
    def why_measured_again(self) -> str:
        """`run 1a2b3c4d… measured it, not clean: host shared (…); measured again
        (reuse_unclean=true reuses such a run)`, or "" where nothing was passed over."""
        if self.passed_over is None:
            return ""
        return (f"run {self.passed_over.info.run_id[:8]}… measured it, not clean: "
                f"{self.unclean}; measured again (reuse_unclean=true reuses such a run)")


def find_measurement(experiment_id: Optional[str], key: str, exclude_run_id: Optional[str],
                     reuse_unclean: bool = False) -> Earlier:
    """The newest clean finished run in the experiment with this measurement key; where every
    such run was not clean (records.unclean), the newest of them, reused only with
    `reuse_unclean`, else named as passed over. Nothing (Earlier()) where none has the key, or
    where the tracking server is not answering (the job measures again rather than wait): its
    record goes to the spool (runner/record/spool.py)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = mlflow.get_tracking_uri()
    if experiment_id is None or (server.is_server(uri) and server.down(uri)):
        return Earlier()
    try:
        with holding_signals(uri):
            found = MlflowClient().search_runs(
                [experiment_id],
                filter_string=f"tags.`{KEY_TAG}` = '{key}' and attributes.status = 'FINISHED'",
                order_by=["attributes.start_time DESC"], max_results=_LOOKED_AT)
    except Exception as error:
        if not (server.is_server(uri) and server.not_answering(error)):
            raise
        server.mark_down(uri)
        return Earlier()
    found = [run for run in found if run.info.run_id != exclude_run_id]
    for run in found:
        if not unclean(run.data.metrics, run.data.tags):
            return Earlier(run)
    if not found:
        return Earlier()
    why = unclean(found[0].data.metrics, found[0].data.tags)
    return Earlier(found[0], why) if reuse_unclean else Earlier(unclean=why, passed_over=found[0])


def reuse(recorder, earlier: Earlier) -> tuple[dict, dict]:
    """Copy an earlier measurement into the recorder's run, its caveats with it (and, where it
    was not clean, that it was reused as asked); returns its metrics and the tags copied."""
    source = earlier.run
    metrics = dict(source.data.metrics)
    recorder.metrics(metrics)
    tags = {name: source.data.tags[name] for name in _COPIED_TAGS if name in source.data.tags}
    tags[REUSED_TAG] = source.data.tags.get(REUSED_TAG, source.info.run_id)
    if earlier.unclean:
        tags[names.REUSED_UNCLEAN] = f"{earlier.unclean}; reused as asked (reuse_unclean=true)"
    recorder.tags(tags)
    return metrics, tags
