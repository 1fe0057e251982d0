"""Batch scheduler of the simulated fleet: jobs, host allocations, interruptions.

A FIFO queue with backfill over the whole horizon, in seconds from the start
of the simulation. Jobs arrive as a Poisson stream sized to keep ~85% of the
fleet busy; the fleet starts mid-flight (jobs already running at t=0). Sizes
are 2 hosts up to half the fleet; durations are log-normal (median 10 h,
1 h..72 h). The biggest jobs take the lowest-numbered free hosts, small jobs the
highest, so the first racks run the big jobs (see topology's firmware note).

Failures: while a job runs on n hosts, its time to interruption is exponential
with rate ``n * LLAMA_RATE_PER_HOST_DAY * failure_scale``. The root cause is
drawn from the Llama 3 mix; the failing host is one of the job's hosts. The job
ends in the cause's Slurm state and is requeued (a new job id, same name, the
remaining work); hardware causes take the host out of service for a few hours,
after which it reboots (counters reset). A few healthy jobs are cancelled by
their users (CANCELLED is not an interruption).

Each job carries the workload facts the signal generator needs: step time,
checkpoint period/offset/duration, and "heavy phases" (+power, +temperature).
Two red herrings are placed here: for about half of the interrupted jobs a
heavy phase ends just before t0, and for about 40% a checkpoint write starts
1-8 min before t0.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from telemetry.simulator import failures
from telemetry.simulator.failures import Cause
from telemetry.simulator.topology import BACKEND_NICS, DISKS, FANS, GPUS, PSUS, Topology

MODELS = ("llm-405b", "llm-70b", "llm-8b", "moe-236b", "vlm-34b", "rm-70b", "eval-sweep")
USERS = ("mlperf", "pretrain", "alignment", "multimodal", "evals", "infra-canary")


@dataclass
class Job:
    job_id: str
    name: str
    user: str
    hosts: list[int]
    submit_s: float
    start_s: float
    end_s: float | None  # None: still running at the end of the horizon
    state: str
    exit_code: str = "0:0"
    reason: str = ""
    step_time_s: float = 6.0
    power_frac: float = 0.9  # share of the GPU's busy power the workload draws
    ckpt_period_s: float = 3600.0
    ckpt_offset_s: float = 0.0
    ckpt_dur_s: float = 240.0
    heavy: list[tuple[float, float, float]] = field(default_factory=list)  # (start_s, end_s, extra power share)
    hang_s: float = 0.0  # the job hung this long before end_s
    failure: "Failure | None" = None


@dataclass
class Failure:
    cause: Cause
    host: int
    component: str
    t0_s: float
    job: Job
    down_until_s: float  # == t0_s when the host stays in service


@dataclass
class Schedule:
    jobs: list[Job]
    failures: list[Failure]
    down: list[tuple[int, float, float]]  # (host, from_s, until_s); the host reboots at until_s
    red_herrings: list[dict]


def _size_choices(n_hosts: int) -> tuple[list[int], np.ndarray]:
    sizes = [s for s in (2, 4, 8, 16, 32, 64, 128, 256) if s <= max(2, n_hosts // 4)]
    big = max(2, n_hosts // 2)
    if big not in sizes:
        sizes.append(big)
    weights = np.array([1.0 / (1 + 0.35 * i) for i in range(len(sizes))])
    return sizes, weights / weights.sum()


def spec_maker(rng: np.random.Generator, sizes: list[int], size_p: np.ndarray):
    """A job-spec factory: each call draws a job's size, model (the largest size runs the flagship
    model), user and log-normal duration (median 10 h, clipped to 1–72 h) for a submit time. The
    draws are in a fixed order, so a seed gives the same jobs wherever this is used."""
    counters = {m: 0 for m in MODELS}

    def new_spec(submit_s: float) -> dict:
        n = int(rng.choice(sizes, p=size_p))
        model = MODELS[0] if n == sizes[-1] else MODELS[int(rng.integers(1, len(MODELS)))]
        counters[model] += 1
        dur = float(np.clip(np.exp(rng.normal(np.log(10 * 3600), 0.8)), 3600, 72 * 3600))
        return {"name": f"{model}-{counters[model]}", "user": USERS[int(rng.integers(len(USERS)))], "n": n,
                "work_s": dur, "submit_s": submit_s}

    return new_spec


def _component(rng: np.random.Generator, cause: Cause) -> str:
    kind = cause.component_kind
    pool = {"gpu": GPUS, "nic": BACKEND_NICS, "fan": FANS, "psu": PSUS, "disk": DISKS}.get(kind)
    return pool[int(rng.integers(len(pool)))] if pool else ""


def schedule(topo: Topology, horizon_s: float, failure_scale: float, rng: np.random.Generator) -> Schedule:
    n_hosts = len(topo.hosts)
    sizes, size_p = _size_choices(n_hosts)
    rate_host_s = failures.LLAMA_RATE_PER_HOST_DAY * failure_scale / 86400.0
    mean_size = float(np.dot(sizes, size_p))
    mean_dur = 10 * 3600 * np.exp(0.8**2 / 2)
    arrivals_per_s = 0.85 * n_hosts / (mean_size * mean_dur)

    next_id = [100000 + int(rng.integers(0, 800000))]
    new_spec = spec_maker(rng, sizes, size_p)

    queue: list[dict] = []
    t_arr = 0.0
    arrivals: list[dict] = []
    while t_arr < horizon_s:
        t_arr += float(rng.exponential(1.0 / arrivals_per_s))
        arrivals.append(new_spec(t_arr))

    free_at = np.zeros(n_hosts)
    jobs: list[Job] = []
    fails: list[Failure] = []
    down: list[tuple[int, float, float]] = []
    red: list[dict] = []

    def start(spec: dict, t: float, hosts: list[int], already_run_s: float = 0.0) -> None:
        job_id = str(next_id[0])
        next_id[0] += int(rng.integers(1, 40))
        begin = t - already_run_s
        planned_end = begin + spec["work_s"]
        job = Job(job_id, spec["name"], spec["user"], hosts, min(spec["submit_s"], begin), begin, planned_end,
                  "COMPLETED", step_time_s=float(rng.uniform(3.0, 12.0)), power_frac=float(rng.uniform(0.82, 0.97)),
                  ckpt_period_s=float(rng.choice([1800, 2700, 3600])), ckpt_offset_s=float(rng.uniform(0, 1800)),
                  ckpt_dur_s=float(rng.uniform(150, 420)))
        run_s = planned_end - max(begin, 0.0)
        for _ in range(int(rng.poisson(run_s / (12 * 3600)))):
            hs = float(rng.uniform(max(begin, 0.0), planned_end))
            job.heavy.append((hs, hs + float(rng.uniform(1800, 5400)), float(rng.uniform(0.06, 0.1))))
        ttf = float(rng.exponential(1.0 / (rate_host_s * len(hosts))))
        t0 = max(begin, 0.0) + ttf
        if t0 < planned_end:
            cause = failures.sample_causes(rng, 1)[0]
            host = hosts[int(rng.integers(len(hosts)))]
            comp = _component(rng, cause)
            lo, hi = cause.down_h
            down_until = t0 + (float(rng.uniform(lo, hi)) * 3600 if hi > 0 else 0.0)
            rank = hosts.index(host) * 8 + (GPUS.index(comp) if comp in GPUS else 0)
            job.end_s, job.state = t0, cause.state
            job.exit_code = {"FAILED": "1:0", "NODE_FAIL": "0:0", "TIMEOUT": "0:0", "REQUEUED": "0:0"}[cause.state]
            job.reason = cause.reason.format(host=topo.hosts[host].name, rank=rank)
            job.hang_s = cause.hang_min * 60.0
            f = Failure(cause, host, comp, t0, job, down_until)
            job.failure = f
            fails.append(f)
            if down_until > t0:
                down.append((host, t0, down_until))
            if rng.random() < 0.5:
                hs = t0 - float(rng.uniform(0, 900))
                he = hs
                hs = he - float(rng.uniform(2700, 7200))
                job.heavy.append((hs, he, float(rng.uniform(0.07, 0.1))))
                red.append({"kind": "heavy_phase_before_failure", "job_id": job_id, "hosts": hosts,
                            "start_s": hs, "end_s": he, "t0_s": t0})
            if rng.random() < 0.4:
                lead = float(rng.uniform(60, 480))
                job.ckpt_offset_s = (t0 - lead - begin) % job.ckpt_period_s
                job.ckpt_dur_s = min(job.ckpt_dur_s, lead + 60)
                red.append({"kind": "checkpoint_before_failure", "job_id": job_id, "hosts": hosts,
                            "start_s": t0 - lead, "end_s": t0 - lead + job.ckpt_dur_s, "t0_s": t0})
            remaining = planned_end - t0
            if remaining > 600:
                queue.insert(0, dict(spec, work_s=remaining, submit_s=t0 + 1))
        elif rng.random() < 0.05:
            job.end_s = max(begin, 0.0) + float(rng.uniform(0.1, 1.0)) * (planned_end - max(begin, 0.0))
            job.state, job.exit_code, job.reason = "CANCELLED", "0:15", "cancelled by user"
        if job.end_s is not None and job.end_s >= horizon_s:
            job.end_s, job.state, job.exit_code, job.reason = None, "RUNNING", "0:0", ""
            if job.failure is not None:
                fails.remove(job.failure)
                if job.failure.down_until_s > job.failure.t0_s:
                    down.pop()
                red[:] = [r for r in red if r["job_id"] != job_id]
                job.failure, job.hang_s = None, 0.0
        end = job.end_s if job.end_s is not None else horizon_s
        for h in hosts:
            free_at[h] = end + float(rng.uniform(120, 900))  # epilog / health check
        if job.failure is not None:
            free_at[job.failure.host] = max(free_at[job.failure.host], job.failure.down_until_s + 300)
        jobs.append(job)

    run(horizon_s, n_hosts, sizes[-1], new_spec, start, free_at, arrivals, queue, rng)
    return Schedule(jobs, sorted(fails, key=lambda f: f.t0_s), sorted(down, key=lambda d: d[1]), red)


def run(horizon_s: float, n_hosts: int, largest: int, new_spec, start, free_at, arrivals: list[dict], queue: list[dict],
        rng, down_until=None, wakeups=None, preempt=None, fill_skips: int = 0) -> None:
    """The scheduler's loop, shared by both scenarios. The fleet is mid-flight at t=0: ~85 % of it
    runs jobs that started earlier. Then, at each moment something changes (a host frees up or comes
    back, a job is submitted), the first queued job that fits starts; the largest jobs take the
    lowest-numbered free hosts, the others the highest. ``start(spec, t, hosts, already_run_s=0)``
    sets ``free_at`` of its hosts and may queue a resubmission; ``down_until(h, t)`` (None when up)
    and the sorted reboot times ``wakeups`` keep jobs off hosts that are down. ``preempt(spec, t,
    idle)`` (the realistic scenario), asked for the first queued job of the largest size when nothing
    in the queue fits, may end running jobs to make room for it (True: it did, the hosts are free).
    ``fill_skips``: how many drawn jobs that would overshoot ~85 % the mid-flight start skips before
    it stops (0: it stops at the first, and the fleet may start far below 85 %)."""
    def free(t: float) -> list[int]:
        return [h for h in range(n_hosts) if free_at[h] <= t and (down_until is None or down_until(h, t) is None)]

    def hosts_for(n: int, idle: list[int]) -> list[int]:
        return sorted(idle[:n] if n == largest else idle[-n:])

    busy_target = int(0.85 * n_hosts)
    skipped = 0
    while True:
        spec = new_spec(0.0)
        idle = free(0.0)
        if n_hosts - len(idle) + spec["n"] > busy_target or spec["n"] > len(idle):
            skipped += 1
            if skipped > fill_skips:
                break
            continue
        hosts = hosts_for(spec["n"], idle)
        spec["submit_s"] = -float(rng.uniform(0.5, 1.0)) * spec["work_s"]
        start(spec, 0.0, hosts, already_run_s=float(rng.uniform(0.05, 0.8)) * spec["work_s"])
    t, ai = 0.0, 0
    while t < horizon_s:
        while ai < len(arrivals) and arrivals[ai]["submit_s"] <= t:
            queue.append(arrivals[ai])
            ai += 1
        idle = free(t)
        spec = next((s for s in queue if s["submit_s"] <= t and s["n"] <= len(idle)), None)
        if spec is not None:
            queue.remove(spec)
            start(spec, t, hosts_for(spec["n"], idle))
            continue
        if preempt is not None:
            head = next((s for s in queue if s["submit_s"] <= t and s["n"] == largest), None)
            if head is not None and preempt(head, t, idle):
                continue
        nxt = [x for x in free_at if x > t]
        if wakeups is not None:
            nxt += list(wakeups[np.searchsorted(wakeups, t, side="right"):][:1])
        if ai < len(arrivals):
            nxt.append(arrivals[ai]["submit_s"])
        nxt += [s["submit_s"] for s in queue if s["submit_s"] > t]
        if not nxt:
            break
        t = min(nxt)
