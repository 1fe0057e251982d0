"""The ``realistic`` scenario: a fleet as hard as a real one, the yardstick of the analysis engine.

``simulate_fleet --scenario realistic`` (README: "The realistic scenario"). Everything injected
is in the manifest (see ``telemetry.simulator.manifest``); nothing is tuned to make any detector
look good or bad.

Failures
    Hardware causes (and host maintenance) strike each host as a Poisson process over its
    up-time at ``LLAMA_RATE_PER_HOST_DAY x failure_scale x`` the host's hazard, busy or idle (a
    failure on an idle host drains it without interrupting a job), so the realised rate per up
    host-day stays at the nominal one at any scale. The hazard is higher on lemon hosts (5 %,
    x8, mostly on the same part; a lemon's draw is conditioned on failing at least
    ``LEMON_MIN_FAILURES`` times) and on the first-installed (older) racks (x3). The first VBIOS of
    the roll-out (``topology.FW_HOT``) sits on exactly those hosts: the old racks got it first and a
    lemon's swapped boards came from the depot with it. So in every draw that firmware is
    over-represented among failures (about 2x its host share on a bench-sized fleet) by placement,
    and causes nothing. Software causes strike running jobs at the same nominal rate per busy
    host-day. A few correlated events (a leaf switch rebooting, a rack PDU tripping, drawn by their
    hosts' hazard) take several hosts at once; they are part of the failure budget.
Precursors
    A hardware failure with a chain has one with probability ``PRECURSOR_P`` (together with the
    causes that have none, 30-50 % of hardware failures come without warning). Per failure: a
    strength s ~ U(0, 1) mapped over about three decades (counter rates 10-10,000 events a day at
    the peak: the weakest sit inside the healthy tail), a log-normal lead (minutes to days), a
    shape (ramp to a peak that is not t0, plateau, intermittent bursts), and a partial chain
    (every step after the first is present with probability 0.6).
False alarms
    ``FALSE_ALARMS_PER_HOST_DAY`` episodes per host-day of up-time, whatever the failure scale
    (at scale 20, about 4x the true precursors): the same chains, shapes, strengths and leads on
    any host (a host that fails later of something else included), with no failure after them.
    Hardware keeps its state: a pending row remap stays pending until the host reboots; error
    counters keep trickling after the episode and fade over days.
Background
    Every error counter has a per-part personality (``haystack``); XIDs on healthy GPUs (13, 31,
    43 from applications, 45 after killed jobs, 63 without a failure, 119 that recovers), link
    flaps, thermal throttling, OOM kills.
Confounders
    Heavy phases (job-wide power and temperature rises) end just before 45 % of interruptions, a
    checkpoint write is under way at the last scrape before 35 % (minutes before t0 at 300 s);
    temperature follows load; the firmware above.
Slurm as it is
    ``reason`` is Slurm's (``None``), the exit code is the batch script's: neither names the
    cause. Jobs submitted with requeue allowed (40 %) are requeued by Slurm after a node failure
    or an admin requeue and keep their JobID: the store gets two runs of one JobID (see
    ``_jobs_tables``); other interrupted jobs are resubmitted by their launcher under a new JobID.
    NCCL watchdog messages carry each job's own sequence number.
Scheduling
    Jobs arrive at the rate that would fill the fleet (``OFFERED_LOAD``), and a job of the largest
    size (the flagship model) that finds no room preempts running jobs that have run 2 h or more,
    as Meta's research clusters do (RSC-1/RSC-2: 80 %+ utilised, Kokolis et al., HPCA 2025). A
    preempted job ends PREEMPTED — not an interruption, but a job that stops abruptly with no
    failure behind it, its power and traffic falling as a failed job's do — and is requeued under
    its JobID. Without it a half-fleet job waited hours for the small jobs to leave it room and the
    bench fleets ran 57-74 % busy (their scheduler's nominal 85 % never reached), so a third or
    more of the hardware failures struck idle hosts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from telemetry import schema, xid
from telemetry.simulator import failures, scheduler, topology
from telemetry.simulator.batches import sample_batches
from telemetry.simulator.failures import Cause
from telemetry.simulator.haystack import COMPONENT_SETS, SERIES, Effect, Haystack, estimated_series_per_host
from telemetry.simulator.manifest import iso
from telemetry.simulator.scheduler import Job, _size_choices

MAX_CHUNK_CELLS = 12_000  # hosts x steps per chunk: the per-NVLink arrays are 144 x that
DEFAULT_FAILURE_SCALE = 20.0
PRECURSOR_P = 0.7
FALSE_ALARMS_PER_HOST_DAY = 0.15
CORRELATED_SHARE = 0.06
LEMON_SHARE, LEMON_HAZARD, OLD_RACK_HAZARD = 0.05, 8.0, 3.0
LEMON_MIN_FAILURES, LEMON_TRIES = 2, 200
REQUEUE_SHARE = 0.4
SOFTWARE = ("software_bug", "nccl_watchdog", "sdc", "dependency")
LEAD_SIGMA = 1.3
LEAD_MIN_H, LEAD_MAX_H = 0.1, 7 * 24.0
SHAPES = (("ramp", 0.45), ("plateau", 0.3), ("intermittent", 0.25))
PARTIAL_KEEP = 0.6
PREEMPT_AFTER_S = 2 * 3600
# Jobs are submitted at the rate that would fill the whole fleet: a training cluster's queue is
# rarely empty. What runs is less (the fleet is fragmented, big jobs wait up to PREEMPT_AFTER_S for
# room, hosts are down): 70-87 % of host-time busy on the bench fleets.
OFFERED_LOAD = 1.0


@dataclass(frozen=True)
class RStep:
    metric: str
    cset: str
    kind: str  # rate | multiply | offset | level | flag | flaps | throttle
    at: float = 0.0  # onset as a fraction of the lead
    lo: float = 0.0  # magnitude at strength 0
    hi: float = 0.0  # magnitude at strength 1
    scope: str = "self"  # self | gpus (every GPU of the host) | host


def _rate(metric, cset, at=0.0):
    return RStep(metric, cset, "rate", at, 10.0, 10_000.0)


CHAINS: dict[str, list[tuple[float, tuple[RStep, ...]]]] = {
    "faulty_gpu": [
        (0.65, (_rate("gpu.pcie.replay", "gpu"), _rate("gpu.pcie.correctable_errors", "gpu", 0.3),
                RStep("gpu.pcie.link_width", "gpu", "level", 0.7, 0.5, 0.5))),
        (0.35, (_rate("nvlink.crc_flit_errors", "nvlink"), _rate("nvlink.replay_errors", "gpu", 0.3),
                _rate("nvlink.recovery_errors", "gpu", 0.6))),
    ],
    "hbm3": [(1.0, (_rate("gpu.ecc.dram_sbe_volatile", "gpu"), RStep("gpu.row_remap.pending", "gpu", "flag", 0.6)))],
    "network": [(1.0, (_rate("net.symbol_errors", "backend"), RStep("net.fec_corrected", "backend", "multiply", 0.0, 1.6, 300.0),
                       RStep("net.link_down", "backend", "flaps", 0.7, 1, 20)))],
    "gpu_sram": [(1.0, (_rate("gpu.ecc.sram_sbe_volatile", "gpu"),))],
    "nic": [(1.0, (RStep("net.nic_temp", "backend", "offset", 0.0, 2.0, 25.0), RStep("net.link_down", "backend", "flaps", 0.7, 1, 20)))],
    "thermal": [(1.0, (RStep("cooling.fan_rpm", "fan", "level", 0.0, 0.9, 0.15),
                       RStep("gpu.temp", "gpu", "offset", 0.1, 1.5, 15.0, scope="gpus"),
                       RStep("gpu.throttle.thermal_ns", "gpu", "throttle", 0.5, 0.02, 0.5, scope="gpus"),
                       RStep("job.step_time_s", "host", "offset", 0.5, 0.02, 0.3, scope="host")))],
    "psu": [(1.0, (RStep("power.psu_status", "psu", "flaps", 0.0, 1, 20), RStep("power.psu_input_voltage", "psu", "offset", 0.0, -1.0, -15.0)))],
}
LEAD_MEDIAN_H = {"faulty_gpu": 4.0, "hbm3": 10.0, "network": 6.0, "gpu_sram": 3.0, "nic": 3.0, "thermal": 1.5, "psu": 4.0}
# the metric a class's precursor starts with (the first step of its main chain)
TRUE_PRECURSOR = {cause: chains[0][1][0].metric for cause, chains in CHAINS.items()}
SLURM_REASON = "None"  # sacct's Reason of a finished job: the pending reason, not the cause


@dataclass
class RFailure:
    cause: Cause
    host: int
    component: str
    t0_s: float
    down_until_s: float
    job: Job | None = None
    correlated: str | None = None
    lemon: bool = False


@dataclass
class Plan:
    jobs: list[Job]
    failures: list[RFailure]
    down: list[tuple[int, float, float]]
    confounders: list[dict]
    correlated: list[dict]
    lemons: list[int]
    hazard: np.ndarray
    requeue_ok: dict[int, bool] = field(default_factory=dict)  # id(job) -> requeue allowed
    runs: dict[int, int] = field(default_factory=dict)  # id(job) -> run number of its JobID


def _hw_causes():
    cs = [c for c in failures.CAUSES if c.name not in SOFTWARE]
    w = np.array([c.count for c in cs], float)
    return cs, w / w.sum()


def _sw_causes():
    cs = [c for c in failures.CAUSES if c.name in SOFTWARE]
    w = np.array([c.count for c in cs], float)
    return cs, w / w.sum()


def _component(rng, cause: Cause) -> str:
    pool = {"gpu": topology.GPUS, "nic": topology.BACKEND_NICS, "fan": topology.FANS, "psu": topology.PSUS,
            "disk": topology.DISKS}.get(cause.component_kind)
    return pool[int(rng.integers(len(pool)))] if pool else ""


def _down_s(rng, cause: Cause) -> float:
    lo, hi = cause.down_h
    return float(rng.uniform(lo, hi)) * 3600 if hi > 0 else 0.0


# ---------------------------------------------------------------------------------------------------
# failures and the scheduler


def _host_failures(topo, horizon: float, scale: float, rng) -> tuple[dict[int, list[RFailure]], list[dict], list[int], np.ndarray]:
    H = len(topo.hosts)
    old = np.array([h.firmware == topology.FW_HOT for h in topo.hosts])  # the first-installed racks (topology)
    hazard = np.where(old, OLD_RACK_HAZARD, 1.0)
    n_lemons = max(1, int(math.ceil(LEMON_SHARE * H)))
    lemons = sorted(int(h) for h in rng.choice(H, size=n_lemons, replace=False))
    hazard[lemons] *= LEMON_HAZARD
    hazard = hazard / hazard.mean()
    _flash_depot_firmware(topo, lemons)
    hw, hw_p = _hw_causes()
    hw_share = sum(c.count for c in hw) / failures.TOTAL
    rate_s = failures.LLAMA_RATE_PER_HOST_DAY * scale * hw_share / 86400.0
    per_host: dict[int, list[RFailure]] = {h: [] for h in range(H)}
    correlated = _correlated_events(topo, horizon, scale, rate_s, hazard, rng, per_host)
    share = (1.0 - CORRELATED_SHARE) if scale > 0 else 1.0
    others = _lemon_compensation(rate_s * share * horizon, hazard, lemons)
    for h in range(H):
        if scale <= 0:
            break
        taken = sorted((f.t0_s, f.down_until_s) for f in per_host[h])
        lemon = h in lemons
        lam = rate_s * share * hazard[h] * (1.0 if lemon else others)
        for _ in range(LEMON_TRIES if lemon else 1):
            # a lemon is a host that fails again and again: its Poisson process is drawn again until
            # it fails at least LEMON_MIN_FAILURES times within the horizon (conditioning, not padding)
            own = _own_failures(h, lam, horizon, taken, lemon, hw, hw_p, rng)
            if not lemon or sum(f.cause.name != "host_maintenance" for f in own) >= LEMON_MIN_FAILURES:
                break
        per_host[h].extend(own)
        per_host[h].sort(key=lambda f: f.t0_s)
    return per_host, correlated, lemons, hazard


def _lemon_compensation(per_unit_hazard: float, hazard: np.ndarray, lemons: list[int]) -> float:
    """The factor on the other hosts' rate that keeps the fleet's expected own failures nominal although
    each lemon's draw is conditioned on failing at least twice (E[N | N >= 2] > E[N] for a Poisson N).
    On a bench-sized fleet it is ~0.9; on a tiny or short fleet (where two failures per lemon are most
    of the budget) it stops at 0.25 and the realised rate runs above nominal."""
    mu = per_unit_hazard * hazard
    if not lemons or per_unit_hazard <= 0:
        return 1.0
    ml = mu[lemons]
    p_lt2 = np.exp(-ml) * (1 + ml)
    conditioned = np.where(p_lt2 < 1 - 1e-9, (ml - ml * np.exp(-ml)) / np.maximum(1 - p_lt2, 1e-12), 2.0)
    extra = float(np.sum(np.maximum(conditioned, LEMON_MIN_FAILURES) - ml))
    rest = float(mu.sum() - ml.sum())
    return max(0.25, 1.0 - extra / rest) if rest > 0 else 1.0


def _flash_depot_firmware(topo, lemons: list[int]) -> None:
    """A lemon's GPU boards have been swapped before: the depot's spare boards come flashed with the
    first VBIOS of the roll-out (``FW_HOT``, also on the first-installed racks). So the firmware sits
    on the hosts that fail most for their own reasons (old chassis, lemons): it is over-represented
    among failures in every draw, and causes none of them."""
    for h in lemons:
        topo.hosts[h].firmware = topology.FW_HOT


def _own_failures(h: int, lam: float, horizon: float, taken, lemon: bool, hw, hw_p, rng) -> list[RFailure]:
    out: list[RFailure] = []
    t = 0.0
    bad_part: tuple[Cause, str] | None = None
    while True:
        t += float(rng.exponential(1.0 / lam))
        if t >= horizon:
            return out
        if any(a - 600 <= t <= max(b, a + 600) for a, b in taken):
            continue
        if lemon and bad_part is not None and rng.random() < 0.7:
            cause, comp = bad_part
        else:
            cause = hw[int(rng.choice(len(hw), p=hw_p))]
            comp = _component(rng, cause)
            if lemon and cause.name != "host_maintenance" and bad_part is None:
                bad_part = (cause, comp)
        down = _down_s(rng, cause)
        out.append(RFailure(cause, h, comp, t, t + down, lemon=lemon))
        t += down


def _correlated_events(topo, horizon: float, scale: float, rate_s: float, hazard, rng, per_host) -> list[dict]:
    """A leaf switch rebooting or a rack PDU tripping takes several hosts at once (part of the failure
    budget). Old racks' PDUs and leaves trip more: a rack or leaf is drawn by its hosts' hazard."""
    correlated: list[dict] = []
    if scale <= 0:
        return correlated
    H = len(topo.hosts)
    expected = rate_s * CORRELATED_SHARE * horizon * H
    mean_hosts = 6.0
    n_ev = int(rng.poisson(expected / mean_hosts))
    if horizon >= 2 * 86400 and H >= 16:  # every fleet of some size shows one
        n_ev = max(1, n_ev)
    racks = sorted({h.rack for h in topo.hosts})
    leaves = sorted({h.leaf for h in topo.hosts})

    def weights(groups, key):
        w = np.array([sum(hazard[h.index] for h in topo.hosts if key(h) == g) for g in groups])
        return w / w.sum()

    rack_p, leaf_p = weights(racks, lambda h: h.rack), weights(leaves, lambda h: h.leaf)
    for i in range(n_ev):
        t0 = float(rng.uniform(0.05, 0.95) * horizon)
        if rng.random() < 0.5:
            leaf = leaves[int(rng.choice(len(leaves), p=leaf_p))]
            hosts = [h.index for h in topo.hosts if h.leaf == leaf]
            cause, kind, where = failures.BY_NAME["network"], "leaf_switch_reboot", leaf
            downs = [0.0] * len(hosts)
        else:
            rack = racks[int(rng.choice(len(racks), p=rack_p))]
            hosts = [h.index for h in topo.hosts if h.rack == rack]
            cause, kind, where = failures.BY_NAME["psu"], "rack_pdu_trip", rack
            downs = [float(rng.uniform(1, 3)) * 3600] * len(hosts)
        eid = f"C{i + 1:03d}"
        for h, d in zip(hosts, downs):
            comp = topology.BACKEND_NICS[int(rng.integers(8))] if cause.name == "network" else ""
            per_host[h].append(RFailure(cause, h, comp, t0 + float(rng.uniform(0, 20)), t0 + d if d else t0,
                                        correlated=eid))
        correlated.append({"id": eid, "kind": kind, "where": where, "t0": t0, "hosts": hosts, "cause": cause.name})
    return correlated


def _schedule(topo, horizon: float, scale: float, rng, interval_s: float) -> Plan:
    n_hosts = len(topo.hosts)
    per_host, correlated, lemons, hazard = _host_failures(topo, horizon, scale, rng)
    down_iv = {h: [(f.t0_s, f.down_until_s) for f in fs if f.down_until_s > f.t0_s] for h, fs in per_host.items()}
    wakeups = sorted(b for iv in down_iv.values() for _, b in iv)
    used: set[int] = set()  # id() of host failures that interrupted a job
    sizes, size_p = _size_choices(n_hosts)
    sw, sw_p = _sw_causes()
    sw_rate_s = failures.LLAMA_RATE_PER_HOST_DAY * scale * (1 - sum(c.count for c in failures.CAUSES
                                                                      if c.name not in SOFTWARE) / failures.TOTAL) / 86400
    mean_size = float(np.dot(sizes, size_p))
    mean_dur = 10 * 3600 * np.exp(0.8**2 / 2)
    arrivals_per_s = OFFERED_LOAD * n_hosts / (mean_size * mean_dur)
    next_id = [100000 + int(rng.integers(0, 800000))]
    plan = Plan([], [], [], [], correlated, lemons, hazard)
    spec_of: dict[int, dict] = {}  # id(job) -> the spec it ran (a preempted job is requeued from it)
    resubmitted: dict[int, dict] = {}  # id(job) -> the resubmission its interruption queued

    def down_at(h: int, t: float) -> float | None:
        for a, b in down_iv[h]:
            if a <= t < b:
                return b
        return None

    base_spec = scheduler.spec_maker(rng, sizes, size_p)

    def new_spec(submit_s: float) -> dict:
        return {**base_spec(submit_s), "job_id": None, "run": 0, "requeue": bool(rng.random() < REQUEUE_SHARE)}

    queue: list[dict] = []
    arrivals: list[dict] = []
    t_arr = 0.0
    while t_arr < horizon:
        t_arr += float(rng.exponential(1.0 / arrivals_per_s))
        arrivals.append(new_spec(t_arr))
    free_at = np.zeros(n_hosts)

    def first_failure(hosts, a: float, b: float) -> RFailure | None:
        best = None
        for h in hosts:
            for f in per_host[h]:
                if f.t0_s >= b:
                    break
                if f.t0_s > a and id(f) not in used and (best is None or f.t0_s < best.t0_s):
                    best = f
                    break
        return best

    def release(job: Job) -> None:
        """Take back the interruption planned for ``job`` (it ends before it, or runs past the
        horizon): a hardware failure strikes its host all the same, idle or under the next job."""
        if job.failure is None:
            return
        used.discard(id(job.failure))
        if job.failure.cause.name in SOFTWARE:
            per_host[job.failure.host].remove(job.failure)
        job.failure.job = None
        plan.confounders[:] = [c for c in plan.confounders if c["job"] is not job]
        job.failure, job.hang_s = None, 0.0
        again = resubmitted.pop(id(job), None)
        if again is not None and again in queue:
            queue.remove(again)

    def preempt(head: dict, t: float, idle: list[int]) -> bool:
        """A job of the largest size that does not fit ends running jobs that have run at least
        ``PREEMPT_AFTER_S`` (the largest, then the youngest, first: the fewest jobs) to make room: Slurm's
        preemption with requeue, as a research cluster runs it (Meta's RSC clusters, Kokolis et al.,
        HPCA 2025: jobs preemptible after 2 h, so a large job starts without draining the cluster).
        A preempted job ends PREEMPTED, which is not an interruption, and goes back to the queue
        under its JobID with the work it had left."""
        if head["n"] != sizes[-1]:
            return False
        need = head["n"] - len(idle)
        cands = sorted((j for j in plan.jobs if j.start_s <= t - PREEMPT_AFTER_S and len(j.hosts) < head["n"]
                        and (j.end_s is None or j.end_s > t + 60)),
                       key=lambda j: (-len(j.hosts), -j.start_s))
        chosen, freed = [], 0
        for j in cands:
            if freed >= need:
                break
            chosen.append(j)
            freed += len(j.hosts)
        if freed < need:
            return False
        for j in chosen:
            release(j)
            spec = spec_of[id(j)]
            left = j.start_s + spec["work_s"] - t
            j.end_s, j.state, j.exit_code, j.reason = t, "PREEMPTED", "0:0", SLURM_REASON
            for h in j.hosts:
                free_at[h] = t
            if left > 600:
                queue.insert(0, dict(spec, work_s=left, run=spec["run"] + 1, submit_s=t + float(rng.uniform(1, 30))))
        return True

    def start(spec: dict, t: float, hosts: list[int], already_run_s: float = 0.0) -> None:
        if spec["job_id"] is None:
            spec["job_id"] = str(next_id[0])
            next_id[0] += int(rng.integers(1, 40))
        begin = t - already_run_s
        planned_end = begin + spec["work_s"]
        job = Job(spec["job_id"], spec["name"], spec["user"], hosts, min(spec["submit_s"], begin), begin, planned_end,
                  "COMPLETED", step_time_s=float(rng.uniform(3.0, 12.0)), power_frac=float(rng.uniform(0.82, 0.97)),
                  ckpt_period_s=float(rng.choice([1800, 2700, 3600])), ckpt_offset_s=float(rng.uniform(0, 1800)),
                  ckpt_dur_s=float(rng.uniform(150, 420)))
        plan.requeue_ok[id(job)] = spec["requeue"]
        plan.runs[id(job)] = spec["run"]
        spec_of[id(job)] = spec
        run_s = planned_end - max(begin, 0.0)
        for _ in range(int(rng.poisson(run_s / (12 * 3600)))):
            hs = float(rng.uniform(max(begin, 0.0), planned_end))
            job.heavy.append((hs, hs + float(rng.uniform(1800, 5400)), float(rng.uniform(0.06, 0.1))))
        a = max(begin, 0.0)
        hwf = first_failure(hosts, a, planned_end)
        t_sw = a + float(rng.exponential(1.0 / (sw_rate_s * len(hosts)))) if sw_rate_s > 0 else math.inf
        f = None
        if hwf is not None and hwf.t0_s < min(t_sw, planned_end):
            f = hwf
            used.add(id(f))
        elif t_sw < planned_end:
            cause = sw[int(rng.choice(len(sw), p=sw_p))]
            host = hosts[int(rng.integers(len(hosts)))]
            f = RFailure(cause, host, _component(rng, cause), t_sw, t_sw)
            per_host[host].append(f)
            per_host[host].sort(key=lambda x: x.t0_s)
            used.add(id(f))
        if f is not None:
            f.job = job
            cause = f.cause
            job.end_s, job.state = f.t0_s, cause.state
            job.exit_code = {"FAILED": str(rng.choice(["1:0", "1:0", "1:0", "255:0", "134:0"])), "NODE_FAIL": "0:0",
                             "TIMEOUT": "0:0", "REQUEUED": "0:0"}[cause.state]
            job.reason = SLURM_REASON
            job.hang_s = cause.hang_min * 60.0 * float(rng.uniform(0.5, 1.5))
            job.failure = f
            if rng.random() < 0.45:  # a job-wide heavy phase ends just before t0
                he = f.t0_s - float(rng.uniform(0, 900))
                hs = he - float(rng.uniform(2700, 3 * 3600))
                job.heavy.append((hs, he, float(rng.uniform(0.07, 0.1))))
                plan.confounders.append({"kind": "heavy_phase_before_failure", "job": job, "hosts": hosts,
                                         "start_s": hs, "end_s": he, "t0_s": f.t0_s})
            if rng.random() < 0.35:
                # a checkpoint write is under way at the last scrape before t0 (so the data shows it:
                # a write of a few minutes between two scrapes would leave no trace in the samples)
                scrape = math.floor((f.t0_s - 1.0) / interval_s) * interval_s
                ck_s = scrape - float(rng.uniform(0.0, 0.8)) * job.ckpt_dur_s
                if ck_s > a:
                    job.ckpt_offset_s = (ck_s - begin) % job.ckpt_period_s
                    plan.confounders.append({"kind": "checkpoint_before_failure", "job": job, "hosts": hosts,
                                             "start_s": ck_s, "end_s": min(ck_s + job.ckpt_dur_s, f.t0_s),
                                             "t0_s": f.t0_s})
            remaining = planned_end - f.t0_s
            if remaining > 600:
                if spec["requeue"] and cause.state in ("NODE_FAIL", "REQUEUED"):
                    # Slurm requeues it: same JobID, back to pending, the next run starts later
                    # (slurmdbd records each run with its own Submit time: the requeue)
                    resubmitted[id(job)] = dict(spec, work_s=remaining, run=spec["run"] + 1,
                                                submit_s=f.t0_s + float(rng.uniform(1, 30)))
                else:
                    delay = float(rng.uniform(1, 8) * 3600 if cause.name in SOFTWARE else rng.uniform(300, 3600))
                    resubmitted[id(job)] = dict(spec, work_s=remaining, submit_s=f.t0_s + delay, job_id=None, run=0)
                queue.insert(0, resubmitted[id(job)])
        elif rng.random() < 0.05:
            job.end_s = a + float(rng.uniform(0.1, 1.0)) * (planned_end - a)
            job.state, job.exit_code, job.reason = "CANCELLED", "0:15", SLURM_REASON
        if job.end_s is not None and job.end_s >= horizon:
            job.end_s, job.state, job.exit_code, job.reason = None, "RUNNING", "0:0", SLURM_REASON
            release(job)
        end = job.end_s if job.end_s is not None else horizon
        for h in hosts:
            free_at[h] = end + float(rng.uniform(120, 900))  # epilog / health check
        if job.failure is not None:
            fh = job.failure.host
            free_at[fh] = max(free_at[fh], job.failure.down_until_s + 300)
        plan.jobs.append(job)

    scheduler.run(horizon, n_hosts, sizes[-1], new_spec, start, free_at, arrivals, queue, rng, down_at, wakeups,
                  preempt=preempt, fill_skips=20)
    every = sorted((f for fs in per_host.values() for f in fs), key=lambda f: (f.t0_s, f.host))
    plan.failures = [f for f in every if f.t0_s < horizon]
    plan.down = sorted(((f.host, f.t0_s, f.down_until_s) for f in plan.failures if f.down_until_s > f.t0_s),
                       key=lambda d: d[1])
    return plan


# ---------------------------------------------------------------------------------------------------
# precursors, false alarms, events


def _lead_h(rng, cause_name: str) -> float:
    return float(np.clip(np.exp(rng.normal(np.log(LEAD_MEDIAN_H[cause_name]), LEAD_SIGMA)), LEAD_MIN_H, LEAD_MAX_H))


def _magnitude(step: RStep, s: float) -> float:
    if step.kind in ("rate", "multiply", "throttle") or (step.kind == "offset" and step.lo * step.hi > 0):
        return float(step.lo * (step.hi / step.lo) ** s)
    if step.kind == "flaps":
        return float(round(step.lo + (step.hi - step.lo) * s ** 2))
    return float(step.lo + (step.hi - step.lo) * s)


class _Planner:
    def __init__(self, cfg, topo, plan: Plan, rng):
        self.cfg, self.topo, self.plan, self.rng = cfg, topo, plan, rng
        self.dt, self.T = cfg.interval_s, cfg.steps
        self.effects: list[Effect] = []
        self.events: list[tuple] = []
        self.xid_steps: dict[tuple[int, int], list[int]] = {}
        self.reboots: dict[int, list[float]] = {}
        for h, _, b in plan.down:
            self.reboots.setdefault(h, []).append(b)

    def step(self, t_s: float) -> int:
        return int(math.ceil(t_s / self.dt - 1e-9))

    def next_reboot(self, h: int, t_s: float) -> float:
        later = [b for b in self.reboots.get(h, []) if b > t_s]
        return min(later) if later else self.T * self.dt

    def xid(self, t_s: float, h: int, gpu: str, code: int, text: str | None = None, pid: int | None = None):
        g = topology.GPUS.index(gpu)
        bus = topology.GPU_BUS[g]
        meta = xid.describe(code)
        who = f"pid={pid}, name=python3" if pid else "pid='<unknown>', name=<unknown>"
        self.events.append((t_s, h, gpu, "kernel", "xid", code,
                            f"NVRM: Xid (PCI:0000:{bus}:00): {code}, {who}, {text or meta.meaning}",
                            {"gpu_uuid": self.topo.hosts[h].gpu_uuids[g]}))
        k = self.step(t_s)
        if 0 <= k < self.T:
            self.xid_steps.setdefault((h, g), []).append(k)

    def flap_events(self, h: int, port: str, t_s: float):
        nic = int(port.split("_")[1].split("/")[0])
        dev = f"mlx5_core 0000:{topology.NIC_BUS[nic]}:00.0 {port.split('/')[0]}"
        self.events.append((t_s, h, port, "network", "link_down", 0, f"{dev}: Link down", {}))
        self.events.append((t_s + float(self.rng.uniform(2, 45)), h, port, "network", "link_up", 0, f"{dev}: Link up", {}))

    def chain(self, cause_name: str, h: int, comp: str, onset_s: float, end_s: float, s: float, shape: str,
              peak_frac: float, persistent: bool) -> list[dict]:
        """Effects (and events) of one chain on one part; returns the manifest's signal entries."""
        rng, dt = self.rng, self.dt
        weights = [w for w, _ in CHAINS[cause_name]]
        alt = int(rng.choice(len(weights), p=np.array(weights) / sum(weights)))
        steps = CHAINS[cause_name][alt][1]
        kept = [steps[0]] + [st for st in steps[1:] if rng.random() < PARTIAL_KEEP]
        lead = end_s - onset_s
        link = f"{comp}/nvlink{int(rng.integers(18))}" if comp in topology.GPUS else ""
        out = []
        for st in kept:
            a_s = onset_s + st.at * lead
            if a_s >= end_s - dt:
                continue
            k0, k1 = max(0, self.step(a_s)), min(self.T, self.step(end_s))
            if k1 <= k0:
                continue
            mag = _magnitude(st, s)
            if st.scope == "gpus":
                targets = list(topology.GPUS)
            elif st.scope == "host":
                targets = [""]
            elif st.cset == "nvlink":
                targets = [link]
            else:
                targets = [comp if comp in COMPONENT_SETS[st.cset] else COMPONENT_SETS[st.cset][0]]
            this_shape = shape if st.kind in ("rate", "multiply", "offset", "throttle") else \
                ("intermittent" if shape == "intermittent" and st.kind == "level" else "plateau")
            peak = k0 + int((k1 - k0) * peak_frac)
            bursts = self._bursts(k0, k1) if this_shape == "intermittent" else ()
            for name in targets:
                ci = COMPONENT_SETS[st.cset].index(name)
                m = mag * (float(rng.uniform(0.5, 1.0)) if st.scope == "gpus" else 1.0)
                if st.kind == "flag":
                    end_flag = min(self.T, self.step(self.next_reboot(h, a_s)))
                    self.effects.append(Effect(h, ci, st.metric, st.cset, "flag", "plateau", k0, end_flag, 1.0))
                    gpu = name
                    self.xid(a_s, h, gpu, 63, "Row Remapper: New row marked for remapping, reset gpu to activate.")
                    self.effects.append(Effect(h, ci, "gpu.row_remap.correctable", "gpu", "steps", "plateau", k0, k0 + 1,
                                               1.0, steps=(k0,)))
                    out.append(self._entry(st.metric, h, name, "flag", a_s, self.next_reboot(h, a_s), None))
                    out.append(self._entry("event:xid", h, name, "event", a_s, a_s, None) | {"code": 63})
                    continue
                if st.kind == "flaps":
                    n = max(1, int(mag))
                    ks = sorted({int(x) for x in rng.integers(k0, max(k0 + 1, k1), size=n)})
                    if st.metric == "net.link_down":
                        for kk in ks:
                            self.flap_events(h, name, kk * dt - float(rng.uniform(0, dt)))
                        # (the haystack derives ib.link_downed, ib.link_error_recovery and net.carrier_changes
                        # from net.link_down's flaps: a step of theirs too would count each flap twice)
                        self.effects.append(Effect(h, ci, "net.link_down", st.cset, "steps", "plateau", k0, k1, 1.0,
                                                   steps=tuple(ks)))
                        out.append(self._entry("event:link_down", h, name, "event", ks[0] * dt, ks[-1] * dt, n))
                    else:
                        self.effects.append(Effect(h, ci, st.metric, st.cset, "steps", "plateau", k0, k1, 1.0, steps=tuple(ks)))
                        for kk in ks:
                            self.events.append((kk * dt - float(rng.uniform(0, dt)), h, name, "ipmi", "psu_input_lost", 0,
                                                f"{name.upper()}: Power Supply input lost (AC/DC)", {}))
                    out.append(self._entry(st.metric, h, name, "flaps", ks[0] * dt, end_s, n))
                    continue
                burst = float(rng.uniform(1, 6)) if st.kind == "rate" else 1.0
                self.effects.append(Effect(h, ci, st.metric, st.cset, st.kind, this_shape, k0, k1, m, peak=peak,
                                           bursts=bursts, burst_size=burst))
                if persistent and st.kind in ("rate", "multiply"):
                    # the part keeps misbehaving a little after the episode and fades over days
                    tail = min(self.T, k1 + int(4 * 86400 / dt))
                    if tail > k1:
                        self.effects.append(Effect(h, ci, st.metric, st.cset, st.kind, "decay", k1, tail,
                                                   1 + (m - 1) * 0.15 if st.kind == "multiply" else m * 0.15,
                                                   tau_steps=86400 / dt, burst_size=burst))
                out.append(self._entry(st.metric, h, name, this_shape, a_s, end_s, m)
                           | ({"peak": iso(self.cfg.start_s + peak * dt)} if this_shape == "ramp" else {}))
        return out

    def _bursts(self, k0: int, k1: int) -> tuple[tuple[int, int], ...]:
        rng, dt = self.rng, self.dt
        out, k = [], k0
        while k < k1:
            length = max(1, int(rng.exponential(2400) / dt))
            out.append((k, min(k1, k + length)))
            k += length + max(1, int(rng.exponential(3 * 3600) / dt))
        return tuple(out)

    def _entry(self, metric, h, comp, shape, a_s, b_s, strength) -> dict:
        d = {"metric": metric, "host": self.topo.hosts[h].name, "component": comp, "shape": shape,
             "onset": iso(self.cfg.start_s + max(0.0, a_s)), "end": iso(self.cfg.start_s + min(b_s, self.T * self.dt))}
        if strength is not None:
            d["magnitude"] = round(float(strength), 4)
        return d


