"""Root causes of job interruptions, their mix, and the precursor chain of each.

The mix is the Llama 3 405B pre-training table (419 unexpected interruptions in
54 days on 16,384 H100s), used as relative weights. Each cause says which
component fails, how the scheduler reports the interruption (state, reason),
how long the host is out of service, and — for causes with a hardware chain —
which signals rise before it and how far ahead (lead time).

Lead times are log-normal in hours: ``lead_h = exp(N(ln(median_h), sigma))``,
clipped to [min_h, max_h]. Onsets of later steps of a chain are fractions of
the lead (``at`` = 0 is the chain onset, 1 would be t0). A cause's
``precursor_p`` is the chance its chain is present at all: real fleets see many
hardware failures with no warning, so about a quarter of chained causes fail
with none.

Chain step shapes (applied by ``telemetry.simulator.signals``):

``counter_ramp``  extra counter increments from the onset to t0, at least 3 at
                  the onset step, growing ~exponentially (ECC, PCIe replays,
                  NVLink CRC, symbol errors, FEC corrections, throttle time)
``flag``          a 0/1 gauge set to 1 from the onset until the host goes down
``gauge_offset``  a gauge raised by ``lo`` at the onset, ramping to ``hi``
``gauge_level``   a gauge forced to a fault level (a fan that stops spinning)
``flaps``         repeated short drops (link flaps counted in ``net.link_down``
                  with link_down/link_up events; PSU status 0 with no input)
``xid``           an XID event at the onset (e.g. 63 when a row is remapped)
``throttle``      clocks held down: the throttle-time counter grows by ``lo``..``hi``
                  of each interval and ``gpu.sm_clock`` drops by as much
``slowdown``      the job's step time grows by ``lo`` (a throttled rank slows
                  every rank)
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Step:
    metric: str  # canonical catalog name, or "event:<kind>" for an event
    shape: str
    at: float = 0.0  # onset as a fraction of the lead (0 = chain onset)
    lo: float = 0.0
    hi: float = 0.0
    component: str = "self"  # self = the failing component; "gpus" = all GPUs of the host; "job" = job-level
    code: int = 0  # XID code for shape "xid"


@dataclass(frozen=True)
class Cause:
    name: str
    count: int  # Llama 3 405B count (of 419)
    component_kind: str  # gpu, nic, fan, psu, disk, host
    state: str  # Slurm state the interrupted job ends in
    reason: str  # what the scheduler knows ({host} is filled in)
    down_h: tuple[float, float]  # host out of service (uniform range, hours); (0, 0) = stays up
    terminal_xids: tuple[int, ...] = ()
    nccl_timeout: bool = False  # every rank reports an NCCL watchdog timeout at t0
    hang_min: float = 0.0  # the job hangs (GPUs spin at low power) this long before t0
    precursor_p: float = 0.0
    lead_median_h: float = 0.0
    lead_sigma: float = 0.6
    lead_min_h: float = 0.25
    lead_max_h: float = 24.0
    chain: tuple[Step, ...] = field(default_factory=tuple)
    # (probability, chain, terminal XIDs): a second way the same cause shows itself
    alt: tuple[float, tuple[Step, ...], tuple[int, ...]] | None = None


_NODE = "node {host} not responding"

CAUSES: tuple[Cause, ...] = (
    Cause("faulty_gpu", 148, "gpu", "NODE_FAIL", _NODE, (2, 8), terminal_xids=(79,),
          precursor_p=0.75, lead_median_h=3.0, lead_max_h=12.0,
          chain=(Step("gpu.pcie.replay", "counter_ramp", 0.0, 3, 40),
                 Step("gpu.pcie.correctable_errors", "counter_ramp", 0.5, 3, 20)),
          alt=(0.35, (Step("nvlink.crc_flit_errors", "counter_ramp", 0.0, 4, 80),
                      Step("nvlink.replay_errors", "counter_ramp", 0.3, 3, 40)), (74,))),
    Cause("hbm3", 72, "gpu", "FAILED", "rank {rank} exited: CUDA error: uncorrectable ECC error encountered", (1, 4),
          terminal_xids=(48, 94), precursor_p=0.8, lead_median_h=6.0, lead_max_h=24.0,
          chain=(Step("gpu.ecc.dram_sbe_volatile", "counter_ramp", 0.0, 4, 60),
                 Step("gpu.row_remap.pending", "flag", 0.6),
                 Step("event:xid", "xid", 0.6, code=63))),
    Cause("software_bug", 54, "gpu", "FAILED", "rank {rank} exited with code 1", (0, 0), terminal_xids=(13, 43)),
    Cause("network", 35, "nic", "FAILED", "NCCL watchdog timeout", (1, 6), nccl_timeout=True, hang_min=10,
          precursor_p=0.75, lead_median_h=4.0, lead_max_h=18.0,
          chain=(Step("net.symbol_errors", "counter_ramp", 0.0, 5, 200),
                 Step("net.fec_corrected", "counter_ramp", 0.0, 400, 20000),
                 Step("net.link_down", "flaps", 0.8))),
    Cause("host_maintenance", 32, "host", "REQUEUED", "node {host} drained for maintenance", (1, 4)),
    Cause("gpu_sram", 19, "gpu", "FAILED", "rank {rank} exited: CUDA error: uncorrectable ECC error encountered", (1, 4),
          terminal_xids=(48,), precursor_p=0.7, lead_median_h=2.0, lead_max_h=10.0,
          chain=(Step("gpu.ecc.sram_sbe_volatile", "counter_ramp", 0.0, 3, 30),)),
    Cause("gpu_system_processor", 17, "gpu", "NODE_FAIL", _NODE, (1, 3), terminal_xids=(119, 120)),
    Cause("nic", 7, "nic", "FAILED", "NCCL watchdog timeout", (2, 8), nccl_timeout=True, hang_min=10,
          precursor_p=0.7, lead_median_h=2.0, lead_max_h=8.0,
          chain=(Step("net.nic_temp", "gauge_offset", 0.0, 12, 30),
                 Step("net.link_down", "flaps", 0.7))),
    Cause("nccl_watchdog", 7, "host", "TIMEOUT", "job made no progress for 30 min (NCCL watchdog)", (0, 0),
          nccl_timeout=True, hang_min=30),
    Cause("sdc", 6, "gpu", "FAILED", "training loss diverged (NaN) on rank {rank}; checksum mismatch", (0, 0)),
    Cause("thermal", 6, "fan", "NODE_FAIL", _NODE, (1, 4), terminal_xids=(79,),
          precursor_p=0.85, lead_median_h=1.5, lead_min_h=0.5, lead_max_h=6.0,
          chain=(Step("cooling.fan_rpm", "gauge_level", 0.0, 1200, 1800),
                 Step("gpu.temp", "gauge_offset", 0.0, 10, 22, component="gpus"),
                 Step("gpu.throttle.thermal_ns", "throttle", 0.4, 0.5, 0.7, component="gpus"),
                 Step("job.step_time_s", "slowdown", 0.4, 0.25, component="job"))),
    Cause("ssd", 3, "disk", "NODE_FAIL", _NODE, (2, 6)),
    Cause("psu", 3, "psu", "NODE_FAIL", _NODE, (2, 6), precursor_p=0.7, lead_median_h=2.0, lead_max_h=8.0,
          chain=(Step("power.psu_status", "flaps", 0.0),)),
    Cause("server_chassis", 2, "host", "NODE_FAIL", _NODE, (2, 8)),
    Cause("io_expansion_board", 2, "host", "NODE_FAIL", _NODE, (2, 8)),
    Cause("dependency", 2, "host", "FAILED", "checkpoint storage unavailable", (0, 0)),
    Cause("cpu", 2, "host", "NODE_FAIL", _NODE, (2, 8)),
    Cause("system_memory", 2, "host", "NODE_FAIL", _NODE, (2, 8)),
)

BY_NAME = {c.name: c for c in CAUSES}
TOTAL = sum(c.count for c in CAUSES)  # 419
WEIGHTS = np.array([c.count for c in CAUSES], dtype=float) / TOTAL

# Llama 3: 419 interruptions in 54 days on 2,048 hosts of 8 GPUs.
LLAMA_RATE_PER_HOST_DAY = TOTAL / (54 * 2048)


def sample_causes(rng: np.random.Generator, n: int) -> list[Cause]:
    """Draw n root causes following the Llama 3 mix."""
    idx = rng.choice(len(CAUSES), size=n, p=WEIGHTS)
    return [CAUSES[i] for i in idx]


def draw_lead_h(rng: np.random.Generator, cause: Cause) -> float:
    lead = float(np.exp(rng.normal(np.log(cause.lead_median_h), cause.lead_sigma)))
    return float(np.clip(lead, cause.lead_min_h, cause.lead_max_h))
