"""The headline reference of a run (runner/results/records.py): the vendor library of the step's
own precision, read from new records and from those made before `perf.reference`; the run name
that leads with kernel and size; and readers that never take a sweep's series runs for jobs."""

from mlflow.entities import Metric, Param, Run, RunData, RunInfo, RunTag
from mlflow.tracking import MlflowClient

from runner.record import names
from runner.results import records
from runner.results import runs as recorded


def _run(params: dict, metrics: dict, tags: dict) -> Run:
    info = RunInfo(run_id="r", experiment_id="1", user_id="", status="FINISHED",
                   start_time=1, end_time=2, lifecycle_stage="active")
    return Run(info, RunData(metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()],
                             params=[Param(k, str(v)) for k, v in params.items()],
                             tags=[RunTag(k, v) for k, v in tags.items()]))


OLD_CUDA = {"vendor.name": "cuBLAS SGEMM (CuPy, TF32 off)",
            "vendor_tf32.name": "cuBLAS TF32 (CuPy, CUBLAS_COMPUTE_32F_FAST_TF32)"}


def test_a_tf32_step_is_against_cublas_tf32_and_3xtf32_against_cublas_sgemm():
    metrics = {"perf/gflops": 397_645.0, "perf/pct_of_vendor": 770.0,
               "perf/pct_of_vendor_tf32": 98.3, "vendor/gflops": 51_600.0,
               "vendor_tf32/gflops": 404_500.0}
    tf32 = records.reference(_run({"kernel.precision": "tf32"}, metrics, OLD_CUDA))
    assert tf32 == records.Reference("cuBLAS TF32", 98.3, 404_500.0)
    assert tf32.text() == "98.3% of cuBLAS TF32"
    x3 = records.reference(_run({"kernel.precision": "tf32x3"}, metrics, OLD_CUDA))
    assert x3 == records.Reference("cuBLAS SGEMM", 770.0, 51_600.0)


def test_the_recorded_headline_wins_and_a_noisy_baseline_has_no_percent():
    new = {**OLD_CUDA, "perf.reference": "cuBLAS TF32"}
    found = records.reference(_run({"kernel.precision": "tf32"},
                                    {"perf/pct_of_reference": 97.0,
                                     "perf/pct_of_vendor_tf32": 97.0}, new))
    assert (found.name, found.pct) == ("cuBLAS TF32", 97.0)
    noisy = records.reference(_run({}, {"perf/gflops": 5.0, "vendor/gflops": 9.0},
                                    {"vendor.name": "numpy SGEMM (host BLAS)",
                                     "vendor.unusable": "noisy"}))
    assert noisy.pct is None and noisy.text() == "no % of numpy SGEMM"
    assert records.pct_cell(_run({}, {"perf/gflops": 5.0}, {"vendor.unusable": "x"})) == "—"
    assert records.reference(_run({}, {"perf/gflops": 5.0}, {})) is None  # no baseline ran


def test_copies_are_against_the_device_copy():
    copy = records.reference(_run({}, {"bw/gbps": 10.0, "vendor/gbps": 20.0,
                                       "perf/pct_of_vendor": 50.0},
                                  {"gemmlab.operation": "copy",
                                   "vendor.name": "cuda device-to-device copy"}))
    assert copy == records.Reference("device copy", 50.0, 20.0)


def test_the_run_name_leads_with_kernel_and_size():
    params = {"kernel.name": "matmul_13", "backend.name": "cuda", "M": "4096", "N": "4096",
              "K": "4096", "kernel.precision": "tf32", "kernel.params.BM": "128"}
    tags = {"perf.reference": "cuBLAS TF32", "vendor.name": "cuBLAS SGEMM",
            "gpu.hygiene": "throttled"}
    metrics = {"perf/gflops": 397_645.2, "perf/pct_of_reference": 98.3}
    words = records.headline_of(metrics, tags, params)
    assert words == "397,645 GFLOPS · 98% cuBLAS TF32 · GPU throttled"
    assert records.run_title(params, tags, words) == \
        "matmul_13 4096³ · 397,645 GFLOPS · 98% cuBLAS TF32 · GPU throttled · cuda BM=128"
    odd = {**params, "M": "4097", "N": "4095", "K": "4093"}
    assert records.run_title(odd, {}, "failed") == \
        "matmul_13 4097x4095x4093 · failed · cuda BM=128"
    assert records.run_title({}, {}, "failed") is None  # nothing recorded yet
    assert records.headline_of({"perf/gflops": 3.271}, {}, {}) == "3.27 GFLOPS"


def test_readers_leave_a_sweeps_series_runs_out(tmp_path):
    from runner.record.tracking import experiment_for

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = experiment_for(uri, "e")
    parent = client.create_run(experiment, tags={names.SWEEP: "true"}).info.run_id
    job = client.create_run(experiment, tags={names.PARENT_RUN_ID: parent,
                                              names.STATUS: "ok"}).info.run_id
    client.log_metric(job, names.GFLOPS, 1.0)
    client.create_run(experiment, tags={names.PARENT_RUN_ID: parent, names.SERIES: "true",
                                        names.STATUS: names.SERIES_STATUS})
    every = recorded.search(client, [experiment])
    assert {run.info.run_id for run in every} == {parent, job}
    assert len(recorded.search(client, [experiment], series=True)) == 3
    assert [run.info.run_id for run in recorded.load_runs(uri, "e", parent)] == [job]
    assert [run.info.run_id for run in recorded.load_runs(uri, "e")] == [job]


def test_the_printed_line_names_the_library_of_the_steps_precision():
    from types import SimpleNamespace as Fake

    from runner.terminal.summary import headline, outcome_reference

    vendor = Fake(name="cuBLAS SGEMM (CuPy, TF32 off)",
                  tf32=Fake(name="cuBLAS TF32 (CuPy, CUBLAS_COMPUTE_32F_FAST_TF32)"))
    metrics = {"perf/gflops": 397_645.0, "perf/pct_of_reference": 98.3}
    tf32 = Fake(plan=Fake(flops=1, precision="tf32"), vendor=vendor, metrics=metrics)
    assert outcome_reference(tf32).text() == "98.3% of cuBLAS TF32"
    x3 = Fake(plan=Fake(flops=1, precision="tf32x3"), vendor=vendor, metrics=metrics)
    assert outcome_reference(x3).text() == "98.3% of cuBLAS SGEMM"
    copy = Fake(plan=Fake(flops=0, precision="fp32"),
                vendor=Fake(name="opencl device-to-device copy", tf32=None), metrics={})
    assert outcome_reference(copy).text() == "no % of device copy"
    assert headline(metrics, "cuBLAS TF32") == "397,645 GFLOPS · 98% cuBLAS TF32"