def _plan_everything(cfg, topo, plan: Plan, rng):
    P = _Planner(cfg, topo, plan, rng)
    dt, horizon = cfg.interval_s, cfg.steps * cfg.interval_s
    hosts = topo.hosts
    fail_entries = []
    job_ids = {}
    for n, f in enumerate(plan.failures, 1):
        cause = f.cause
        entry = {"id": f"F{n:04d}", "cause": cause.name, "host": hosts[f.host].name, "component": f.component,
                 "t0": iso(cfg.start_s + f.t0_s), "job_id": f.job.job_id if f.job else None,
                 "job_run": plan.runs.get(id(f.job)) if f.job else None,
                 "job_state": f.job.state if f.job else None, "exit_code": f.job.exit_code if f.job else None,
                 "interrupted_job": f.job is not None, "lemon": f.lemon, "correlated_event": f.correlated,
                 "down_until": iso(cfg.start_s + f.down_until_s) if f.down_until_s > f.t0_s else None,
                 "xids": [], "has_precursor": False, "precursor": None, "signals": []}
        if f.job is not None:
            job_ids[id(f.job)] = entry["id"]
        if cause.name in CHAINS and f.correlated is None and rng.random() < PRECURSOR_P:
            lead_s = _lead_h(rng, cause.name) * 3600
            onset_s = f.t0_s - lead_s
            s = float(rng.random())
            shape = SHAPES[int(rng.choice(3, p=[p for _, p in SHAPES]))][0]
            comp = f.component or _component(rng, cause)
            sigs = P.chain(cause.name, f.host, comp, onset_s, f.t0_s, s, shape, float(rng.uniform(0.4, 1.0)),
                           persistent=False)
            if sigs and self_visible(onset_s, f.t0_s, dt):
                entry.update(has_precursor=True, signals=sigs,
                             precursor={"metric": sigs[0]["metric"], "onset": iso(cfg.start_s + onset_s),
                                        "lead_h": round(lead_s / 3600, 3), "shape": shape, "strength": round(s, 4)})
        _terminal(P, f, entry, rng)
        fail_entries.append(entry)

    # false alarms: a fleet rate per up host-day, independent of the failure scale
    chained = [c for c in failures.CAUSES if c.name in CHAINS]
    w = np.array([c.count for c in chained], float)
    down_s = sum(b - a for _, a, b in plan.down)
    up_days = (len(hosts) * horizon - down_s) / 86400
    n_alarms = int(rng.poisson(FALSE_ALARMS_PER_HOST_DAY * up_days))
    alarm_entries = []
    for i in range(n_alarms):
        cause = chained[int(rng.choice(len(chained), p=w / w.sum()))]
        h = int(rng.integers(len(hosts)))
        dur = _lead_h(rng, cause.name) * 3600
        onset_s = float(rng.uniform(-0.2 * dur, horizon))
        end_s = min(onset_s + dur, horizon)
        s = float(rng.random())
        shape = SHAPES[int(rng.choice(3, p=[p for _, p in SHAPES]))][0]
        comp = _component(rng, cause)
        sigs = P.chain(cause.name, h, comp, onset_s, end_s, s, shape, float(rng.uniform(0.4, 1.0)), persistent=True)
        if sigs:
            alarm_entries.append({"id": f"A{i + 1:04d}", "like_cause": cause.name, "host": hosts[h].name,
                                  "component": comp, "onset": iso(cfg.start_s + max(0.0, onset_s)),
                                  "end": iso(cfg.start_s + end_s), "shape": shape, "strength": round(s, 4),
                                  "metric": sigs[0]["metric"], "signals": sigs})

    background = _background_events(P, cfg, plan, rng)
    confounders = []
    for c in plan.confounders:
        confounders.append({"kind": c["kind"], "failure_id": job_ids.get(id(c["job"])), "job_id": c["job"].job_id,
                            "hosts": [hosts[h].name for h in c["hosts"]], "start": iso(cfg.start_s + c["start_s"]),
                            "end": iso(cfg.start_s + c["end_s"]), "t0": iso(cfg.start_s + c["t0_s"]), "causal": False})
    fw = [hosts[f.host].firmware for f in _own_hardware(plan.failures)]
    share = topo.firmware_share()
    confounders.append({"kind": "firmware_over_representation", "firmware": topology.FW_HOT,
                        "host_share": round(share.get(topology.FW_HOT, 0.0), 4),
                        "failure_share": round(fw.count(topology.FW_HOT) / len(fw), 4) if fw else 0.0,
                        "failures_counted": "hardware failures of a host's own (no software, maintenance or "
                                            "correlated event)",
                        "causal": False,
                        "explanation": "the first-installed racks got this VBIOS first in the roll-out and their older "
                                       f"chassis fail {OLD_RACK_HAZARD:g}x as often; lemon hosts run it too (their "
                                       "swapped boards came from the depot with it); the firmware causes nothing"})
    confounders.append({"kind": "temperature_follows_load", "causal": False,
                        "explanation": "GPU, HBM, NVSwitch, NIC and CPU temperatures follow power and inlet air; "
                                       "heavy phases before failures raise them job-wide"})
    return P, fail_entries, alarm_entries, confounders, background


