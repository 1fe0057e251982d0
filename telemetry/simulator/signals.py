"""Vectorised metric generation: the whole fleet, one time chunk at a time.

Every series is a numpy array over (host, component, step); nothing loops over
samples. Chunks cover at most one UTC day (one partition per insert) and carry
state across chunk edges: counter values, first-order lags (temperatures) and
the last reboot.

Levels (H100 SXM, HGX 8-GPU host):

* ``gpu.power`` idle ~70 W; busy 70 + (640..690 - 70) x the job's intensity,
  +6..10% during heavy phases, ~35% intensity while a checkpoint is written,
  ~120 W while a hung job spins in NCCL.
* ``gpu.temp`` follows power and inlet air through a 2-minute lag:
  inlet + 6 + 0.072 C/W (idle ~30-35 C, busy ~65-78 C); ``gpu.mem_temp`` +5 C.
* ``gpu.sm_clock`` 1980 MHz busy, 345 MHz idle, lowered while throttled.
* ``gpu.util`` ~97% busy, ~30% during checkpoints, 100% in a hang, 0 idle.
* ``nvlink.tx_bytes`` ~120 GB/s x intensity; backend ``net.rx_bytes``/``tx_bytes``
  ~22 GB/s per 400G NIC during collectives; frontend NICs and ``nvme0n1`` carry
  the checkpoint bursts (GB/s) and data loading.
* Error counters (ECC, PCIe replay, NVLink CRC, symbol errors) are flat with
  rare single increments; ``net.fec_corrected`` counts a few bits per second.
* Counters only go up and reset to 0 when the host reboots.
* Hosts without a job idle; hosts out of service emit nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.signal import lfilter

from telemetry.simulator.topology import BACKEND_NICS, DISKS, FANS, FRONTEND_NICS, GPUS, NVSWITCHES, PSUS


@dataclass
class Injection:
    """One precursor signal applied to the data (from a failure or a false alarm)."""
    host: int
    comp: int  # index within the metric's component set
    metric: str
    shape: str
    onset: int  # first step showing it
    end: int  # first step no longer showing it
    lo: float = 0.0
    hi: float = 0.0
    flap_steps: tuple[int, ...] = ()
    job: int = -1  # job index for "slowdown"


@dataclass
class Timeline:
    """Per host-step facts from the scheduler, rendered for a chunk."""
    job: np.ndarray  # int32 (H, T), -1 idle
    up: np.ndarray  # bool (H, T)
    reboot: np.ndarray  # bool (H, T): first step after a reboot
    intensity: np.ndarray  # float (H, T) 0..1 share of busy GPU power
    ckpt: np.ndarray  # bool (H, T)
    hang: np.ndarray  # bool (H, T)
    step_time: np.ndarray  # float (H, T), nan when no step finishes


# (metric, component set name) in emission order
SERIES: list[tuple[str, str]] = [
    ("gpu.util", "gpu"), ("gpu.power", "gpu"), ("gpu.temp", "gpu"), ("gpu.mem_temp", "gpu"),
    ("gpu.sm_clock", "gpu"), ("gpu.throttle.thermal_ns", "gpu"), ("gpu.ecc.dram_sbe_volatile", "gpu"),
    ("gpu.ecc.sram_sbe_volatile", "gpu"), ("gpu.row_remap.pending", "gpu"), ("gpu.pcie.replay", "gpu"),
    ("gpu.pcie.correctable_errors", "gpu"), ("nvlink.crc_flit_errors", "gpu"), ("nvlink.replay_errors", "gpu"),
    ("nvlink.tx_bytes", "gpu"),
    ("nvswitch.temp", "nvswitch"),
    ("net.rx_bytes", "backend"), ("net.tx_bytes", "backend"), ("net.symbol_errors", "backend"),
    ("net.fec_corrected", "backend"), ("net.link_down", "backend"), ("net.nic_temp", "backend"),
    ("net.rx_bytes", "frontend"), ("net.tx_bytes", "frontend"),
    ("power.psu_input_power", "psu"), ("power.psu_status", "psu"),
    ("cooling.fan_rpm", "fan"),
    ("cooling.inlet_temp", "host"), ("cooling.outlet_temp", "host"), ("power.node_input_power", "host"),
    ("host.cpu_util", "host"), ("host.boot_time", "host"), ("job.step_time_s", "host"),
    ("storage.write_bytes", "disk"), ("storage.read_bytes", "disk"),
]
COMPONENT_SETS: dict[str, list[str]] = {
    "gpu": GPUS, "nvswitch": NVSWITCHES, "backend": BACKEND_NICS, "frontend": FRONTEND_NICS, "psu": PSUS,
    "fan": FANS, "host": [""], "disk": DISKS,
}
COUNTERS = {
    "gpu.throttle.thermal_ns", "gpu.ecc.dram_sbe_volatile", "gpu.ecc.sram_sbe_volatile", "gpu.pcie.replay",
    "gpu.pcie.correctable_errors", "nvlink.crc_flit_errors", "nvlink.replay_errors", "nvlink.tx_bytes",
    "net.rx_bytes", "net.tx_bytes", "net.symbol_errors", "net.fec_corrected", "net.link_down",
    "storage.write_bytes", "storage.read_bytes",
}
# rare background increments per step-minute (healthy hardware is not perfectly clean)
BACKGROUND_PER_MIN = {
    "gpu.ecc.dram_sbe_volatile": 2e-4, "gpu.ecc.sram_sbe_volatile": 5e-5, "gpu.pcie.replay": 3e-4,
    "gpu.pcie.correctable_errors": 2e-4, "nvlink.crc_flit_errors": 2e-4, "nvlink.replay_errors": 1e-4,
    "net.symbol_errors": 1e-4,
}
TEMP_TAU_S = 120.0


@dataclass
class FleetState:
    """What carries over from one chunk to the next."""
    counters: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    lags: dict[str, np.ndarray] = field(default_factory=dict)
    boot_time_s: np.ndarray | None = None


class SignalGenerator:
    def __init__(self, n_hosts: int, interval_s: float, start_s: float, seed: int, injections: list[Injection]):
        self.H = n_hosts
        self.dt = interval_s
        self.start_s = start_s  # epoch seconds of step 0
        self.seed = seed
        self.injections = injections
        rng = np.random.default_rng([seed, 7])
        H = n_hosts
        # fixed per-part personalities
        self.gpu_busy_w = rng.uniform(640, 690, (H, 8))
        self.gpu_temp_off = rng.normal(0, 2.0, (H, 8))
        self.rack_inlet = np.repeat(rng.uniform(20.5, 25.0, -(-H // 4)), 4)[:H]
        self.nic_temp_off = rng.normal(0, 1.5, (H, 8))
        self.fec_rate = np.exp(rng.uniform(np.log(0.5), np.log(5), (H, 8)))  # corrected bits/s, healthy links
        self.fan_off = rng.normal(0, 150, (H, 6))
        self.state = FleetState()
        self.state.boot_time_s = start_s - rng.uniform(5, 90, H) * 86400
        self.counter_init = {}
        for metric, cset in SERIES:
            if metric in COUNTERS:
                C = len(COMPONENT_SETS[cset])
                big = metric.endswith("_bytes") or metric == "nvlink.tx_bytes"
                scale = 5e13 if big else (1e9 * 3600 if metric.endswith("_ns") else 0)
                init = rng.uniform(0.1, 1.0, (H, C)) * scale
                if metric == "net.fec_corrected":
                    init = rng.uniform(1e5, 5e6, (H, C))
                self.counter_init[(metric, cset)] = np.floor(init)

    # -- helpers -------------------------------------------------------------------------------------
    def _lag(self, key: str, x: np.ndarray) -> np.ndarray:
        a = 1.0 - np.exp(-self.dt / TEMP_TAU_S)
        prev = self.state.lags.get(key)
        if prev is None:
            prev = x[..., 0]
        zi = ((1 - a) * prev)[..., None]
        y, zf = lfilter([a], [1.0, -(1.0 - a)], x, axis=-1, zi=zi)
        self.state.lags[key] = y[..., -1]
        return y

    def _counter(self, key: tuple[str, str], inc: np.ndarray, tl: Timeline) -> np.ndarray:
        """Cumulate increments (H, C, T) into a counter that resets to 0 at reboots."""
        carry = self.state.counters.get(key)
        if carry is None:
            carry = self.counter_init[key]
        inc = np.where(tl.up[:, None, :], inc, 0.0)
        cum = carry[..., None] + np.cumsum(inc, axis=-1)
        before = cum - inc  # value just before this step's increment
        marks = np.where(tl.reboot[:, None, :], before, 0.0)
        base = np.maximum.accumulate(marks, axis=-1)
        out = cum - base
        self.state.counters[key] = out[..., -1]
        return out

    def _apply(self, metric: str, cset: str, arr: np.ndarray, k0: int, k1: int, rng, is_counter: bool) -> None:
        """Add the injections on this (metric, set) to arr (H, C, T) in place (counters: increments)."""
        for inj in self.injections:
            if inj.metric != metric or inj.onset >= k1 or inj.end <= k0:
                continue
            if component_set_for(inj) != cset:
                continue
            a, b = max(inj.onset, k0), min(inj.end, k1)
            sl = slice(a - k0, b - k0)
            steps = np.arange(a, b)
            frac = (steps - inj.onset) / max(1, inj.end - inj.onset)
            row = arr[inj.host, inj.comp]
            if inj.shape == "counter_ramp":
                per_step = inj.lo * (inj.hi / inj.lo) ** frac * self.dt / 60.0
                add = rng.poisson(per_step) + (steps == inj.onset) * max(3.0, inj.lo)
                row[sl] += np.maximum(add, 0)
            elif inj.shape == "throttle":
                row[sl] += (inj.lo + (inj.hi - inj.lo) * frac) * self.dt * 1e9
            elif inj.shape == "flag":
                row[sl] = 1.0
            elif inj.shape == "gauge_offset":
                row[sl] += inj.lo + (inj.hi - inj.lo) * frac
            elif inj.shape == "gauge_level":
                row[sl] = rng.uniform(inj.lo, inj.hi, b - a)
            elif inj.shape == "slowdown":
                row[sl] += inj.lo
            elif inj.shape == "flaps":
                idx = [s - k0 for s in inj.flap_steps if k0 <= s < k1]
                if is_counter:
                    row[idx] += 1.0
                else:
                    row[idx] = 0.0

    # -- the chunk -----------------------------------------------------------------------------------
    def chunk(self, k0: int, k1: int, tl: Timeline):
        """Yield (metric, cset, values (H, C, T)) for steps [k0, k1)."""
        rng = np.random.default_rng([self.seed, 11, k0])
        H, T, dt = self.H, k1 - k0, self.dt
        t_s = self.start_s + np.arange(k0, k1) * dt
        busy = (tl.job >= 0) & tl.up
        inten = np.where(busy, tl.intensity, 0.0)
        ck, hang = tl.ckpt & busy, tl.hang & busy

        def noise(shape, sd):
            return rng.standard_normal(shape) * sd

        # power and utilisation follow the jobs
        load = np.where(ck, 0.35, inten)[:, None, :] * np.ones((1, 8, 1))
        power = 70 + (self.gpu_busy_w[..., None] - 70) * load + noise((H, 8, T), 1.0) * np.where(busy, 14, 2.5)[:, None, :]
        power = np.where(hang[:, None, :], 118 + noise((H, 8, T), 4), power)
        power = np.clip(power, 55, 700)
        util = np.where(busy, np.where(ck, 30 + noise((H, T), 8), 97 + noise((H, T), 1.5)), 0.0)
        util = np.where(hang, 100.0, util)
        util = np.clip(util[:, None, :] + noise((H, 8, T), 0.8) * busy[:, None, :], 0, 100)

        diurnal = 1.2 * np.sin(2 * np.pi * ((t_s % 86400) / 86400 - 0.375))
        inlet = self.rack_inlet[:, None] + diurnal[None, :] + noise((H, T), 0.15)
        temp_x = inlet[:, None, :] + 6 + 0.072 * power + self.gpu_temp_off[..., None]
        temp = self._lag("gpu.temp", temp_x)
        self._apply("gpu.temp", "gpu", temp, k0, k1, rng, False)
        temp = temp + noise((H, 8, T), 0.3)
        thr_inc = np.zeros((H, 8, T))
        self._apply("gpu.throttle.thermal_ns", "gpu", thr_inc, k0, k1, rng, True)
        thr_frac = thr_inc / (dt * 1e9)
        clock = np.where(busy[:, None, :], 1980 - np.abs(noise((H, 8, T), 12)), 345.0) * (1 - 0.6 * thr_frac)

        yield "gpu.util", "gpu", np.round(util, 1)
        yield "gpu.power", "gpu", np.round(power, 2)
        yield "gpu.temp", "gpu", np.round(temp)
        yield "gpu.mem_temp", "gpu", np.round(temp + 5 + noise((H, 8, T), 0.3))
        yield "gpu.sm_clock", "gpu", np.round(clock / 15) * 15
        yield "gpu.throttle.thermal_ns", "gpu", self._counter(("gpu.throttle.thermal_ns", "gpu"), thr_inc, tl)
        for metric in ("gpu.ecc.dram_sbe_volatile", "gpu.ecc.sram_sbe_volatile"):
            inc = (rng.random((H, 8, T)) < BACKGROUND_PER_MIN[metric] * dt / 60).astype(float)
            self._apply(metric, "gpu", inc, k0, k1, rng, True)
            yield metric, "gpu", self._counter((metric, "gpu"), inc, tl)
        pending = np.zeros((H, 8, T))
        self._apply("gpu.row_remap.pending", "gpu", pending, k0, k1, rng, False)
        yield "gpu.row_remap.pending", "gpu", pending
        for metric in ("gpu.pcie.replay", "gpu.pcie.correctable_errors", "nvlink.crc_flit_errors",
                       "nvlink.replay_errors"):
            inc = (rng.random((H, 8, T)) < BACKGROUND_PER_MIN[metric] * dt / 60).astype(float)
            self._apply(metric, "gpu", inc, k0, k1, rng, True)
            yield metric, "gpu", self._counter((metric, "gpu"), inc, tl)
        nvl = np.floor(np.where(busy, 1.2e11 * np.where(ck, 0.1, inten), 1e5)[:, None, :] * dt
                       * (1 + noise((H, 8, T), 0.03)).clip(0))
        yield "nvlink.tx_bytes", "gpu", self._counter(("nvlink.tx_bytes", "gpu"), nvl, tl)

        sw = self._lag("nvswitch.temp", np.repeat((36 + 16 * load[:, :4, :]).mean(axis=1, keepdims=True), 4, 1))
        yield "nvswitch.temp", "nvswitch", np.round(sw + noise((H, 4, T), 0.4))

        coll = np.where(busy & ~ck & ~hang, inten / 0.9, 0.0)
        for metric in ("net.rx_bytes", "net.tx_bytes"):
            rate = np.where(busy, 2.2e10 * coll, 2e5)[:, None, :] * (1 + noise((H, 8, T), 0.05)).clip(0)
            yield metric, "backend", self._counter((metric, "backend"), np.floor(rate * dt), tl)
        inc = (rng.random((H, 8, T)) < BACKGROUND_PER_MIN["net.symbol_errors"] * dt / 60).astype(float)
        self._apply("net.symbol_errors", "backend", inc, k0, k1, rng, True)
        yield "net.symbol_errors", "backend", self._counter(("net.symbol_errors", "backend"), inc, tl)
        inc = rng.poisson(self.fec_rate[..., None] * dt, (H, 8, T)).astype(float)
        self._apply("net.fec_corrected", "backend", inc, k0, k1, rng, True)
        yield "net.fec_corrected", "backend", self._counter(("net.fec_corrected", "backend"), inc, tl)
        inc = np.zeros((H, 8, T))
        self._apply("net.link_down", "backend", inc, k0, k1, rng, True)
        yield "net.link_down", "backend", self._counter(("net.link_down", "backend"), inc, tl)
        nic_t = 46 + self.nic_temp_off[..., None] + 5 * busy[:, None, :] + noise((H, 8, T), 0.5)
        self._apply("net.nic_temp", "backend", nic_t, k0, k1, rng, False)
        yield "net.nic_temp", "backend", np.round(nic_t)

        fe_tx = np.where(ck, 3.0e9, np.where(busy, 2e7, 1e5))[:, None, :] * (1 + noise((H, 2, T), 0.1)).clip(0)
        fe_rx = np.where(busy, 1.5e8, 1e5)[:, None, :] * (1 + noise((H, 2, T), 0.1)).clip(0)
        yield "net.rx_bytes", "frontend", self._counter(("net.rx_bytes", "frontend"), np.floor(fe_rx * dt), tl)
        yield "net.tx_bytes", "frontend", self._counter(("net.tx_bytes", "frontend"), np.floor(fe_tx * dt), tl)

        node = power.sum(axis=1) + 1400 + 500 * busy + noise((H, T), 25)
        status = np.ones((H, 6, T))
        self._apply("power.psu_status", "psu", status, k0, k1, rng, False)
        n_ok = status.sum(axis=1).clip(1)
        psu = np.where(status > 0, (node / 0.96 / n_ok)[:, None, :], 0.0) + noise((H, 6, T), 12) * status
        yield "power.psu_input_power", "psu", np.round(psu, 1)
        yield "power.psu_status", "psu", status

        tmean = temp.mean(axis=1)
        fan = 5200 + 6500 * np.clip((tmean - 33) / 45, 0, 1)[:, None, :] + self.fan_off[..., None] \
            + noise((H, 6, T), 60)
        self._apply("cooling.fan_rpm", "fan", fan, k0, k1, rng, False)
        yield "cooling.fan_rpm", "fan", np.round(fan)

        yield "cooling.inlet_temp", "host", np.round(inlet, 1)[:, None, :]
        yield "cooling.outlet_temp", "host", np.round(inlet + 6 + 14 * node / 10000 + noise((H, T), 0.2), 1)[:, None, :]
        yield "power.node_input_power", "host", np.round(node / 0.96, 1)[:, None, :]
        cpu = np.where(busy, np.where(ck, 55, 28), 3) + noise((H, T), 2)
        yield "host.cpu_util", "host", np.round(np.clip(cpu, 0, 100), 1)[:, None, :]
        last = self.state.boot_time_s.copy()
        marks = np.where(tl.reboot, t_s[None, :], -np.inf)
        boot = np.maximum(np.maximum.accumulate(marks, axis=1), last[:, None])
        self.state.boot_time_s = boot[:, -1]
        yield "host.boot_time", "host", boot[:, None, :]
        step = tl.step_time.copy()
        step = step * (1 + noise((H, T), 0.015))
        slow = np.zeros((H, 1, T))
        self._apply("job.step_time_s", "host", slow, k0, k1, rng, False)
        step = step * (1 + slow[:, 0, :])
        yield "job.step_time_s", "host", np.round(step, 3)[:, None, :]

        wr = np.where(ck, 2.0e9, np.where(busy, 5e6, 1e4))[:, None, :] * (1 + noise((H, 1, T), 0.1)).clip(0)
        rd = np.where(busy & ~ck, 2.5e8, 1e4)[:, None, :] * (1 + noise((H, 1, T), 0.1)).clip(0)
        yield "storage.write_bytes", "disk", self._counter(("storage.write_bytes", "disk"), np.floor(wr * dt), tl)
        yield "storage.read_bytes", "disk", self._counter(("storage.read_bytes", "disk"), np.floor(rd * dt), tl)


def component_set_for(inj: Injection) -> str:
    if inj.metric == "job.step_time_s":
        return "host"
    for metric, cset in SERIES:
        if metric == inj.metric:
            return cset
    raise KeyError(inj.metric)
