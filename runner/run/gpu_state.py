"""The state of an NVIDIA GPU while a run measures on it, through NVIDIA's own NVML bindings
(nvidia-ml-py, imported lazily): clocks, power, energy, temperature, the reasons the driver held
the clocks back, and the other processes on the GPU. Elsewhere (a CPU, another vendor, no NVML)
every value is absent, never 0.

`hygiene` sums it up: `clean`; `shared` when another process used the GPU during the
measurement (merely holding a context on it, as a parallel job's driver may, is listed but is
not counted); `throttled` when the clocks were held back for heat or by the hardware. The power
cap (SW_POWER_CAP) is recorded but is not counted as throttling: a large SGEMM runs against the
cap on an H100 as a matter of course, and so does the vendor library it is compared with.
"""

import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

SAMPLE_S = 0.01  # NVML's clock readings change every 10-100 ms
# NVML's power reading is an average over about a second, and its energy counter moves in steps
# (an H200 showed 0 J over 70 ms of SGEMM at 4096): energy and power are recorded only for a
# measurement at least this long, as the energy counter's difference over its span.
MIN_ENERGY_SPAN_S = 1.0


@dataclass
class GpuState:
    """What NVML saw over one measurement (the kernel's timed launches, or the baseline's)."""
    sm_clock_mhz: list = field(default_factory=list)
    mem_clock_mhz: list = field(default_factory=list)
    temp_c: list = field(default_factory=list)
    reasons: set = field(default_factory=set)
    energy_j: Optional[float] = None  # NVML's total-energy counter, end minus start
    span_s: float = 0.0  # how long the measurement took, host clock
    # Other processes that used the GPU's SMs or memory during the measurement (NVML's
    # per-process samples); where the driver keeps none, every other process on the GPU.
    others: set = field(default_factory=set)
    present: set = field(default_factory=set)  # every other process with a context on the GPU

    @property
    def hygiene(self) -> str:
        if self.others:
            return "shared"
        if self.reasons & THROTTLING:
            return "throttled"
        return "clean"

    def why(self) -> str:
        """The hygiene's reasons in words ("" when clean)."""
        parts = []
        if self.others:
            parts.append("other processes on the GPU: pid " +
                         ", ".join(str(pid) for pid in sorted(self.others)))
        if self.reasons & THROTTLING:
            parts.append("clocks held back: " + ", ".join(sorted(self.reasons & THROTTLING)))
        return "; ".join(parts)

    def metrics(self, prefix: str = "gpu/") -> dict:
        def median(values):
            return statistics.median(values) if values else None

        return {f"{prefix}sm_clock_mhz": median(self.sm_clock_mhz),
                f"{prefix}sm_clock_mhz_min": min(self.sm_clock_mhz, default=None),
                f"{prefix}mem_clock_mhz": median(self.mem_clock_mhz),
                f"{prefix}mem_clock_mhz_min": min(self.mem_clock_mhz, default=None),
                f"{prefix}power_w": self.power(),
                f"{prefix}temp_c": max(self.temp_c, default=None)}

    def energy(self) -> Optional[float]:
        """Joules over the measurement, where it was long enough for the counter to tell."""
        if self.energy_j is None or self.energy_j <= 0 or self.span_s < MIN_ENERGY_SPAN_S:
            return None
        return self.energy_j

    def power(self) -> Optional[float]:
        """The mean power over the measurement (its energy over its span), else None."""
        energy = self.energy()
        return None if energy is None else energy / self.span_s


# NVML's clocks-event reasons, by name (nvmlClocksEventReason*).
_REASONS = {"GpuIdle": "gpu_idle", "ApplicationsClocksSetting": "applications_clocks",
            "SwPowerCap": "sw_power_cap", "HwSlowdown": "hw_slowdown", "SyncBoost": "sync_boost",
            "SwThermalSlowdown": "sw_thermal_slowdown",
            "HwThermalSlowdown": "hw_thermal_slowdown",
            "HwPowerBrakeSlowdown": "hw_power_brake", "DisplayClockSetting": "display_clocks"}
THROTTLING = {"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake"}


def _nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # not installed, no driver, not NVIDIA: nothing to record
        return None


def nvml_handle(uuid: Optional[str], pci_bus_id: Optional[str]):
    """NVML's handle of the GPU a run measures on, found by UUID or PCI address; None where
    NVML or the GPU cannot be found."""
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        if uuid:
            return nvml.nvmlDeviceGetHandleByUUID(uuid)
        if pci_bus_id:
            return nvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
    except Exception:
        return None
    return None


class Monitor:
    """Samples a GPU in a thread while a measurement runs: `with Monitor(handle) as state:`.
    With no handle it records nothing."""

    def __init__(self, handle, own_pid: Optional[int] = None):
        self._handle = handle
        self._own = own_pid or os.getpid()
        self.state = GpuState()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> GpuState:
        if self._handle is None:
            return self.state
        self._since_us = int(time.time() * 1e6)
        self._others()
        self._energy_start = self._energy()
        self._started = time.perf_counter()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self.state

    def __exit__(self, *exc) -> None:
        if self._handle is None:
            return
        self._stop.set()
        self._thread.join(timeout=2)
        end = self._energy()
        self.state.span_s = time.perf_counter() - self._started
        if self._energy_start is not None and end is not None:
            self.state.energy_j = (end - self._energy_start) / 1000.0
        self._others()
        busy = self._busy()
        self.state.others = self.state.present if busy is None else busy

    def _energy(self) -> Optional[float]:
        import pynvml

        try:
            return float(pynvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))  # mJ
        except Exception:  # GPUs before Volta have no such counter
            return None

    def _others(self) -> None:
        import pynvml

        for query in (pynvml.nvmlDeviceGetComputeRunningProcesses,
                      pynvml.nvmlDeviceGetGraphicsRunningProcesses):
            try:
                for process in query(self._handle):
                    if process.pid != self._own:
                        self.state.present.add(process.pid)
            except Exception:  # in a container NVML may not see processes: nothing to add
                pass

    def _busy(self) -> Optional[set]:
        """Other processes with SM or memory activity since the measurement began; None where
        the driver keeps no per-process samples."""
        import pynvml

        try:
            samples = pynvml.nvmlDeviceGetProcessUtilization(self._handle, self._since_us)
        except pynvml.NVMLError as error:
            if getattr(error, "value", None) == pynvml.NVML_ERROR_NOT_FOUND:
                return set()  # no process had any activity
            return None
        return {s.pid for s in samples
                if s.pid != self._own and (s.smUtil > 0 or s.memUtil > 0)}

    def _sample(self) -> None:
        import pynvml

        state, handle = self.state, self._handle
        while not self._stop.is_set():
            try:
                state.sm_clock_mhz.append(pynvml.nvmlDeviceGetClockInfo(handle,
                                                                       pynvml.NVML_CLOCK_SM))
                state.mem_clock_mhz.append(pynvml.nvmlDeviceGetClockInfo(handle,
                                                                        pynvml.NVML_CLOCK_MEM))
                state.temp_c.append(pynvml.nvmlDeviceGetTemperature(handle,
                                                                   pynvml.NVML_TEMPERATURE_GPU))
                mask = pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
                for name, label in _REASONS.items():
                    if mask & getattr(pynvml, f"nvmlClocksEventReason{name}", 0):
                        state.reasons.add(label)
            except Exception:
                return
            self._stop.wait(SAMPLE_S)