def _own_hardware(fs):
    return [f for f in fs if f.cause.name not in SOFTWARE and f.cause.name != "host_maintenance" and f.correlated is None]


def self_visible(onset_s: float, t0_s: float, dt: float) -> bool:
    return t0_s - max(onset_s, 0.0) >= dt


def _terminal(P: _Planner, f: RFailure, entry: dict, rng) -> None:
    """What the failure itself leaves in the logs at t0."""
    name, h = f.cause.name, f.host
    gpu = f.component if f.component in topology.GPUS else topology.GPUS[int(rng.integers(8))]
    codes: list[int] = []
    if name == "faulty_gpu":
        nvl = any(s["metric"].startswith("nvlink.") for s in entry["signals"])
        codes = ([74] + ([79] if rng.random() < 0.5 else [])) if nvl else ([79] if rng.random() < 0.85 else [])
    elif name == "hbm3":
        codes = ([48] if rng.random() < 0.3 else []) + ([94] if rng.random() < 0.7 else [95])
    elif name == "gpu_sram":
        codes = [48] if rng.random() < 0.85 else []
    elif name == "gpu_system_processor":
        codes = [119] if rng.random() < 0.7 else [120]
    elif name == "thermal":
        codes = [79] if rng.random() < 0.4 else []
    elif name == "software_bug":
        codes = [int(rng.choice([13, 31, 43]))] if rng.random() < 0.6 else []
    pid = int(rng.integers(1000, 4_000_000))
    for i, code in enumerate(codes):
        P.xid(f.t0_s - 2.0 + 0.5 * i, h, gpu, code, pid=pid if code in (13, 31, 43, 94) else None)
    entry["xids"] = codes
    job = f.job
    if f.cause.nccl_timeout and job is not None:
        seq = int(rng.integers(1_000, 9_000_000))
        for r, jh in enumerate(job.hosts):
            P.events.append((f.t0_s - float(rng.uniform(0.5, 5)), jh, "", "nccl", "nccl_timeout", 0,
                             f"[Rank {r * 8}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq + int(rng.integers(0, 3))}, "
                             f"OpType={rng.choice(['ALLREDUCE', 'ALLGATHER', 'REDUCE_SCATTER', '_ALLGATHER_BASE'])}, "
                             f"NumelIn={int(rng.choice([262144, 1048576, 67108864]))}, NumelOut=..., "
                             f"Timeout(ms)=600000) ran for {600000 + int(rng.integers(1, 4000))} milliseconds before timing out.",
                             {"job_id": job.job_id}))
    if name in ("network", "nic") and f.component in topology.BACKEND_NICS:
        t_down = f.t0_s - float(rng.uniform(1, 30))
        P.flap_events(h, f.component, t_down)
        # counted from the first scrape at or after the link went down (never the scrape before it:
        # that would show the failure up to an interval early, inside its own lead window)
        k = P.step(t_down)
        if 0 <= k < P.T:
            ci = topology.BACKEND_NICS.index(f.component)
            P.effects.append(Effect(h, ci, "net.link_down", "backend", "steps", "plateau", k, k + 1, 1.0, steps=(k,)))
    if name == "psu" and f.correlated is None and f.component in topology.PSUS:
        P.events.append((f.t0_s - 1.0, h, f.component, "ipmi", "psu_failure", 0,
                         f"{f.component.upper()}: Power Supply failure detected", {}))


