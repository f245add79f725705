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

import math
import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

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


# An energy span (timing.energy_s): how often the counter is read, the share of the span at
# each end whose readings are left out (the launches starting and draining), and the fewest
# steps of the counter inside what is left.
ENERGY_POLL_S = 0.001
ENERGY_EDGE = 0.05
ENERGY_MIN_STEPS = 3
# A span of a fast kernel is cut at this many launches (a 10 µs kernel would need 100,000 for
# a second); one that then lasts under MIN_ENERGY_SPAN_S records no energy.
ENERGY_MAX_LAUNCHES = 20000


@dataclass(frozen=True)
class EnergySpan:
    """Launches run back to back for `timing.energy_s` seconds or more, and the GPU's mean power
    over them: NVML's energy counter (the whole board, joules since the driver loaded) read
    every millisecond, its first and last step inside the span, away from its ends, divided by
    the time between them. The counter moves in steps of tens of milliseconds, so the span's
    own ends would carry a step's worth of error; between two steps the power is exact."""
    launches: int
    busy_ms: float  # device events: the first launch's start to the last one's end
    power_w: float

    @property
    def joules_per_launch(self) -> float:
        return self.power_w * self.busy_ms * 1e-3 / self.launches

    def metrics(self, prefix: str, flops: Optional[int], nbytes: int) -> dict:
        """`<prefix>power_w`, `…j_per_launch`, the sustained rate over the span and its work
        per joule (GFLOPS per watt is GFLOP per joule), the launches and the span."""
        seconds = self.busy_ms * 1e-3 / self.launches
        values = {f"{prefix}power_w": self.power_w,
                  f"{prefix}j_per_launch": self.joules_per_launch,
                  f"{prefix}launches": float(self.launches),
                  f"{prefix}span_s": self.busy_ms * 1e-3}
        if flops:
            values[f"{prefix}gflops"] = flops / seconds / 1e9
            values[f"{prefix}gflops_per_watt"] = flops / self.joules_per_launch / 1e9
        else:
            values[f"{prefix}gbps"] = nbytes / seconds / 1e9
            values[f"{prefix}gbps_per_watt"] = nbytes / self.joules_per_launch / 1e9
        return values


def energy_span(handle, run: Callable[[int], float], launch_ms: float,
                seconds: float) -> Optional[EnergySpan]:
    """`run(n)` (n launches back to back, their device-event time in ms) for at least `seconds`
    at `launch_ms` a launch, with the energy counter read beside it; None without NVML or its
    counter, for a span under MIN_ENERGY_SPAN_S, or too few steps of the counter inside it."""
    if handle is None or not seconds > 0 or not launch_ms > 0:
        return None
    import pynvml

    def counter() -> Optional[int]:
        try:
            return int(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))  # mJ
        except Exception:
            return None

    if counter() is None:
        return None
    launches = max(1, min(ENERGY_MAX_LAUNCHES, math.ceil(seconds * 1e3 / launch_ms)))
    steps: list[tuple[float, int]] = []  # (when a new value was first read, the value)
    stop = threading.Event()

    def watch() -> None:
        last = None
        while not stop.is_set():
            value, now = counter(), time.perf_counter()
            if value is not None and value != last:
                steps.append((now, value))
                last = value
            stop.wait(ENERGY_POLL_S)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    began = time.perf_counter()
    try:
        busy_ms = run(launches)
    finally:
        ended = time.perf_counter()
        stop.set()
        watcher.join(timeout=2)
    edge = ENERGY_EDGE * (ended - began)
    inside = [(when, value) for when, value in steps if began + edge <= when <= ended - edge]
    if busy_ms * 1e-3 < MIN_ENERGY_SPAN_S or len(inside) < ENERGY_MIN_STEPS:
        return None
    (first_s, first_mj), (last_s, last_mj) = inside[0], inside[-1]
    if last_s - first_s < 0.5 * (ended - began):
        return None
    return EnergySpan(launches, busy_ms, (last_mj - first_mj) * 1e-3 / (last_s - first_s))


def energy_probe(handle, seconds: float):
    """energy_span bound to a GPU and `timing.energy_s` (the EnergyProbe a baseline takes);
    None where there is nothing to measure (no NVML handle, or 0 seconds: off)."""
    if handle is None or not seconds or seconds <= 0:
        return None
    return lambda run, launch_ms: energy_span(handle, run, launch_ms, seconds)
