"""Device faults named in words (runner/job/faults.py), from the errors CuPy and pyopencl raise."""

from runner.errors import RunError
from runner.job.faults import describe_fault


class CUDADriverError(Exception):  # the shape of CuPy's, without needing CuPy
    pass


def test_cuda_faults_are_named():
    assert describe_fault(CUDADriverError("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory "
                                          "access was encountered")) == \
        "made an illegal memory access"
    assert describe_fault(RuntimeError("cudaErrorMisalignedAddress")) == \
        "made a misaligned memory access"


def test_a_fault_behind_a_run_error_is_found_through_its_cause():
    try:
        try:
            raise CUDADriverError("CUDA_ERROR_LAUNCH_FAILED")
        except CUDADriverError as error:
            raise RunError("the checked launch failed") from error
    except RunError as wrapped:
        assert describe_fault(wrapped) == "failed on the device (launch failure)"


def test_a_refused_launch_is_not_a_fault_but_the_same_words_from_the_driver_are():
    refused = RunError("CUDA refused to launch a 32x32 block: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
    assert describe_fault(refused) is None
    assert describe_fault(RunError("CUDA refused to launch: CUDA_ERROR_ILLEGAL_ADDRESS")) == \
        "made an illegal memory access"  # a fault left by an earlier launch
    assert "OUT_OF_RESOURCES" in describe_fault(RuntimeError(
        "clWaitForEvents failed: OUT_OF_RESOURCES"))


def test_other_errors_are_not_faults():
    assert describe_fault(ValueError("no such kernel")) is None
    assert describe_fault(RunError("matmul_2 gave a wrong result")) is None