def _background_events(P: _Planner, cfg, plan: Plan, rng) -> dict:
    """XIDs on healthy GPUs, 45s after killed jobs, background link flaps' events."""
    horizon = cfg.steps * cfg.interval_s
    H = len(P.topo.hosts)
    busy: dict[int, list[tuple[float, float, str]]] = {}
    for jb in plan.jobs:
        end = jb.end_s if jb.end_s is not None else horizon
        for h in jb.hosts:
            busy.setdefault(h, []).append((max(0.0, jb.start_s), end, jb.job_id))
    counts = {13: 0, 31: 0, 43: 0, 45: 0, 63: 0, 119: 0}
    job_bug = {}  # buggy jobs make most application XIDs
    for h in range(H):
        for a, b, job_id in busy.get(h, []):
            if job_id not in job_bug:
                job_bug[job_id] = float(10 ** rng.normal(-2.3, 0.8))
            for code, share in ((13, 0.3), (31, 0.5), (43, 0.2)):
                n = int(rng.poisson(job_bug[job_id] * share * (b - a) / 86400 * 8))
                for t in rng.uniform(a, b, n):
                    gpu = topology.GPUS[int(rng.integers(8))]
                    P.xid(float(t), h, gpu, code, pid=int(rng.integers(1000, 4_000_000)))
                    counts[code] += 1
    for jb in plan.jobs:
        if jb.state in ("FAILED", "CANCELLED", "TIMEOUT") and jb.end_s is not None and jb.end_s < horizon:
            for h in jb.hosts:
                if rng.random() < 0.5:
                    gpu = topology.GPUS[int(rng.integers(8))]
                    P.xid(jb.end_s + float(rng.uniform(0.5, 8)), h, gpu, 45)
                    counts[45] += 1
    for code, per_gpu_day in ((63, 0.0015), (119, 0.0006)):
        n = int(rng.poisson(per_gpu_day * H * 8 * horizon / 86400))
        for _ in range(n):
            h, t = int(rng.integers(H)), float(rng.uniform(0, horizon))
            if any(a <= t < b for hh, a, b in plan.down if hh == h):
                continue
            gpu = topology.GPUS[int(rng.integers(8))]
            if code == 63:
                P.xid(t, h, gpu, 63, "Row Remapper: New row marked for remapping, reset gpu to activate.")
                k = P.step(t)
                if 0 <= k < P.T:
                    P.effects.append(Effect(h, topology.GPUS.index(gpu), "gpu.row_remap.correctable", "gpu", "steps",
                                            "plateau", k, k + 1, 1.0, steps=(k,)))
            else:
                P.xid(t, h, gpu, 119, "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 "
                                      "(GSP_RM_CONTROL); the GPU recovered")
            counts[code] += 1
    return {"xids_on_healthy_gpus": counts}


