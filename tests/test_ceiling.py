"""runner.ceiling: its kernels compile through NVRTC without a GPU, it refuses to run without
one in a line, and on a GPU the rates it measures are plausible for the device."""

import subprocess
import sys

import pytest
from conftest import requires_cuda_gpu

from runner import ceiling
from runner.backends.cuda import CUDABackend

pytest.importorskip("cupy_backends.cuda.libs.nvrtc")  # the `cuda` extra's NVRTC


def test_ceiling_kernels_compile_for_sm_90_without_spills():
    backend = CUDABackend(require_gpu=False)
    entries = ["ffma_peak", "mma_tf32_peak", "wgmma_tf32_peak"]
    program = backend.compile(ceiling.SOURCE, "ceiling.cu", entries, {})
    for entry in entries:
        used = program.resources[entry]
        assert used.registers and used.spill_bytes == 0, program.log
    assert "mma_tf32_peak" in program.log


def _ceiling(*args):
    return subprocess.run([sys.executable, "-m", "runner.ceiling", *args],
                          capture_output=True, text=True, timeout=300)


def test_fewer_than_three_repeats_are_refused():
    done = _ceiling("--repeats", "2")
    assert done.returncode == 2 and "--repeats must be at least 3" in done.stderr


@pytest.mark.skipif(CUDABackend(require_gpu=False).has_gpu, reason="checks the no-GPU message")
def test_without_a_gpu_it_says_so_in_one_line():
    done = _ceiling()
    assert done.returncode == 1
    assert done.stderr.startswith("gemmlab: error: ") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


@pytest.mark.gpu
@requires_cuda_gpu
def test_measured_rates_are_within_the_device_limits():
    result = ceiling.measure(repeats=3)
    # The FFMA pipe cannot beat 128 lanes an SM at the clock (allowing 10% for a boost above
    # the reported clock), and a kernel of nothing but FFMAs reaches well over half of it.
    assert 0.5 * result["ffma_tflops_at_clock"] < result["ffma_tflops"] \
        < 1.1 * result["ffma_tflops_at_clock"]
    # Tensor cores do several times the FP32 SIMT rate on every GPU with TF32 mma.sync.
    assert result["mma_tf32_tflops"] > 2 * result["ffma_tflops"]
    assert result["device"] in ceiling.render(result)
    # Hopper's warpgroup product outruns mma.sync (matmul_13 beats every mma.sync step), and no
    # pipe beats the H100 SXM's 495 TFLOPS dense TF32 by more than a boost clock's margin.
    if CUDABackend().compute_capability == 90:
        assert result["mma_tf32_tflops"] < result["wgmma_tf32_tflops"] < 1.1 * 495
        assert "wgmma" in ceiling.render(result)
    else:
        assert result["wgmma_tf32_tflops"] is None
