"""Resume and cache: a sweep skips points already measured, found in MLflow by a measurement key.

Two runs measure the same thing when they share the kernel's source (hashed), its parameters,
the size, the device and its driver, the seed, the timing and check settings and the runner's
version. Every run records that key as the tag `gemmlab.measurement_key`; a sweep job whose
key matches a finished run copies that run's results into its own record (status `cached`, tag
`gemmlab.reused_from`) instead of measuring again, unless `+rerun=true`. A sweep that was
interrupted therefore resumes where it stopped when the same command is launched again.
"""

import hashlib
import json
from typing import Optional

from runner import __version__
from runner.backends.base import Backend
from runner.backends.includes import local_includes
from runner.config.measurement import Repetitions, Warmup, check_tolerance
from runner.config.paths import kernel_source_path, kernel_source_text
from runner.config.spec import KernelPlan
from runner.errors import Refused, RunError
from runner.record import names, server
from runner.record.store import holding_signals

KEY_TAG = names.MEASUREMENT_KEY
REUSED_TAG = names.REUSED_FROM
# Tags that describe the measurement itself, copied with its metrics.
_COPIED_TAGS = (names.DEVICE_NAME, names.DEVICE_VENDOR, names.DEVICE_PLATFORM,
                names.DEVICE_DRIVER, names.DEVICE_TYPE, names.DEVICE_COMPUTE_CAPABILITY,
                names.DEVICE_INDEX, names.TIMING_LAUNCHES, names.CHECK_METHOD, names.VENDOR_NAME,
                names.VENDOR_TF32_NAME, names.REFERENCE, names.CEILING_BASIS,
                names.HOST_HYGIENE, names.GPU_HYGIENE)


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


def find_measurement(experiment_id: Optional[str], key: str, exclude_run_id: Optional[str]):
    """The newest finished run in the experiment with this measurement key, or None. None too
    where the tracking server is not answering (the job measures again rather than wait): its
    record goes to the spool (runner/record/spool.py)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = mlflow.get_tracking_uri()
    if experiment_id is None or (server.is_server(uri) and server.down(uri)):
        return None
    try:
        with holding_signals(uri):
            found = MlflowClient().search_runs(
                [experiment_id],
                filter_string=f"tags.`{KEY_TAG}` = '{key}' and attributes.status = 'FINISHED'",
                order_by=["attributes.start_time DESC"], max_results=2)
    except Exception as error:
        if not (server.is_server(uri) and server.not_answering(error)):
            raise
        server.mark_down(uri)
        return None
    return next((run for run in found if run.info.run_id != exclude_run_id), None)


def reuse(recorder, earlier) -> dict:
    """Copy an earlier measurement into the recorder's run; returns its metrics."""
    metrics = dict(earlier.data.metrics)
    recorder.metrics(metrics)
    tags = {name: earlier.data.tags[name] for name in _COPIED_TAGS if name in earlier.data.tags}
    tags[REUSED_TAG] = earlier.data.tags.get(REUSED_TAG, earlier.info.run_id)
    recorder.tags(tags)
    return metrics