def background_flaps(hay: Haystack, P: _Planner, cfg) -> None:
    """Turn the haystack's background flap rates into explicit flaps with events (deterministic)."""
    rng = np.random.default_rng([cfg.seed, 131])
    horizon = cfg.steps * cfg.interval_s
    n = rng.poisson(hay.flap_rate * horizon / 86400)
    hay.flap_rate = np.zeros_like(hay.flap_rate)  # the flaps below replace the haystack's random ones
    count = 0
    for h, c in zip(*np.nonzero(n)):
        ks = sorted(int(k) for k in rng.integers(0, P.T, int(n[h, c])))
        port = topology.BACKEND_NICS[c]
        for k in ks:
            P.flap_events(int(h), port, k * cfg.interval_s - float(rng.uniform(0, cfg.interval_s)))
        # (ib.link_downed, ib.link_error_recovery and net.carrier_changes follow net.link_down's flaps)
        P.effects.append(Effect(int(h), int(c), "net.link_down", "backend", "steps", "plateau", 0, P.T, 1.0,
                                steps=tuple(ks)))
        count += len(ks)
    return count


# ---------------------------------------------------------------------------------------------------
# tables


def _ms(cfg, t_s):
    return None if t_s is None else int(round((cfg.start_s + t_s) * 1000))


