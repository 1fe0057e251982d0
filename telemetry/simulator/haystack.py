"""Vectorised metrics of the ``realistic`` scenario: the haystack the signal scan must search.

About 160 catalog metrics on every layer of an HGX H100 host (per GPU, per NVLink link, per
NVSwitch, per backend port with its RDMA and IB port counters, frontend NICs, PSUs, fans, the
NVMe, the CPU sockets, node_exporter host metrics and the job's own health), each a numpy array
over (host, component, step) for one time chunk, with state carried across chunks.

What makes it hard, on purpose:

* **Workload drives most of it.** Power, clocks, utilisation, activity ratios, NVLink/PCIe/
  network traffic, congestion counters (ECN, CNP, pause, xmit_wait), CPU, memory, disk and
  pressure follow each job's intensity, its own mix (tensor/DRAM share, step time), checkpoints,
  heavy phases and hangs. Temperatures follow power and inlet air through their own lags (the
  HBM has its own thermal path: memory temperature is not GPU temperature plus a constant).
  Inlet air has a per-rack level, diurnal amplitude and phase, and a slow drift.
* **Healthy parts have error personalities.** Every error counter of every part draws a rate from
  a heavy-tailed mix: most parts see ~0.01-0.3 events a day, 2 % trickle 10-1,000 a day for the
  whole run and never fail. Increments come in bursts (a geometric number of events per burst).
  Counters start at totals consistent with uptime (volatile counters since the last boot,
  aggregate counters over the part's life) and reset to 0 when the host reboots.
* **Vendor-normal levels.** FEC corrected bits 10^3-10^6 bits/s per 400G PAM4 link; power capped
  by the 700 W limit through clocks (``gpu.throttle.power_ns`` grows on busy GPUs), with instant
  readings above the limit; SM clocks vary continuously under the power cap; idle values wander.
* **Background trouble with no failure.** Thermal throttling on hot GPUs on warm afternoons, link
  flaps (``net.link_down``, ``net.carrier_changes``, ``ib.link_downed``), XIDs (the planner emits
  those as events), OOM kills.

Precursors and false alarms are ``Effect``s the planner (``telemetry.simulator.realistic``)
places; ``apply_effects`` adds them to the arrays of their metric.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.signal import lfilter

from telemetry import catalog
from telemetry.simulator.signals import Timeline
from telemetry.simulator.topology import BACKEND_NICS, DISKS, FANS, FRONTEND_NICS, GPUS, NVSWITCHES, PSUS

NVLINKS_PER_GPU = 18
NVLINKS = [f"{g}/nvlink{k}" for g in GPUS for k in range(NVLINKS_PER_GPU)]
CPUS = ["cpu0", "cpu1"]

COMPONENT_SETS: dict[str, list[str]] = {
    "gpu": GPUS, "nvlink": NVLINKS, "nvswitch": NVSWITCHES, "backend": BACKEND_NICS, "frontend": FRONTEND_NICS,
    "psu": PSUS, "fan": FANS, "disk": DISKS, "cpu": CPUS, "host": [""],
}

# (metric, component set), in emission order. Every name is a catalog metric (checked below).
SERIES: list[tuple[str, str]] = [(m, "gpu") for m in (
    "gpu.util", "gpu.sm_active", "gpu.sm_occupancy", "gpu.tensor_active", "gpu.dram_active", "gpu.fp16_active",
    "gpu.fp32_active", "gpu.gr_engine_active", "gpu.mem_copy_util", "gpu.power", "gpu.power_instant",
    "gpu.energy", "gpu.power_limit_enforced", "gpu.temp", "gpu.mem_temp", "gpu.temp_margin", "gpu.sm_clock",
    "gpu.mem_clock", "gpu.clock_event_reasons", "gpu.fb_used", "gpu.fb_free", "gpu.fb_reserved", "gpu.fb_used_ratio",
    "gpu.pcie.tx_rate", "gpu.pcie.rx_rate", "gpu.pcie.link_width", "gpu.throttle.power_ns",
    "gpu.throttle.thermal_ns", "gpu.throttle.sync_boost_ns", "gpu.throttle.low_util_ns",
    "gpu.clock_event.sw_power_cap_ns", "gpu.clock_event.sw_thermal_ns", "gpu.clock_event.hw_thermal_ns",
    "gpu.clock_event.hw_power_brake_ns", "gpu.ecc.dram_sbe_volatile", "gpu.ecc.sram_sbe_volatile",
    "gpu.ecc.sbe_volatile", "gpu.ecc.sbe_aggregate", "gpu.ecc.dbe_volatile", "gpu.retired_pages.sbe",
    "gpu.row_remap.correctable", "gpu.row_remap.uncorrectable", "gpu.row_remap.pending", "gpu.xid_count",
    "gpu.pcie.replay", "gpu.pcie.correctable_errors", "nvlink.replay_errors", "nvlink.recovery_errors",
    "nvlink.crc_data_errors", "nvlink.tx_bytes", "nvlink.rx_bytes",
)] + [("nvlink.crc_flit_errors", "nvlink")] + [(m, "nvswitch") for m in (
    "nvswitch.temp", "nvswitch.power_vdd", "nvswitch.power_dvdd", "nvswitch.power_hvdd", "nvswitch.voltage", "nvswitch.tx_throughput",
    "nvswitch.rx_throughput", "nvswitch.link_replay_errors", "nvswitch.link_crc_errors",
    "nvswitch.link_recovery_errors",
)] + [(m, "backend") for m in (
    "net.rx_bytes", "net.tx_bytes", "net.rx_packets", "net.tx_packets", "net.symbol_errors", "net.fec_corrected",
    "net.link_down", "net.carrier_changes", "net.rx_pause", "net.tx_pause", "net.ecn_marked", "net.cnp_sent",
    "net.cnp_handled", "net.cnp_ignored", "net.out_of_sequence", "net.local_ack_timeouts", "net.implied_nak_seq_errors",
    "net.adp_retrans", "net.rx_discards", "net.tx_discards", "net.nic_temp", "ib.port_xmit_discards",
    "ib.symbol_errors", "ib.link_downed", "ib.link_error_recovery", "ib.port_rcv_errors", "ib.port_xmit_wait",
    "ib.port_xmit_data", "ib.port_rcv_data",
)] + [(m, "frontend") for m in (
    "net.if_rx_bytes", "net.if_tx_bytes", "net.if_rx_drops", "net.if_rx_errors", "net.nic_temp",
)] + [(m, "psu") for m in (
    "power.psu_input_power", "power.psu_output_power", "power.psu_input_voltage", "power.psu_status",
)] + [("cooling.fan_rpm", "fan"), ("cooling.fan_alarm", "fan")] + [(m, "disk") for m in (
    "storage.read_bytes", "storage.write_bytes", "storage.reads", "storage.writes", "storage.read_time_s",
    "storage.write_time_s", "storage.io_time_s", "storage.io_weighted_time_s", "storage.io_in_progress",
    "storage.nvme_media_errors", "storage.nvme_percent_used", "storage.fs_avail_bytes",
)] + [(m, "cpu") for m in (
    "host.cpu_util", "host.cpu_seconds", "host.cpu_temp", "host.cpu_power", "power.rapl_package_energy",
    "power.rapl_dram_energy",
)] + [(m, "host") for m in (
    "cooling.inlet_temp", "cooling.outlet_temp", "cooling.coolant_supply_temp", "cooling.coolant_flow",
    "power.node_input_power", "host.mem_total_bytes", "host.mem_hw_corrupted_bytes", "host.gpu_count",
    "host.edac_uncorrectable", "host.pressure_irq_stalled_s", "job.nccl_timeouts", "job.restarts",
    "storage.checkpoint_write_throughput",
    "power.sensor_power", "power.sensor_power_avg", "power.sensor_energy", "host.load1", "host.load5",
    "host.load15", "host.mem_available_bytes", "host.oom_kills", "host.boot_time", "host.sensor_temp",
    "host.thermal_zone_temp", "host.edac_correctable", "host.pressure_cpu_waiting_s", "host.pressure_io_waiting_s",
    "host.pressure_io_stalled_s", "host.pressure_memory_waiting_s", "host.pressure_memory_stalled_s",
    "storage.fs_op_latency_s", "job.step_time_s", "job.throughput", "job.mfu", "job.dataloader_wait_s",
    "job.last_progress_age_s",
)]
_unknown = [m for m, _ in SERIES if not catalog.is_known(m)]
assert not _unknown, f"haystack metrics missing from the catalog: {_unknown}"
COUNTERS = {m for m, _ in SERIES if catalog.get(m).is_counter}

# Error counters with a per-part "personality" (events per day), by family: the parts of one
# family share a personality (a marginal HBM stack shows in every ECC counter of its GPU).
ERROR_FAMILY = {
    "gpu.ecc.dram_sbe_volatile": "hbm", "gpu.ecc.sram_sbe_volatile": "sram", "gpu.pcie.replay": "pcie",
    "gpu.pcie.correctable_errors": "pcie", "nvlink.replay_errors": "nvl", "nvlink.recovery_errors": "nvl",
    "nvlink.crc_data_errors": "nvl", "nvlink.crc_flit_errors": "link", "nvswitch.link_replay_errors": "nvs",
    "nvswitch.link_crc_errors": "nvs", "nvswitch.link_recovery_errors": "nvs", "net.symbol_errors": "phy",
    "ib.symbol_errors": "phy", "ib.link_error_recovery": "phy", "ib.port_rcv_errors": "phy",
    "net.out_of_sequence": "rdma", "net.local_ack_timeouts": "rdma", "net.rx_discards": "rdma",
    "net.tx_discards": "rdma", "ib.port_xmit_discards": "rdma", "net.implied_nak_seq_errors": "rdma",
    "net.adp_retrans": "rdma",
    "storage.nvme_media_errors": "nvme", "host.edac_correctable": "edac", "net.if_rx_errors": "fe",
    "net.if_rx_drops": "fe",
}
# relative rate of each metric within its family
FAMILY_SCALE = {
    "gpu.pcie.correctable_errors": 0.4, "nvlink.recovery_errors": 0.1, "nvlink.crc_data_errors": 0.3,
    "nvswitch.link_crc_errors": 0.5, "nvswitch.link_recovery_errors": 0.05, "ib.symbol_errors": 1.0,
    "ib.link_error_recovery": 0.02, "ib.port_rcv_errors": 0.3, "net.local_ack_timeouts": 0.3,
    "net.rx_discards": 2.0, "net.tx_discards": 0.5, "ib.port_xmit_discards": 0.5, "net.implied_nak_seq_errors": 0.2,
    "net.adp_retrans": 0.4, "storage.nvme_media_errors": 0.01, "net.if_rx_drops": 20.0,
}
NOISY_SHARE = 0.02  # parts that trickle 10..1,000 events a day and never fail
TEMP_TAU_S, MEM_TAU_S, FAN_TAU_S = 150.0, 420.0, 60.0
POWER_LIMIT_W = 700.0


@dataclass
class Effect:
    """One injected signal on one part: a precursor or a false alarm (from the planner).

    kind: ``rate`` (counter events per day at full envelope), ``multiply`` (a counter's
    background rate times ``magnitude``), ``offset`` (a gauge plus ``magnitude``), ``level``
    (a gauge pulled to ``magnitude`` times its value), ``flag`` (a 0/1 gauge set), ``steps``
    (a counter +1 at the listed steps; a gauge 0 at them), ``throttle`` (share of each
    interval throttled).
    shape: ``ramp`` (rises ~30x to a peak at ``peak``, then stays), ``plateau``, ``intermittent``
    (on only in ``bursts``), ``decay`` (falls off with time constant ``tau_steps``).
    """
    host: int
    comp: int
    metric: str
    cset: str
    kind: str
    shape: str
    onset: int
    end: int
    magnitude: float
    peak: int = 0
    bursts: tuple[tuple[int, int], ...] = ()
    steps: tuple[int, ...] = ()
    tau_steps: float = 1.0
    burst_size: float = 1.0


def envelope(e: Effect, k: np.ndarray) -> np.ndarray:
    if e.shape == "ramp":
        span = max(1, e.peak - e.onset)
        x = np.clip((k - e.onset) / span, 0.0, 1.0)
        return np.exp(np.log(30.0) * (x - 1.0))
    if e.shape == "intermittent":
        out = np.full(len(k), 0.03)
        for a, b in e.bursts:
            out[(k >= a) & (k < b)] = 1.0
        return out
    if e.shape == "decay":
        return np.exp(-(k - e.onset) / max(1.0, e.tau_steps))
    return np.ones(len(k))


@dataclass
class _State:
    counters: dict = field(default_factory=dict)
    lags: dict = field(default_factory=dict)
    boot_time_s: np.ndarray | None = None
    load_avg: np.ndarray | None = None


def _lognormal_personality(rng, shape, noisy_share=NOISY_SHARE):
    """Events per day: most parts ~0.01-0.3, ``noisy_share`` of them 10-1,000 (log-uniform)."""
    base = 10 ** rng.normal(-1.3, 0.6, shape)
    noisy = rng.random(shape) < noisy_share
    return np.where(noisy, 10 ** rng.uniform(1.0, 3.0, shape), base), noisy


class Haystack:
    def __init__(self, n_hosts: int, interval_s: float, start_s: float, seed: int, jobs, effects: list[Effect],
                 rack_of: np.ndarray):
        self.H, self.dt, self.start_s, self.seed = n_hosts, float(interval_s), start_s, seed
        rng = np.random.default_rng([seed, 107])
        H = n_hosts
        self.effects: dict[tuple[str, str], list[Effect]] = {}
        for e in effects:
            self.effects.setdefault((e.metric, e.cset), []).append(e)
        # per-job workload mix (index = position in the job list; -1 idle)
        J = len(jobs) + 1
        jr = np.random.default_rng([seed, 108])
        self.job_tensor = np.append(jr.uniform(0.35, 0.75, J - 1), 0.0)
        self.job_dram = np.append(jr.uniform(0.2, 0.55, J - 1), 0.0)
        self.job_fb = np.append(jr.uniform(52_000, 79_500, J - 1), 600.0)
        self.job_cpu = np.append(jr.uniform(12, 45, J - 1), 2.0)
        self.job_net = np.append(jr.uniform(0.4, 1.0, J - 1), 0.0)
        self.job_tokens = np.append(jr.uniform(2e5, 4e6, J - 1), 0.0)
        self.job_loader = np.append(10 ** jr.normal(-1.5, 0.5, J - 1), 0.0)
        # parts
        self.gpu_demand = rng.uniform(0.93, 1.08, (H, 8))  # busy power demand / limit at full intensity
        self.gpu_r = rng.normal(0.062, 0.005, (H, 8))  # C per W
        self.gpu_toff = rng.normal(0, 1.8, (H, 8))
        self.mem_r = rng.normal(0.045, 0.006, (H, 8))
        self.mem_off = rng.normal(0, 3.0, (H, 8))
        self.gpu_idle_w = rng.uniform(62, 78, (H, 8))
        self.clock_bin = rng.normal(0, 20, (H, 8))
        self.nic_toff = rng.normal(0, 2.0, (H, 10))
        self.fan_off = rng.normal(0, 180, (H, 6))
        self.nvs_off = rng.normal(0, 1.5, (H, 4))
        self.psu_share = rng.normal(1.0, 0.04, (H, 6))
        self.cpu_toff = rng.normal(0, 3, (H, 2))
        n_racks = int(rack_of.max()) + 1
        self.rack_of = rack_of
        self.rack_inlet = rng.uniform(19.0, 26.0, n_racks)
        self.rack_amp = rng.uniform(0.4, 2.6, n_racks)
        self.rack_phase = rng.uniform(0, 2 * np.pi, n_racks)
        self.rack_drift = rng.uniform(0.2, 1.0, n_racks)
        self.rack_drift_period = rng.uniform(2.5, 9.0, n_racks) * 86400
        # FEC corrected bits/s of a healthy 400G PAM4 link: 10^3..10^6
        self.fec_bps = 10 ** np.clip(rng.normal(4.3, 0.75, (H, 8)), 3.0, 6.0)
        self.flap_rate = np.where(rng.random((H, 8)) < 0.05, 10 ** rng.uniform(-1, 0.3, (H, 8)),
                                  10 ** rng.normal(-2.3, 0.4, (H, 8)))  # flaps per day
        self.oom_rate = 10 ** rng.normal(-2.5, 0.5, H)
        # error personalities per family and part
        self.personality: dict[tuple[str, str], np.ndarray] = {}
        self.noisy: dict[tuple[str, str], np.ndarray] = {}
        fam_cache: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
        for metric, cset in SERIES:
            fam = ERROR_FAMILY.get(metric)
            if fam is None:
                continue
            C = len(COMPONENT_SETS[cset])
            if (fam, cset) not in fam_cache:
                fam_cache[(fam, cset)] = _lognormal_personality(rng, (H, C))
            rate, noisy = fam_cache[(fam, cset)]
            self.personality[(metric, cset)] = rate * FAMILY_SCALE.get(metric, 1.0) * rng.lognormal(0, 0.3, (H, C))
            self.noisy[(metric, cset)] = noisy
        self.burst_mean = {k: 1.0 + rng.exponential(1.5, v.shape) for k, v in self.personality.items()}
        # uptime at the start; part ages for lifetime counters
        self.state = _State()
        uptime = rng.uniform(5, 90, H) * 86400
        self.state.boot_time_s = start_s - uptime
        age_days = rng.uniform(200, 1100, H)
        self.init: dict[tuple[str, str], np.ndarray] = {}
        for metric, cset in SERIES:
            if metric not in COUNTERS:
                continue
            C = len(COMPONENT_SETS[cset])
            key = (metric, cset)
            days = (uptime / 86400)[:, None] * np.ones((1, C))
            if key in self.personality:
                lam = self.personality[key] * days / self.burst_mean[key]
                self.init[key] = rng.poisson(lam) * self.burst_mean[key]
            elif metric == "gpu.ecc.sbe_aggregate":
                continue  # derived below from the volatile ones plus the part's life
            else:
                # traffic/energy/time counters: uptime x a typical rate, with spread
                self.init[key] = np.floor(days * 86400 * _TYPICAL_RATE.get(metric, 1.0) * rng.uniform(0.3, 0.9, (H, C)))
        life = age_days[:, None] * np.ones((1, 8))
        self.init[("gpu.ecc.sbe_aggregate", "gpu")] = np.floor(
            (self.personality[("gpu.ecc.dram_sbe_volatile", "gpu")] + self.personality[("gpu.ecc.sram_sbe_volatile", "gpu")])
            * life * rng.uniform(0.5, 1.0, (H, 8)))
        self.init[("gpu.retired_pages.sbe", "gpu")] = np.floor(self.init[("gpu.ecc.sbe_aggregate", "gpu")] / 4000)
        self.init[("gpu.row_remap.correctable", "gpu")] = np.floor(self.init[("gpu.ecc.sbe_aggregate", "gpu")] / 2500)
        self.fs_used = rng.uniform(0.3, 0.7, H)
        self.flow = rng.uniform(11.0, 14.5, H)
        self.nvme_wear = rng.uniform(1, 12, H)

    # -- helpers -----------------------------------------------------------------------------------
    def _lag(self, key: str, x: np.ndarray, tau_s: float) -> np.ndarray:
        a = 1.0 - np.exp(-self.dt / tau_s)
        prev = self.state.lags.get(key)
        if prev is None:
            prev = x[..., 0]
        y, _ = lfilter([a], [1.0, -(1.0 - a)], x, axis=-1, zi=((1 - a) * prev)[..., None])
        self.state.lags[key] = y[..., -1]
        return y

    def _counter(self, key, inc: np.ndarray, tl: Timeline) -> np.ndarray:
        carry = self.state.counters.get(key)
        if carry is None:
            carry = self.init.get(key, np.zeros(inc.shape[:2]))
        inc = np.where(tl.up[:, None, :], inc, 0.0)
        cum = carry[..., None] + np.cumsum(inc, axis=-1)
        if key[0] in _LIFETIME:  # lifetime counters survive reboots
            self.state.counters[key] = cum[..., -1]
            return cum
        before = cum - inc
        marks = np.where(tl.reboot[:, None, :], before, 0.0)
        out = cum - np.maximum.accumulate(marks, axis=-1)
        self.state.counters[key] = out[..., -1]
        return out

    def _bursty(self, rng, key, per_day: np.ndarray, T: int) -> np.ndarray:
        """Counter increments per step from a rate in events/day (H, C): bursts of geometric size."""
        mean = np.broadcast_to(np.asarray(self.burst_mean.get(key, 1.0), float), per_day.shape)
        lam = (per_day / mean * (self.dt / 86400.0))[..., None]
        k = rng.poisson(np.broadcast_to(lam, per_day.shape + (T,)))
        out = k.astype(float)
        nz = k > 0
        if nz.any():
            p = np.broadcast_to((1.0 / mean)[..., None], k.shape)[nz]
            out[nz] += rng.negative_binomial(k[nz], p)
        return out

    def _apply(self, metric, cset, arr, k0, k1, rng, T, tl: Timeline | None = None):
        for e in self.effects.get((metric, cset), ()):
            if e.onset >= k1 or e.end <= k0:
                continue
            a, b = max(e.onset, k0), min(e.end, k1)
            k = np.arange(a, b)
            env = envelope(e, k)
            row = arr[e.host, e.comp, a - k0:b - k0]
            if e.kind == "rate":
                lam = e.magnitude * env * self.dt / 86400.0 / e.burst_size
                n = rng.poisson(lam)
                n = n + np.where(n > 0, rng.negative_binomial(np.maximum(n, 1), 1.0 / e.burst_size), 0)
                row += n
            elif e.kind == "multiply":
                base = self.fec_bps[e.host, e.comp] if metric == "net.fec_corrected" else 1.0
                row += rng.poisson(base * (e.magnitude - 1.0) * env * self.dt)
            elif e.kind == "offset":
                row += e.magnitude * env
            elif e.kind == "level":
                row *= np.where(env > 0.5, e.magnitude, 1.0)
            elif e.kind == "flag":
                row[:] = 1.0
            elif e.kind == "throttle":
                row += np.clip(e.magnitude * env, 0, 1) * self.dt * 1e9
            elif e.kind == "steps":
                idx = [s - k0 for s in e.steps if a <= s < b]
                if metric in COUNTERS:
                    np.add.at(arr[e.host, e.comp], idx, 1.0)
                else:
                    arr[e.host, e.comp, idx] = 0.0

    def effects_on(self, metric: str, cset: str) -> bool:
        return bool(self.effects.get((metric, cset)))

    # -- the chunk -----------------------------------------------------------------------------------
    def chunk(self, k0: int, k1: int, tl: Timeline):
        """Yield (metric, cset, values (H, C, T)) for steps [k0, k1)."""
        rng = np.random.default_rng([self.seed, 111, k0])
        H, T, dt = self.H, k1 - k0, self.dt
        t_s = self.start_s + np.arange(k0, k1) * dt
        up = tl.up
        busy = (tl.job >= 0) & up
        jidx = np.where(busy, tl.job, -1)
        inten = np.where(busy, tl.intensity, 0.0)
        ck, hang = tl.ckpt & busy, tl.hang & busy
        N = lambda shape, sd=1.0: rng.standard_normal(shape) * sd  # noqa: E731

        def emit_counter(metric, cset, inc):
            self._apply(metric, cset, inc, k0, k1, rng, T)
            return metric, cset, self._counter((metric, cset), inc, tl)

        def errors(metric, cset, extra=None):
            key = (metric, cset)
            inc = self._bursty(rng, key, self.personality[key], T)
            if extra is not None:
                inc = inc + extra
            return emit_counter(metric, cset, inc)

        # ---- workload
        load = np.where(ck, 0.3, inten)  # share of full compute
        load = np.where(hang, 0.06, load)
        # brief idle activity: health checks, monitoring (idle values are not constants)
        blip = (~busy) & (rng.random((H, T)) < 0.04)
        gl = load[:, None, :] * (1 + N((H, 8, T), 0.015)) + blip[:, None, :] * rng.uniform(0.02, 0.12, (H, 1, T))
        gl = np.clip(gl, 0, 1.05)
        tensor = self.job_tensor[jidx][:, None, :]
        dram = self.job_dram[jidx][:, None, :]

        # ---- power, clocks, throttling
        demand = self.gpu_idle_w[..., None] + (POWER_LIMIT_W * self.gpu_demand[..., None] - self.gpu_idle_w[..., None]) * gl
        demand = demand * (1 + N((H, 8, T), 0.02) * busy[:, None, :])
        demand = np.where(hang[:, None, :], 105 + N((H, 8, T), 6), demand)
        over = np.clip((demand - POWER_LIMIT_W) / POWER_LIMIT_W, 0, None)
        cap_frac = np.clip(over * 8 + (demand > 0.97 * POWER_LIMIT_W) * rng.uniform(0.0, 0.25, (H, 8, T)), 0, 1)
        power = np.minimum(demand, POWER_LIMIT_W - np.abs(N((H, 8, T), 4)) * (demand > POWER_LIMIT_W))
        power = power + N((H, 8, T), 1.5)
        power_inst = power + np.abs(N((H, 8, T), 1.0)) * np.where(busy[:, None, :], 25, 3)
        inlet_base = (self.rack_inlet[self.rack_of][:, None]
                      + self.rack_amp[self.rack_of][:, None] * np.sin(2 * np.pi * (t_s[None, :] % 86400) / 86400
                                                                       + self.rack_phase[self.rack_of][:, None])
                      + self.rack_drift[self.rack_of][:, None] * np.sin(2 * np.pi * t_s[None, :]
                                                                        / self.rack_drift_period[self.rack_of][:, None]))
        inlet = inlet_base + N((H, T), 0.2)
        temp_x = inlet[:, None, :] + 7 + self.gpu_r[..., None] * power + self.gpu_toff[..., None]
        self._apply("gpu.temp", "gpu", temp_x, k0, k1, rng, T)
        temp = self._lag("gpu.temp", temp_x, TEMP_TAU_S) + N((H, 8, T), 0.35)
        mem_x = inlet[:, None, :] + 11 + self.mem_off[..., None] + self.mem_r[..., None] * power * (0.55 + dram) \
            + 0.3 * (temp_x - inlet[:, None, :] - 7 - self.gpu_r[..., None] * power - self.gpu_toff[..., None])
        mem_temp = self._lag("gpu.mem_temp", mem_x, MEM_TAU_S) + N((H, 8, T), 0.5)
        hot = np.clip((temp - 83) / 6, 0, 1) * (rng.random((H, 8, T)) < 0.7)
        thermal = np.zeros((H, 8, T))
        self._apply("gpu.throttle.thermal_ns", "gpu", thermal, k0, k1, rng, T)
        thermal_frac = np.clip(thermal / (dt * 1e9) + hot * rng.uniform(0.05, 0.4, (H, 8, T)), 0, 1)
        thermal = thermal_frac * dt * 1e9
        clock = np.where(busy[:, None, :], 1980 - 380 * cap_frac - 500 * thermal_frac + self.clock_bin[..., None] * cap_frac,
                         np.where(gl > 0.01, 1755 - 600 * rng.random((H, 8, T)), 345 + 0 * gl))
        clock = np.clip(np.round(clock / 15) * 15, 210, 1980)
        reasons = (np.where(~busy[:, None, :] & (gl < 0.01), 1, 0) + np.where(cap_frac > 0.05, 4, 0)
                   + np.where(thermal_frac > 0.05, 32, 0) + np.where(busy[:, None, :] & (cap_frac <= 0.05), 0, 0))

        util = np.where(busy[:, None, :], np.clip(np.where(ck[:, None, :], 25 + N((H, 8, T), 10),
                                                           99 - np.abs(N((H, 8, T), 2.5))), 0, 100), 100 * gl * 2)
        util = np.where(hang[:, None, :], 100.0, util)
        sm_active = np.clip(util / 100 * np.where(busy[:, None, :], 0.93, 0.5) + N((H, 8, T), 0.01), 0, 1)
        yield "gpu.util", "gpu", np.round(np.clip(util, 0, 100))
        yield "gpu.sm_active", "gpu", np.round(sm_active, 3)
        yield "gpu.sm_occupancy", "gpu", np.round(sm_active * np.where(busy[:, None, :], 0.45, 0.2)
                                                   * (1 + N((H, 8, T), 0.04)), 3)
        yield "gpu.tensor_active", "gpu", np.round(np.clip(sm_active * tensor * (1 + N((H, 8, T), 0.05)), 0, 1), 3)
        yield "gpu.dram_active", "gpu", np.round(np.clip(sm_active * dram * (1 + N((H, 8, T), 0.05)), 0, 1), 3)
        yield "gpu.fp16_active", "gpu", np.round(np.clip(sm_active * tensor * 0.08 * (1 + N((H, 8, T), 0.1)), 0, 1), 4)
        yield "gpu.fp32_active", "gpu", np.round(np.clip(sm_active * 0.05 * (1 + N((H, 8, T), 0.1)), 0, 1), 4)
        yield "gpu.gr_engine_active", "gpu", np.round(np.clip(sm_active * 1.04, 0, 1), 3)
        yield "gpu.mem_copy_util", "gpu", np.round(np.clip(util * dram * 0.6 + N((H, 8, T), 1), 0, 100))
        yield "gpu.power", "gpu", np.round(power, 2)
        yield "gpu.power_instant", "gpu", np.round(power_inst, 2)
        yield emit_counter("gpu.energy", "gpu", np.floor(power * dt))
        yield "gpu.power_limit_enforced", "gpu", np.full((H, 8, T), POWER_LIMIT_W)
        yield "gpu.temp", "gpu", np.round(temp)
        yield "gpu.mem_temp", "gpu", np.round(mem_temp)
        yield "gpu.temp_margin", "gpu", np.round(87 - temp)
        yield "gpu.sm_clock", "gpu", clock
        yield "gpu.mem_clock", "gpu", np.where(busy[:, None, :] | (gl > 0.01), 2619.0, 1593.0) + 0 * clock
        yield "gpu.clock_event_reasons", "gpu", reasons.astype(float)
        fb = self.job_fb[jidx][:, None, :] * (1 + N((H, 8, T), 0.004)) * busy[:, None, :] + \
            (~busy)[:, None, :] * (520 + 90 * rng.random((H, 8, T)))
        fb = np.round(np.clip(fb, 0, 81_559))
        yield "gpu.fb_used", "gpu", fb
        yield "gpu.fb_free", "gpu", 81_559 - fb
        yield "gpu.fb_reserved", "gpu", np.round(418 + 6 * busy[:, None, :] + N((H, 8, T), 0.4))
        yield "gpu.fb_used_ratio", "gpu", np.round(fb / 81_559, 4)
        io = np.where(ck, 0.2, 1.0)[:, None, :] * busy[:, None, :]
        yield "gpu.pcie.tx_rate", "gpu", np.round(np.clip((2e8 * io + 6e9 * ck[:, None, :]) * (1 + N((H, 8, T), 0.3)), 0, None))
        yield "gpu.pcie.rx_rate", "gpu", np.round(np.clip((1.5e9 * io * self.job_loader[jidx][:, None, :] * 20 + 2e6)
                                                          * (1 + N((H, 8, T), 0.3)), 0, None))
        width = np.full((H, 8, T), 16.0)
        self._apply("gpu.pcie.link_width", "gpu", width, k0, k1, rng, T)
        yield "gpu.pcie.link_width", "gpu", width
        yield emit_counter("gpu.throttle.power_ns", "gpu", np.floor(cap_frac * dt * 1e9))
        yield "gpu.throttle.thermal_ns", "gpu", self._counter(("gpu.throttle.thermal_ns", "gpu"), np.floor(thermal), tl)
        yield emit_counter("gpu.throttle.sync_boost_ns", "gpu",
                           np.floor(busy[:, None, :] * rng.exponential(0.004, (H, 8, T)) * dt * 1e9))
        yield emit_counter("gpu.throttle.low_util_ns", "gpu", np.floor((~busy)[:, None, :] * (1 - gl) * dt * 1e9))
        yield emit_counter("gpu.clock_event.sw_power_cap_ns", "gpu", np.floor(cap_frac * dt * 1e9))
        yield emit_counter("gpu.clock_event.sw_thermal_ns", "gpu", np.floor(thermal * 0.8))
        yield emit_counter("gpu.clock_event.hw_thermal_ns", "gpu", np.floor(thermal * (temp > 88) * 0.3))
        brake = (rng.random((H, 8, T)) < 2e-4 * busy[:, None, :]) * rng.uniform(0.01, 0.2, (H, 8, T))
        yield emit_counter("gpu.clock_event.hw_power_brake_ns", "gpu", np.floor(brake * dt * 1e9))

        # ---- memory errors (the volatile and aggregate totals include the DRAM and SRAM ones)
        m1, c1, dram_v = errors("gpu.ecc.dram_sbe_volatile", "gpu")
        m2, c2, sram_v = errors("gpu.ecc.sram_sbe_volatile", "gpu")
        yield m1, c1, dram_v
        yield m2, c2, sram_v
        d_inc = np.diff(np.concatenate([self._prev("dram", dram_v), dram_v], axis=-1), axis=-1).clip(0)
        s_inc = np.diff(np.concatenate([self._prev("sram", sram_v), sram_v], axis=-1), axis=-1).clip(0)
        sbe_inc = d_inc + s_inc
        yield emit_counter("gpu.ecc.sbe_volatile", "gpu", sbe_inc)
        yield emit_counter("gpu.ecc.sbe_aggregate", "gpu", sbe_inc.copy())
        yield emit_counter("gpu.ecc.dbe_volatile", "gpu", np.zeros((H, 8, T)))
        yield emit_counter("gpu.retired_pages.sbe", "gpu", (rng.random((H, 8, T)) < d_inc / 4000).astype(float))
        yield emit_counter("gpu.row_remap.correctable", "gpu", (rng.random((H, 8, T)) < d_inc / 2500).astype(float))
        yield emit_counter("gpu.row_remap.uncorrectable", "gpu", np.zeros((H, 8, T)))
        pending = np.zeros((H, 8, T))
        self._apply("gpu.row_remap.pending", "gpu", pending, k0, k1, rng, T)
        yield "gpu.row_remap.pending", "gpu", pending
        yield emit_counter("gpu.xid_count", "gpu", np.zeros((H, 8, T)))  # the planner's XIDs, as "steps" effects
        yield errors("gpu.pcie.replay", "gpu")
        yield errors("gpu.pcie.correctable_errors", "gpu")
        for metric in ("nvlink.replay_errors", "nvlink.recovery_errors", "nvlink.crc_data_errors"):
            yield errors(metric, "gpu")
        nvl = np.floor(np.clip(1.1e11 * np.where(busy, np.where(ck, 0.05, inten), 0.0)[:, None, :]
                               * (1 + N((H, 8, T), 0.03)) + 2e5, 0, None) * dt)
        yield emit_counter("nvlink.tx_bytes", "gpu", nvl)
        yield emit_counter("nvlink.rx_bytes", "gpu", np.floor(nvl * (1 + N((H, 8, T), 0.01))).clip(0))
        yield errors("nvlink.crc_flit_errors", "nvlink")

        # ---- NVSwitch
        sw_load = gl.mean(axis=1, keepdims=True)
        nvs_x = inlet[:, None, :] + 14 + 22 * sw_load + self.nvs_off[..., None]
        yield "nvswitch.temp", "nvswitch", np.round(self._lag("nvswitch.temp", nvs_x, TEMP_TAU_S)
                                                     + N((H, 4, T), 0.4))
        yield "nvswitch.power_vdd", "nvswitch", np.round(38 + 42 * np.repeat(sw_load, 4, 1) + N((H, 4, T), 1.2), 1)
        yield "nvswitch.power_dvdd", "nvswitch", np.round(11 + 9 * np.repeat(sw_load, 4, 1) + N((H, 4, T), 0.5), 1)
        yield "nvswitch.power_hvdd", "nvswitch", np.round(6.5 + 4 * np.repeat(sw_load, 4, 1) + N((H, 4, T), 0.3), 1)
        yield "nvswitch.voltage", "nvswitch", np.round(845 - 12 * np.repeat(sw_load, 4, 1) + N((H, 4, T), 2.0))
        thr = np.floor(np.repeat(nvl.sum(axis=1, keepdims=True) / 4 / 1024, 4, 1) * (1 + N((H, 4, T), 0.02))).clip(0)
        yield emit_counter("nvswitch.tx_throughput", "nvswitch", thr)
        yield emit_counter("nvswitch.rx_throughput", "nvswitch", np.floor(thr * (1 + N((H, 4, T), 0.01))).clip(0))
        for metric in ("nvswitch.link_replay_errors", "nvswitch.link_crc_errors", "nvswitch.link_recovery_errors"):
            yield errors(metric, "nvswitch")

        # ---- backend network (RoCE / IB port counters), per 400G port
        coll = np.where(busy & ~ck & ~hang, inten * self.job_net[jidx], 0.0)
        rate = (4.6e10 * coll)[:, None, :] * (1 + N((H, 8, T), 0.06)).clip(0) + 3e3
        rx = np.floor(rate * dt)
        tx = np.floor(rate * dt * (1 + N((H, 8, T), 0.01))).clip(0)
        yield emit_counter("net.rx_bytes", "backend", rx)
        yield emit_counter("net.tx_bytes", "backend", tx)
        yield emit_counter("net.rx_packets", "backend", np.floor(rx / 4096 * (1 + N((H, 8, T), 0.02))).clip(0))
        yield emit_counter("net.tx_packets", "backend", np.floor(tx / 4096 * (1 + N((H, 8, T), 0.02))).clip(0))
        phy_key = ("net.symbol_errors", "backend")
        sym = self._bursty(rng, phy_key, self.personality[phy_key], T)
        self._apply("net.symbol_errors", "backend", sym, k0, k1, rng, T)
        yield "net.symbol_errors", "backend", self._counter(phy_key, sym, tl)
        fec = rng.poisson(self.fec_bps[..., None] * dt * np.exp(N((H, 8, 1), 0.25)), (H, 8, T)).astype(float)
        yield emit_counter("net.fec_corrected", "backend", fec)
        flaps = rng.poisson(self.flap_rate[..., None] * dt / 86400, (H, 8, T)).astype(float)
        self._apply("net.link_down", "backend", flaps, k0, k1, rng, T)
        yield "net.link_down", "backend", self._counter(("net.link_down", "backend"), flaps, tl)
        yield "net.carrier_changes", "backend", self._counter(("net.carrier_changes", "backend"), 2 * flaps, tl)
        cong = coll[:, None, :] * np.exp(N((H, 8, T), 1.0))  # incast bursts: heavy-tailed
        yield emit_counter("net.rx_pause", "backend", np.floor(cong * rng.exponential(2e3, (H, 8, T))))
        yield emit_counter("net.tx_pause", "backend", np.floor(cong * rng.exponential(8e2, (H, 8, T))))
        ecn = np.floor(cong * rng.exponential(5e4, (H, 8, T)))
        yield emit_counter("net.ecn_marked", "backend", ecn)
        yield emit_counter("net.cnp_sent", "backend", np.floor(ecn * 0.6))
        yield emit_counter("net.cnp_handled", "backend", np.floor(ecn * rng.uniform(0.4, 0.7, (H, 8, T))))
        yield emit_counter("net.cnp_ignored", "backend", np.floor(ecn * rng.uniform(0.0, 0.02, (H, 8, T))))
        for metric in ("net.out_of_sequence", "net.local_ack_timeouts", "net.implied_nak_seq_errors", "net.adp_retrans",
                       "net.rx_discards", "net.tx_discards", "ib.port_xmit_discards"):
            key = (metric, "backend")
            extra = self._bursty(rng, key, self.personality[key] * 3 * coll.mean(), T) if metric == "net.rx_discards" else None
            yield errors(metric, "backend", extra)
        nic_t = 52 + self.nic_toff[:, :8, None] + 0.25 * (inlet[:, None, :] - 22) + 9 * coll[:, None, :] + N((H, 8, T), 0.6)
        self._apply("net.nic_temp", "backend", nic_t, k0, k1, rng, T)
        yield "net.nic_temp", "backend", np.round(nic_t)
        ib_sym = sym + self._bursty(rng, ("ib.symbol_errors", "backend"), self.personality[("ib.symbol_errors", "backend")], T)
        yield emit_counter("ib.symbol_errors", "backend", ib_sym)
        yield emit_counter("ib.link_downed", "backend", flaps.copy())
        yield errors("ib.link_error_recovery", "backend", flaps.copy())
        yield errors("ib.port_rcv_errors", "backend", np.floor(sym * 0.5))
        yield emit_counter("ib.port_xmit_wait", "backend", np.floor(cong * rng.exponential(3e6, (H, 8, T))))
        yield emit_counter("ib.port_xmit_data", "backend", tx.copy())
        yield emit_counter("ib.port_rcv_data", "backend", rx.copy())

        # ---- frontend NICs: storage traffic, checkpoints
        fe_tx = (np.where(ck, 2.4e9, np.where(busy, 1.5e7, 4e4))[:, None, :] * np.exp(N((H, 2, T), 0.3)))
        fe_rx = (np.where(busy, 1.2e8 * (1 + 30 * self.job_loader[jidx]), 4e4)[:, None, :] * np.exp(N((H, 2, T), 0.3)))
        yield emit_counter("net.if_rx_bytes", "frontend", np.floor(fe_rx * dt))
        yield emit_counter("net.if_tx_bytes", "frontend", np.floor(fe_tx * dt))
        yield errors("net.if_rx_drops", "frontend")
        yield errors("net.if_rx_errors", "frontend")
        yield "net.nic_temp", "frontend", np.round(47 + self.nic_toff[:, 8:, None] + 0.25 * (inlet[:, None, :] - 22)
                                                   + 3 * ck[:, None, :] + N((H, 2, T), 0.6))

        # ---- CPU, host, power
        cpu_u = np.clip(np.where(busy, self.job_cpu[jidx] + 30 * ck, 1.5 + 6 * blip)[:, None, :]
                        * np.exp(N((H, 2, T), 0.15)), 0.2, 100)
        cpu_w = 95 + 2.4 * cpu_u + N((H, 2, T), 4)
        gpu_sum = power.sum(axis=1)
        node = gpu_sum + cpu_w.sum(axis=1) + 780 + 140 * busy + 60 * ck + N((H, T), 18)
        status = np.ones((H, 6, T))
        self._apply("power.psu_status", "psu", status, k0, k1, rng, T)
        n_ok = status.sum(axis=1).clip(1)
        share = self.psu_share[..., None] * status
        share = share / share.sum(axis=1, keepdims=True).clip(1e-9) * n_ok[:, None, :]
        psu_out = (node / n_ok)[:, None, :] * share + N((H, 6, T), 9) * status
        eff = 0.955 - 0.02 * np.exp(-psu_out.clip(1) / 600)
        volts = 207.5 + 3 * np.sin(2 * np.pi * t_s / 86400)[None, None, :] + N((H, 6, T), 0.8) + 0 * status
        self._apply("power.psu_input_voltage", "psu", volts, k0, k1, rng, T)
        yield "power.psu_input_power", "psu", np.round(np.where(status > 0, psu_out / eff, 0.0), 1)
        yield "power.psu_output_power", "psu", np.round(np.where(status > 0, psu_out, 0.0), 1)
        yield "power.psu_input_voltage", "psu", np.round(np.where(status > 0, volts, 0.0), 1)
        yield "power.psu_status", "psu", status
        tmean = temp.mean(axis=1)
        fan_x = 5200 + 6800 * np.clip((tmean - 32) / 48, 0, 1)[:, None, :] + 160 * (inlet[:, None, :] - 22) \
            + self.fan_off[..., None]
        fan = self._lag("cooling.fan_rpm", fan_x, FAN_TAU_S) + N((H, 6, T), 70)
        self._apply("cooling.fan_rpm", "fan", fan, k0, k1, rng, T)
        yield "cooling.fan_rpm", "fan", np.round(fan)
        yield "cooling.fan_alarm", "fan", (fan < 2600).astype(float)

        # disk (checkpoints go to the parallel FS; the NVMe caches data and spills)
        wr = np.where(ck, 4e8, np.where(busy, 6e6, 2e4))[:, None, :] * np.exp(N((H, 1, T), 0.4))
        rd = np.where(busy & ~ck, 1.2e8 * (1 + 20 * self.job_loader[jidx]), 1e4)[:, None, :] * np.exp(N((H, 1, T), 0.4))
        yield emit_counter("storage.read_bytes", "disk", np.floor(rd * dt))
        yield emit_counter("storage.write_bytes", "disk", np.floor(wr * dt))
        yield emit_counter("storage.reads", "disk", np.floor(rd * dt / 131072))
        yield emit_counter("storage.writes", "disk", np.floor(wr * dt / 131072))
        busy_io = np.clip((rd + wr) / 3.0e9, 0, 1)
        yield emit_counter("storage.read_time_s", "disk", rd * dt / 131072 * 1.1e-4 * np.exp(N((H, 1, T), 0.3)))
        yield emit_counter("storage.write_time_s", "disk", wr * dt / 131072 * 2.0e-5 * np.exp(N((H, 1, T), 0.3)))
        yield emit_counter("storage.io_time_s", "disk", busy_io * dt)
        yield emit_counter("storage.io_weighted_time_s", "disk", busy_io * dt * (1 + 4 * busy_io) * np.exp(N((H, 1, T), 0.2)))
        yield "storage.io_in_progress", "disk", rng.poisson(busy_io * 6).astype(float)
        yield errors("storage.nvme_media_errors", "disk")
        yield "storage.nvme_percent_used", "disk", np.floor(self.nvme_wear[:, None, None] + 0 * busy_io)
        used = self.fs_used[:, None] + 0.05 * np.sin(2 * np.pi * t_s[None, :] / (3 * 86400) + np.arange(H)[:, None])
        yield "storage.fs_avail_bytes", "disk", np.round((1 - used) * 3.5e12 + N((H, T), 2e8))[:, None, :]

        cpu_t = inlet[:, None, :] + 18 + self.cpu_toff[..., None] + 0.12 * cpu_w + N((H, 2, T), 0.8)
        yield "host.cpu_util", "cpu", np.round(cpu_u, 1)
        yield emit_counter("host.cpu_seconds", "cpu", cpu_u / 100 * 56 * dt)
        yield "host.cpu_temp", "cpu", np.round(cpu_t)
        yield "host.cpu_power", "cpu", np.round(cpu_w, 1)
        yield emit_counter("power.rapl_package_energy", "cpu", cpu_w * dt)
        yield emit_counter("power.rapl_dram_energy", "cpu", (18 + 0.3 * cpu_u) * dt)

        h1 = lambda x: x[:, None, :]  # noqa: E731
        yield "cooling.inlet_temp", "host", np.round(h1(inlet), 1)
        yield "cooling.outlet_temp", "host", np.round(h1(inlet + 4 + node / 850 + N((H, T), 0.3)), 1)
        yield "cooling.coolant_supply_temp", "host", np.round(h1(inlet_base * 0.4 + 16 + N((H, T), 0.15)), 1)
        yield "cooling.coolant_flow", "host", np.round(h1(self.flow[:, None] * (1 + 0.04 * busy) + N((H, T), 0.15)), 2)
        yield "power.node_input_power", "host", np.round(h1(node / 0.95), 1)
        yield "host.mem_total_bytes", "host", np.full((H, 1, T), 2.0617e12)
        yield "host.mem_hw_corrupted_bytes", "host", np.zeros((H, 1, T))
        yield "host.gpu_count", "host", np.full((H, 1, T), 8.0)
        yield emit_counter("host.edac_uncorrectable", "host", np.zeros((H, 1, T)))
        yield emit_counter("host.pressure_irq_stalled_s", "host", h1(dt * 1e-4 * (1 + busy) * np.exp(N((H, T), 0.6))))
        yield emit_counter("job.nccl_timeouts", "host", np.zeros((H, 1, T)))
        yield emit_counter("job.restarts", "host", np.zeros((H, 1, T)))
        yield "storage.checkpoint_write_throughput", "host", np.round(h1(np.where(ck, 2.4e9 * np.exp(N((H, T), 0.25)),
                                                                                   np.nan)))
        yield "power.sensor_power", "host", np.round(h1(node / 0.95 + N((H, T), 30)), 0)
        yield "power.sensor_power_avg", "host", np.round(h1(self._lag("pavg", node / 0.95, 600.0)), 0)
        yield emit_counter("power.sensor_energy", "host", h1(np.floor(node / 0.95 * dt)))
        run_q = np.where(busy, 8 * 8 + self.job_cpu[jidx] / 3, 0.3 + 2 * blip) * np.exp(N((H, T), 0.1))
        l1 = self._lag("load1", run_q, 60.0)
        yield "host.load1", "host", np.round(h1(l1), 2)
        yield "host.load5", "host", np.round(h1(self._lag("load5", run_q, 300.0)), 2)
        yield "host.load15", "host", np.round(h1(self._lag("load15", run_q, 900.0)), 2)
        mem = 2.06e12 - np.where(busy, 6.5e11 + 1.2e12 * self.job_loader[jidx], 1.6e10) - 2e11 * ck
        yield "host.mem_available_bytes", "host", np.round(h1(mem * np.exp(N((H, T), 0.01))))
        oom = rng.poisson(self.oom_rate[:, None] * busy * dt / 86400).astype(float)
        yield emit_counter("host.oom_kills", "host", h1(oom))
        last = self.state.boot_time_s.copy()
        marks = np.where(tl.reboot, t_s[None, :], -np.inf)
        boot = np.maximum(np.maximum.accumulate(marks, axis=1), last[:, None])
        self.state.boot_time_s = boot[:, -1]
        yield "host.boot_time", "host", h1(boot)
        yield "host.sensor_temp", "host", np.round(h1(inlet + 9 + 0.004 * node + N((H, T), 0.5)))
        yield "host.thermal_zone_temp", "host", np.round(h1(cpu_t.mean(axis=1) - 3 + N((H, T), 0.5)))
        yield errors("host.edac_correctable", "host")
        yield emit_counter("host.pressure_cpu_waiting_s", "host", h1(dt * np.clip(cpu_u.mean(axis=1) / 100, 0, 1) ** 3
                                                                      * 0.2 * np.exp(N((H, T), 0.5))))
        loader = self.job_loader[jidx] * busy
        yield emit_counter("host.pressure_io_waiting_s", "host", h1(dt * np.clip(0.02 + loader * 2 + 0.5 * ck, 0, 1)
                                                                     * np.exp(N((H, T), 0.5))))
        yield emit_counter("host.pressure_io_stalled_s", "host", h1(dt * np.clip(loader + 0.3 * ck, 0, 1)
                                                                     * 0.5 * np.exp(N((H, T), 0.5))))
        memp = np.clip((1.0e12 - mem) / 1.0e12, 0, 1) * 0.01
        yield emit_counter("host.pressure_memory_waiting_s", "host", h1(dt * memp * np.exp(N((H, T), 0.8))))
        yield emit_counter("host.pressure_memory_stalled_s", "host", h1(dt * memp * 0.3 * np.exp(N((H, T), 0.8))))
        yield "storage.fs_op_latency_s", "host", np.round(h1((0.002 + 0.03 * ck + 0.01 * loader) * np.exp(N((H, T), 0.4))), 5)

        # ---- the job's own health (host-level, where the rank reports it)
        step = tl.step_time * np.exp(N((H, T), 0.01))
        slow = np.zeros((H, 1, T))
        self._apply("job.step_time_s", "host", slow, k0, k1, rng, T)
        step = step * (1 + slow[:, 0, :]) * (1 + 0.4 * np.clip(thermal_frac.max(axis=1), 0, 1))
        ok = np.isfinite(step)
        yield "job.step_time_s", "host", np.round(h1(step), 3)
        yield "job.throughput", "host", np.round(h1(np.where(ok, self.job_tokens[jidx] / np.where(ok, step, 1), np.nan)))
        yield "job.mfu", "host", np.round(h1(np.where(ok, self.job_tensor[jidx] * 0.75 / (1 + slow[:, 0, :]), np.nan)), 3)
        yield "job.dataloader_wait_s", "host", np.round(h1(np.where(ok, step * self.job_loader[jidx]
                                                                    * np.exp(N((H, T), 0.5)), np.nan)), 3)
        age = np.where(busy, np.where(hang | ck, 60 + 240 * rng.random((H, T)), step), np.nan)
        yield "job.last_progress_age_s", "host", np.round(h1(age), 1)

    def _prev(self, name: str, arr: np.ndarray) -> np.ndarray:
        """The previous value of a derived series (to take increments across chunk edges)."""
        key = ("prev", name)
        prev = self.state.lags.get(key)
        self.state.lags[key] = arr[..., -1:].copy()
        return arr[..., :1] if prev is None else prev


# typical rates (per second, per component) of the traffic / energy / time counters, for the
# totals they start from
_TYPICAL_RATE = {
    "gpu.energy": 450.0, "gpu.throttle.power_ns": 5e7, "gpu.throttle.thermal_ns": 1e6, "gpu.throttle.sync_boost_ns": 4e6,
    "gpu.throttle.low_util_ns": 1e8, "gpu.clock_event.sw_power_cap_ns": 5e7, "gpu.clock_event.sw_thermal_ns": 8e5,
    "gpu.clock_event.hw_thermal_ns": 1e4, "gpu.clock_event.hw_power_brake_ns": 1e3, "nvlink.tx_bytes": 8e10,
    "nvlink.rx_bytes": 8e10, "nvswitch.tx_throughput": 1.6e8, "nvswitch.rx_throughput": 1.6e8, "net.rx_bytes": 3e10,
    "net.tx_bytes": 3e10, "net.rx_packets": 7e6, "net.tx_packets": 7e6, "net.fec_corrected": 2e4,
    "net.link_down": 2e-7, "net.carrier_changes": 4e-7, "net.rx_pause": 900.0, "net.tx_pause": 350.0,
    "net.ecn_marked": 2e4, "net.cnp_sent": 1.2e4, "net.cnp_handled": 1e4, "ib.link_downed": 2e-7,
    "ib.port_xmit_wait": 1.3e6, "ib.port_xmit_data": 3e10, "ib.port_rcv_data": 3e10, "net.if_rx_bytes": 2e8,
    "net.if_tx_bytes": 1e8, "storage.read_bytes": 1.5e8, "storage.write_bytes": 2e7, "storage.reads": 1100.0,
    "storage.writes": 150.0, "storage.read_time_s": 0.12, "storage.write_time_s": 0.003, "storage.io_time_s": 0.05,
    "storage.io_weighted_time_s": 0.08, "host.cpu_seconds": 14.0, "power.rapl_package_energy": 160.0,
    "power.rapl_dram_energy": 25.0, "power.sensor_energy": 7500.0, "host.oom_kills": 0.0,
    "host.pressure_cpu_waiting_s": 0.01, "host.pressure_io_waiting_s": 0.05, "host.pressure_io_stalled_s": 0.02,
    "host.pressure_memory_waiting_s": 0.001, "host.pressure_memory_stalled_s": 0.0003, "gpu.xid_count": 0.0,
    "gpu.ecc.dbe_volatile": 0.0, "gpu.row_remap.uncorrectable": 0.0, "host.edac_uncorrectable": 0.0,
    "host.pressure_irq_stalled_s": 2e-4, "job.nccl_timeouts": 0.0, "job.restarts": 0.0, "net.cnp_ignored": 200.0,
}
_LIFETIME = {"gpu.ecc.sbe_aggregate", "gpu.retired_pages.sbe", "gpu.row_remap.correctable",
             "gpu.row_remap.uncorrectable", "storage.nvme_media_errors"}


def estimated_series_per_host() -> int:
    return sum(len(COMPONENT_SETS[c]) for _, c in SERIES)