def _jobs_tables(cfg, topo, plan: Plan) -> tuple[pa.Table, pa.Table]:
    """One row per run, as ``sacct -D`` lists them: a requeued job's runs share the JobID and each
    has its own Submit time, which the store keys runs by (``run_ts``, migration 0007). The row's
    version is when sacct last saw the run in that state (its end, or the end of the horizon for
    a running job)."""
    names = topo.names
    horizon_ms = _ms(cfg, cfg.steps * cfg.interval_s)
    jobs = plan.jobs
    ver = [(_ms(cfg, j.end_s) if j.end_s is not None else horizon_ms) for j in jobs]
    jt = {
        "cluster": [cfg.cluster] * len(jobs), "job_id": [j.job_id for j in jobs], "name": [j.name for j in jobs],
        "user": [j.user for j in jobs], "partition": ["train"] * len(jobs), "state": [j.state for j in jobs],
        "exit_code": [j.exit_code for j in jobs], "reason": [j.reason or SLURM_REASON for j in jobs],
        "submit_ts": pa.array([_ms(cfg, j.submit_s) for j in jobs], schema.TS),
        "start_ts": pa.array([_ms(cfg, j.start_s) for j in jobs], schema.TS),
        "end_ts": pa.array([_ms(cfg, j.end_s) for j in jobs], schema.TS),
        "n_hosts": pa.array([len(j.hosts) for j in jobs], pa.uint32()),
        "n_gpus": pa.array([8 * len(j.hosts) for j in jobs], pa.uint32()),
        "version": pa.array([max(0, v) for v in ver], pa.uint64()),
    }
    rows = [(j, h, v) for j, v in zip(jobs, ver) for h in j.hosts]
    jh = {
        "cluster": [cfg.cluster] * len(rows), "job_id": [j.job_id for j, _, _ in rows],
        "host": [names[h] for _, h, _ in rows],
        "start_ts": pa.array([_ms(cfg, j.start_s) for j, _, _ in rows], schema.TS),
        "end_ts": pa.array([_ms(cfg, j.end_s) for j, _, _ in rows], schema.TS),
        "version": pa.array([max(0, v) for _, _, v in rows], pa.uint64()),
    }
    return pa.table(jt, schema=schema.JOBS), pa.table(jh, schema=schema.JOB_HOSTS)


def _job_events(cfg, plan: Plan) -> list[tuple]:
    out = []
    horizon = cfg.steps * cfg.interval_s
    for jb in plan.jobs:
        run = plan.runs.get(id(jb), 0)
        attrs = {"job_id": jb.job_id, "restarts": str(run)}
        if 0 <= jb.start_s < horizon:
            for h in jb.hosts:
                out.append((jb.start_s, h, "", "scheduler", "job_state", 0,
                            f"job {jb.job_id} ({jb.name}) RUNNING on {len(jb.hosts)} nodes"
                            + (f" (requeued, restart {run})" if run else ""), attrs | {"state": "RUNNING"}))
        if jb.end_s is not None and 0 <= jb.end_s < horizon:
            for h in jb.hosts:
                out.append((jb.end_s, h, "", "scheduler", "job_state", 0,
                            f"job {jb.job_id} ({jb.name}) {jb.state} ExitCode={jb.exit_code}", attrs | {"state": jb.state}))
    for h, a, b in plan.down:
        if b < horizon:
            out.append((b, h, "", "kernel", "boot", 0, "Linux version 5.15.0-122-generic: system booted", {}))
    return out


def estimated_samples(cfg) -> int:
    return cfg.hosts * cfg.steps * estimated_series_per_host()


def generate(cfg, manifest=None):
    """Yield (table, Arrow table) batches of the realistic scenario; fill ``manifest``."""
    from telemetry.simulator import _events_table, _rng, _timeline

    topo = topology.build(cfg.cluster, cfg.hosts, _rng(cfg, 1))
    horizon = cfg.steps * cfg.interval_s
    plan = _schedule(topo, horizon, cfg.failure_scale, _rng(cfg, 2), cfg.interval_s)
    P, fail_entries, alarm_entries, confounders, background = _plan_everything(cfg, topo, plan, _rng(cfg, 3))
    rack_of = np.array([int(h.rack.split("-")[1]) for h in topo.hosts])
    hay = Haystack(cfg.hosts, cfg.interval_s, cfg.start_s, cfg.seed, plan.jobs, [], rack_of)
    background["link_flaps"] = background_flaps(hay, P, cfg)
    for (h, g), ks in P.xid_steps.items():
        P.effects.append(Effect(h, g, "gpu.xid_count", "gpu", "steps", "plateau", 0, P.T, 1.0, steps=tuple(ks)))
    for e in P.effects:
        hay.effects.setdefault((e.metric, e.cset), []).append(e)
    events = P.events + _job_events(cfg, plan)
    ev = _events_table(cfg, topo, events)

    if manifest is not None:
        host_days = cfg.hosts * horizon / 86400
        up_days = host_days - sum(b - a for _, a, b in plan.down) / 86400
        n_int = sum(1 for f in plan.failures if f.job is not None)
        with_pre = sum(1 for e in fail_entries if e["has_precursor"])
        hw = [e for e in fail_entries if e["cause"] not in SOFTWARE and e["cause"] != "host_maintenance"]
        manifest.scenario = "realistic"
        manifest.config = {"scenario": "realistic", "cluster": cfg.cluster, "hosts": cfg.hosts, "days": cfg.days,
                           "interval_s": cfg.interval_s, "seed": cfg.seed, "start": iso(cfg.start_s),
                           "failure_scale": cfg.failure_scale}
        manifest.cause_weights = {c.name: c.count for c in failures.CAUSES}
        manifest.failures = fail_entries
        manifest.false_alarms = alarm_entries
        manifest.red_herrings = []
        manifest.extra = {
            "confounders": confounders,
            "lemons": [{"host": topo.hosts[h].name, "hazard": round(float(plan.hazard[h]), 3),
                        "failures": sum(1 for f in plan.failures if f.host == h)} for h in plan.lemons],
            "correlated_events": [{"id": c["id"], "kind": c["kind"], "where": c["where"], "cause": c["cause"],
                                   "t0": iso(cfg.start_s + c["t0"]), "hosts": [topo.hosts[h].name for h in c["hosts"]]}
                                  for c in plan.correlated],
            "true_precursor": dict(TRUE_PRECURSOR),
            "requeued_runs": [{"job_id": j.job_id, "run": plan.runs[id(j)], "start": iso(cfg.start_s + j.start_s)}
                              for j in plan.jobs if plan.runs.get(id(j))],
            "background": background,
            "rates": {"nominal_failures_per_host_day": round(failures.LLAMA_RATE_PER_HOST_DAY * cfg.failure_scale, 6),
                      "realised_failures_per_up_host_day": round(len(plan.failures) / up_days, 6) if up_days else None,
                      "interruptions_per_host_day": round(n_int / host_days, 6),
                      "false_alarms_per_host_day": FALSE_ALARMS_PER_HOST_DAY,
                      "hardware_failures": len(hw),  # host maintenance is a drain, not a failure: not counted
                      "hardware_failures_without_precursor": sum(1 for e in hw if not e["has_precursor"]),
                      "precursors": with_pre, "false_alarm_episodes": len(alarm_entries),
                      # share of host-time running a job, and of hardware failures that struck one
                      "busy_share": round(_busy_host_s(plan.jobs, horizon) / (cfg.hosts * horizon), 4),
                      "hardware_failures_interrupting": round(sum(1 for e in hw if e["interrupted_job"]) / len(hw), 4)
                      if hw else None,
                      "preempted_runs": sum(1 for j in plan.jobs if j.state == "PREEMPTED")},
        }
        manifest.counts = {"events": ev.num_rows, "jobs": len({j.job_id for j in plan.jobs}), "job_runs": len(plan.jobs),
                           "interruptions": n_int, "failures": len(plan.failures),
                           "false_alarms": len(alarm_entries), "confounders": len(confounders), "samples": 0}

    up_ms = _ms(cfg, 0)
    yield "hosts", topology.hosts_table(topo, up_ms)
    yield "components", _components_table(topo, up_ms)
    jt, jh = _jobs_tables(cfg, topo, plan)
    yield "jobs", jt
    yield "job_hosts", jh
    yield "events", ev
    yield from _sample_batches(cfg, topo, plan, hay, manifest, _timeline)


def _busy_host_s(jobs, horizon: float) -> float:
    """Host-seconds of the horizon spent running a job."""
    return sum(max(0.0, min(j.end_s if j.end_s is not None else horizon, horizon) - max(j.start_s, 0.0)) * len(j.hosts)
               for j in jobs)


def _components_table(topo, up_ms) -> pa.Table:
    base = topology.components_table(topo, up_ms)
    rows = {name: [] for name in schema.COMPONENTS.names}
    for host in topo.hosts:
        for name in COMPONENT_SETS["nvlink"]:
            gpu, link = name.split("/")
            for key, value in (("cluster", topo.cluster), ("host", host.name), ("component", name), ("kind", "nvlink"),
                               ("model", "NVLink4"), ("serial", ""), ("uuid", ""), ("pci_bus_id", ""), ("firmware", ""),
                               ("peer", f"nvswitch{int(link[6:]) % 4}"), ("updated", up_ms)):
                rows[key].append(value)
        for cpu in COMPONENT_SETS["cpu"]:
            for key, value in (("cluster", topo.cluster), ("host", host.name), ("component", cpu), ("kind", "cpu"),
                               ("model", "Intel Xeon Platinum 8480+"), ("serial", ""), ("uuid", ""), ("pci_bus_id", ""),
                               ("firmware", ""), ("peer", ""), ("updated", up_ms)):
                rows[key].append(value)
    rows["updated"] = pa.array(rows["updated"], schema.TS)
    return pa.concat_tables([base, pa.table(rows, schema=schema.COMPONENTS)])


def _sample_batches(cfg, topo, plan: Plan, hay: Haystack, manifest, timeline):
    def chunk(k0: int, k1: int):
        tl = timeline(cfg, plan, plan.jobs, None, k0, k1)
        return tl.up, hay.chunk(k0, k1, tl)

    return sample_batches(cfg, topo.names, COMPONENT_SETS, SERIES, MAX_CHUNK_CELLS, chunk, manifest)
