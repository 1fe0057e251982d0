"""Fleet simulator: deterministic GPU-cluster telemetry with injected failure
precursors, red herrings and a ground-truth manifest.

It is Precursor's demo data and the yardstick of the analysis engine. The
pieces: ``topology`` (racks, switches, hosts and their parts, inventory
tables), ``scheduler`` (jobs, allocations, interruptions), ``failures`` (the
Llama 3 root-cause mix and each cause's precursor chain and lead time),
``signals`` (vectorised metric generation) and ``manifest`` (the JSON ground
truth, format documented there).

``generate(config)`` yields ``(table_name, pyarrow.Table)`` batches in the
``telemetry.schema`` schemas and fills a ``Manifest``; ``simulate(config)``
writes those batches through ``telemetry.writer.write`` (the same path real
data takes), generating the next batch in a background thread while the
current one is inserted. The same config and seed give identical batches; the
writer's content token makes a rerun into the same store a no-op.

False alarms: the same chain shapes on healthy hosts with no failure, about one
for every two failures that have a chain. Red herrings are described in
``scheduler`` (heavy phases and checkpoints just before failures) and
``topology`` (firmware on the busiest racks).
"""
from __future__ import annotations

import math
import queue
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa

from telemetry import schema, xid
from telemetry.simulator import failures, scheduler, signals, topology
from telemetry.simulator.batches import sample_batches
from telemetry.simulator.manifest import Manifest, iso
from telemetry.simulator.signals import COMPONENT_SETS, SERIES, Injection, Timeline

SCENARIOS = ("demo", "realistic")
MAX_CHUNK_CELLS = 400_000  # hosts x steps per chunk: bounds memory (~8 GPUs x 8 B x a few arrays)


@dataclass(frozen=True)
class SimConfig:
    hosts: int = 48
    days: float = 3.0
    interval_s: int = 60
    seed: int = 1
    start: datetime = datetime(2026, 1, 1, tzinfo=timezone.utc)
    cluster: str = "demo"
    failure_scale: float = 60.0  # x the Llama 3 per-host interruption rate (0.0038 per host-day)
    scenario: str = "demo"  # demo | realistic (telemetry.simulator.realistic)

    def __post_init__(self):
        if self.hosts < 2:
            raise ValueError("hosts: need at least 2 hosts")
        if not (0 < self.days <= 400):
            raise ValueError("days: must be in (0, 400]")
        if not (1 <= self.interval_s <= 3600):
            raise ValueError("interval: must be 1..3600 seconds")
        if self.failure_scale < 0:
            raise ValueError("failure-scale: must be >= 0")
        if self.scenario not in SCENARIOS:
            raise ValueError(f"scenario: {self.scenario!r} is not one of {', '.join(SCENARIOS)}")
        if self.start.tzinfo is None:
            raise ValueError("start: must be timezone-aware (UTC)")

    @property
    def steps(self) -> int:
        return int(self.days * 86400 // self.interval_s)

    @property
    def start_s(self) -> float:
        return self.start.timestamp()

    def estimated_samples(self) -> int:
        if self.scenario == "realistic":
            from telemetry.simulator import realistic
            return realistic.estimated_samples(self)
        per_host = sum(len(COMPONENT_SETS[c]) for _, c in SERIES)
        return self.hosts * self.steps * per_host


def _rng(cfg: SimConfig, stream: int) -> np.random.Generator:
    return np.random.default_rng([cfg.seed, stream])


# ---------------------------------------------------------------------------------------------------
# precursors and false alarms


def _chain_of(cause: failures.Cause, rng) -> tuple[tuple, tuple]:
    if cause.alt is not None and rng.random() < cause.alt[0]:
        return cause.alt[1], cause.alt[2]
    return cause.chain, cause.terminal_xids


def _expand(step: failures.Step, host: int, comp: str, job_idx: int, onset: int, end: int, rng,
            n_steps: int) -> list[tuple[Injection, str]]:
    """A chain step -> injections (with the component name each is on)."""
    if step.component == "gpus":
        targets = list(topology.GPUS)
    elif step.component == "job" or step.metric == "job.step_time_s":
        targets = [""]
    else:
        targets = [comp]
    out = []
    for name in targets:
        metric = step.metric
        if metric.startswith("event:"):
            cset_list = topology.GPUS
        else:
            cset_list = COMPONENT_SETS[signals.component_set_for(Injection(0, 0, metric, "", 0, 0))]
        ci = cset_list.index(name) if name in cset_list else 0
        flaps: tuple[int, ...] = ()
        if step.shape == "flaps":
            extra = rng.integers(onset + 1, max(onset + 2, end), size=int(rng.integers(2, 7)))
            flaps = tuple(sorted({onset, *[int(x) for x in extra if x < min(end, n_steps)]}))
        out.append((Injection(host, ci, metric, step.shape, onset, end, step.lo, step.hi, flaps, job_idx), name))
    return out


def _plan_signals(cfg, topo, sched, jobs_index, rng):
    """Turn failures' chains and false alarms into injections and manifest entries."""
    dt, T = cfg.interval_s, cfg.steps
    up_since: dict[int, list[tuple[float, float]]] = {}
    for h, a, b in sched.down:
        up_since.setdefault(h, []).append((a, b))

    def last_up(h: int, t: float) -> float:
        best = 0.0
        for a, b in up_since.get(h, []):
            if b <= t:
                best = max(best, b)
        return best

    def step_at(t_s: float) -> int:
        return int(math.ceil(t_s / dt - 1e-9))

    injections: list[Injection] = []
    fail_entries, alarm_entries = [], []
    events: list[tuple] = []  # (t_s, host, component, source, kind, code, message, attrs)
    hosts = topo.hosts

    def sig_entry(inj: Injection, comp: str, step, code=0) -> dict:
        d = {"metric": inj.metric, "host": hosts[inj.host].name, "component": comp, "shape": inj.shape,
             "onset": iso(cfg.start_s + inj.onset * dt), "end": iso(cfg.start_s + inj.end * dt)}
        if code:
            d["code"] = code
        return d

    def add_chain(chain, host, comp, job_idx, onset_s, end_s, job_start_s):
        entries = []
        k_onset, k_end = step_at(onset_s), min(step_at(end_s), T)
        lead = end_s - onset_s
        for step in chain:
            k = step_at(onset_s + step.at * lead)
            if k >= k_end - 1:
                continue
            if step.shape == "slowdown" and (job_idx < 0 or k * dt < job_start_s + 1800):
                continue
            for inj, name in _expand(step, host, comp, job_idx, k, k_end, rng, T):
                if step.shape == "xid":
                    bus = topology.GPU_BUS[topology.GPUS.index(name)]
                    events.append((k * dt, host, name, "kernel", "xid", step.code,
                                   f"NVRM: Xid (PCI:0000:{bus}:00): {step.code}, pid=<unknown>, name=<unknown>, "
                                   "Row Remapper: New row marked for remapping, reset gpu to activate.", {}))
                    entries.append(sig_entry(inj, name, step, step.code) | {"metric": "event:xid"})
                    continue
                injections.append(inj)
                if step.shape == "flaps" and step.metric == "net.link_down":
                    for f in inj.flap_steps:
                        port = name.split("/")[0]
                        events.append((f * dt, host, name, "network", "link_down", 0,
                                       f"mlx5_core 0000:{topology.NIC_BUS[int(port.split('_')[1])]}:00.0 {port}: "
                                       "Link down", {}))
                        events.append((f * dt + float(rng.uniform(3, 40)), host, name, "network", "link_up", 0,
                                       f"mlx5_core 0000:{topology.NIC_BUS[int(port.split('_')[1])]}:00.0 {port}: "
                                       "Link up", {}))
                    entries.append(sig_entry(inj, name, step))
                    entries.append({**sig_entry(inj, name, step), "metric": "event:link_down", "shape": "event"})
                    continue
                entries.append(sig_entry(inj, name, step))
        return entries

    for n, f in enumerate(sched.failures, 1):
        cause = f.cause
        chain, xids = _chain_of(cause, rng)
        job_idx = jobs_index[f.job.job_id]
        entry = {"id": f"F{n:04d}", "cause": cause.name, "host": hosts[f.host].name, "component": f.component,
                 "t0": iso(cfg.start_s + f.t0_s), "job_id": f.job.job_id, "job_state": f.job.state,
                 "reason": f.job.reason, "xids": list(xids),
                 "down_until": iso(cfg.start_s + f.down_until_s) if f.down_until_s > f.t0_s else None,
                 "has_precursor": False, "lead_h": None, "signals": []}
        if chain and rng.random() < cause.precursor_p:
            lead_s = failures.draw_lead_h(rng, cause) * 3600
            earliest = max(1800.0, last_up(f.host, f.t0_s) + 1800.0)
            onset_s = max(f.t0_s - lead_s, earliest)
            if f.t0_s - onset_s >= 4 * cfg.interval_s and f.t0_s - onset_s >= 600:
                sigs = add_chain(chain, f.host, f.component, job_idx, onset_s, f.t0_s, f.job.start_s)
                if sigs:
                    entry.update(has_precursor=True, lead_h=round((f.t0_s - onset_s) / 3600, 3), signals=sigs)
        # the failure itself: XIDs on the GPU (thermal: the hottest one falls off the bus)
        gpu = f.component if f.component in topology.GPUS else topology.GPUS[int(rng.integers(8))]
        bus = topology.GPU_BUS[topology.GPUS.index(gpu)]
        for i, code in enumerate(xids):
            meta = xid.describe(code)
            events.append((f.t0_s - 2.0 + i * 0.5, f.host, gpu, "kernel", "xid", code,
                           f"NVRM: Xid (PCI:0000:{bus}:00): {code}, pid=<unknown>, name=<unknown>, {meta.meaning}",
                           {"gpu_uuid": hosts[f.host].gpu_uuids[topology.GPUS.index(gpu)]}))
        if cause.nccl_timeout:
            for r, h in enumerate(f.job.hosts):
                events.append((f.t0_s - 1.0, h, "", "nccl", "nccl_timeout", 0,
                               f"[Rank {r * 8}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=81723, "
                               f"OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for "
                               f"{600000 + int(rng.integers(1, 400))} milliseconds before timing out.",
                               {"job_id": f.job.job_id}))
        fail_entries.append(entry)

    # false alarms: same shapes, healthy hosts, no failure follows
    chained = [c for c in failures.CAUSES if c.chain]
    w = np.array([c.count for c in chained], float)
    n_alarms = int(round(0.5 * sum(1 for e in fail_entries if e["has_precursor"]))) + 1
    fail_times = {}
    for f in sched.failures:
        fail_times.setdefault(f.host, []).append(f.t0_s)
    horizon = T * dt
    tries = 0
    while len(alarm_entries) < n_alarms and tries < 200:
        tries += 1
        cause = chained[int(rng.choice(len(chained), p=w / w.sum()))]
        host = int(rng.integers(len(hosts)))
        dur = failures.draw_lead_h(rng, cause) * 3600
        onset_s = float(rng.uniform(1800, max(1801, horizon - dur)))
        end_s = min(onset_s + dur, horizon)
        if any(onset_s - 3600 < t < end_s + 12 * 3600 for t in fail_times.get(host, [])):
            continue
        if any(a < end_s and b > onset_s - 1800 for a, b in up_since.get(host, [])):
            continue
        if end_s - onset_s < 600:
            continue
        comp = scheduler._component(rng, cause)
        chain = [s for s in _chain_of(cause, rng)[0] if s.shape != "slowdown"]
        sigs = add_chain(chain, host, comp, -1, onset_s, end_s, 0.0)
        if sigs:
            alarm_entries.append({"id": f"A{len(alarm_entries) + 1:04d}", "like_cause": cause.name,
                                  "host": hosts[host].name, "component": comp, "onset": sigs[0]["onset"],
                                  "end": iso(cfg.start_s + end_s), "signals": sigs})
    return injections, fail_entries, alarm_entries, events


# ---------------------------------------------------------------------------------------------------
# timeline and tables


def _timeline(cfg: SimConfig, sched, jobs, slow_injections, k0: int, k1: int) -> Timeline:
    H, T, dt = cfg.hosts, k1 - k0, cfg.interval_s
    t_s = (np.arange(k0, k1) * dt).astype(float)
    job = np.full((H, T), -1, np.int32)
    inten = np.zeros((H, T))
    ckpt = np.zeros((H, T), bool)
    hang = np.zeros((H, T), bool)
    step = np.full((H, T), np.nan)
    for j, jb in enumerate(jobs):
        end = jb.end_s if jb.end_s is not None else math.inf
        a = max(k0, int(math.ceil(jb.start_s / dt)))
        b = min(k1, int(math.ceil(end / dt)) if end != math.inf else k1)
        if a >= b:
            continue
        sl = slice(a - k0, b - k0)
        tt = t_s[sl]
        ck = ((tt - jb.start_s - jb.ckpt_offset_s) % jb.ckpt_period_s) < jb.ckpt_dur_s
        it = np.full(b - a, jb.power_frac)
        for hs, he, extra in jb.heavy:
            it = np.where((tt >= hs) & (tt < he), np.minimum(1.0, jb.power_frac + extra), it)
        hg = (tt >= end - jb.hang_s) if jb.hang_s else np.zeros(b - a, bool)
        st = np.where(ck | hg, np.nan, jb.step_time_s)
        for h in jb.hosts:
            job[h, sl] = j
            inten[h, sl] = it
            ckpt[h, sl] = ck
            hang[h, sl] = hg
            step[h, sl] = st
    up = np.ones((H, T), bool)
    reboot = np.zeros((H, T), bool)
    for h, a_s, b_s in sched.down:
        a, b = int(math.ceil(a_s / dt)), int(math.ceil(b_s / dt))
        if b <= k0 or a >= k1:
            continue
        up[h, max(a, k0) - k0:min(b, k1) - k0] = False
        if k0 <= b < k1:
            reboot[h, b - k0] = True
    return Timeline(job, up, reboot, inten, ckpt, hang, step)


def _ms(cfg: SimConfig, t_s: float | None):
    return None if t_s is None else int(round((cfg.start_s + t_s) * 1000))


def _jobs_tables(cfg: SimConfig, topo, jobs) -> tuple[pa.Table, pa.Table]:
    names = topo.names
    ver = _ms(cfg, cfg.steps * cfg.interval_s)
    jt = {
        "cluster": [cfg.cluster] * len(jobs), "job_id": [j.job_id for j in jobs], "name": [j.name for j in jobs],
        "user": [j.user for j in jobs], "partition": ["train"] * len(jobs), "state": [j.state for j in jobs],
        "exit_code": [j.exit_code for j in jobs], "reason": [j.reason for j in jobs],
        "submit_ts": pa.array([_ms(cfg, j.submit_s) for j in jobs], schema.TS),
        "start_ts": pa.array([_ms(cfg, j.start_s) for j in jobs], schema.TS),
        "end_ts": pa.array([_ms(cfg, j.end_s) for j in jobs], schema.TS),
        "n_hosts": pa.array([len(j.hosts) for j in jobs], pa.uint32()),
        "n_gpus": pa.array([8 * len(j.hosts) for j in jobs], pa.uint32()),
        "version": pa.array([ver] * len(jobs), pa.uint64()),
    }
    rows = [(j, h) for j in jobs for h in j.hosts]
    jh = {
        "cluster": [cfg.cluster] * len(rows), "job_id": [j.job_id for j, _ in rows],
        "host": [names[h] for _, h in rows],
        "start_ts": pa.array([_ms(cfg, j.start_s) for j, _ in rows], schema.TS),
        "end_ts": pa.array([_ms(cfg, j.end_s) for j, _ in rows], schema.TS),
        "version": pa.array([ver] * len(rows), pa.uint64()),
    }
    return pa.table(jt, schema=schema.JOBS), pa.table(jh, schema=schema.JOB_HOSTS)


def _events_table(cfg: SimConfig, topo, events: list[tuple]) -> pa.Table:
    events = sorted(events, key=lambda e: (e[0], e[1], e[2], e[4]))
    names = topo.names
    return pa.table({
        "ts": pa.array([_ms(cfg, e[0]) for e in events], schema.TS),
        "cluster": [cfg.cluster] * len(events),
        "host": [names[e[1]] for e in events],
        "component": [e[2] for e in events],
        "source": [e[3] for e in events],
        "kind": [e[4] for e in events],
        "code": pa.array([e[5] for e in events], pa.int32()),
        "severity": [xid.describe(e[5]).severity if e[4] == "xid" else
                     ("warning" if e[4] in ("link_down", "maintenance") else
                      "error" if e[4] == "nccl_timeout" else "info") for e in events],
        "message": [e[6] for e in events],
        "attributes": pa.array([list(e[7].items()) for e in events], pa.map_(pa.string(), pa.string())),
    }, schema=schema.EVENTS)


def _job_events(cfg, topo, jobs, sched) -> list[tuple]:
    out = []
    horizon = cfg.steps * cfg.interval_s
    for jb in jobs:
        if 0 <= jb.start_s < horizon:
            for h in jb.hosts:
                out.append((jb.start_s, h, "", "scheduler", "job_state", 0,
                            f"job {jb.job_id} ({jb.name}) RUNNING on {len(jb.hosts)} nodes", {"job_id": jb.job_id,
                                                                                                "state": "RUNNING"}))
        if jb.end_s is not None and 0 <= jb.end_s < horizon:
            text = f"job {jb.job_id} ({jb.name}) {jb.state}" + (f": {jb.reason}" if jb.reason else "")
            for h in jb.hosts:
                out.append((jb.end_s, h, "", "scheduler", "job_state", 0, text,
                            {"job_id": jb.job_id, "state": jb.state}))
    for h, a, b in sched.down:
        if b < horizon:
            out.append((b, h, "", "kernel", "boot", 0, "Linux version 5.15.0-122-generic: system booted", {}))
    return out


# ---------------------------------------------------------------------------------------------------


def generate(cfg: SimConfig, manifest: Manifest | None = None) -> Iterator[tuple[str, pa.Table]]:
    """Yield (table, Arrow table) batches; fill ``manifest`` (if given) before the first sample batch."""
    if cfg.scenario == "realistic":
        from telemetry.simulator import realistic
        yield from realistic.generate(cfg, manifest)
        return
    topo = topology.build(cfg.cluster, cfg.hosts, _rng(cfg, 1))
    horizon = cfg.steps * cfg.interval_s
    sched = scheduler.schedule(topo, horizon, cfg.failure_scale, _rng(cfg, 2))
    jobs = sched.jobs
    jobs_index = {j.job_id: i for i, j in enumerate(jobs)}
    injections, fail_entries, alarm_entries, events = _plan_signals(cfg, topo, sched, jobs_index, _rng(cfg, 3))
    events += _job_events(cfg, topo, jobs, sched)

    red = []
    by_job = {e["job_id"]: e["id"] for e in fail_entries}
    for r in sched.red_herrings:
        red.append({"kind": r["kind"], "failure_id": by_job.get(r["job_id"]), "job_id": r["job_id"],
                    "hosts": [topo.hosts[h].name for h in r["hosts"]], "start": iso(cfg.start_s + r["start_s"]),
                    "end": iso(cfg.start_s + r["end_s"]), "t0": iso(cfg.start_s + r["t0_s"])})
    fw_fail = [topo.hosts[f.host].firmware for f in sched.failures]
    share = topo.firmware_share()
    hot = topology.FW_HOT
    red.append({"kind": "firmware_over_representation", "firmware": hot, "host_share": round(share.get(hot, 0), 4),
                "failure_share": round(fw_fail.count(hot) / len(fw_fail), 4) if fw_fail else 0.0,
                "explanation": "this VBIOS sits on the first racks, where the scheduler places the biggest jobs; "
                               "busier hosts fail more often, the firmware causes nothing"})

    ev = _events_table(cfg, topo, events)
    if manifest is not None:
        manifest.config = {"cluster": cfg.cluster, "hosts": cfg.hosts, "days": cfg.days,
                           "interval_s": cfg.interval_s, "seed": cfg.seed, "start": iso(cfg.start_s),
                           "failure_scale": cfg.failure_scale}
        manifest.cause_weights = {c.name: c.count for c in failures.CAUSES}
        manifest.failures = fail_entries
        manifest.false_alarms = alarm_entries
        manifest.red_herrings = red
        manifest.counts = {"events": ev.num_rows, "jobs": len(jobs), "interruptions": len(fail_entries),
                           "false_alarms": len(alarm_entries), "red_herrings": len(red), "samples": 0}

    up_ms = _ms(cfg, 0)
    yield "hosts", topology.hosts_table(topo, up_ms)
    yield "components", topology.components_table(topo, up_ms)
    jt, jh = _jobs_tables(cfg, topo, jobs)
    yield "jobs", jt
    yield "job_hosts", jh
    yield "events", ev

    yield from _sample_batches(cfg, topo, sched, jobs, injections, manifest)


def _sample_batches(cfg, topo, sched, jobs, injections, manifest):
    gen = signals.SignalGenerator(cfg.hosts, cfg.interval_s, cfg.start_s, cfg.seed, injections)

    def chunk(k0: int, k1: int):
        tl = _timeline(cfg, sched, jobs, injections, k0, k1)
        return tl.up, gen.chunk(k0, k1, tl)

    return sample_batches(cfg, topo.names, COMPONENT_SETS, SERIES, MAX_CHUNK_CELLS, chunk, manifest)


@dataclass
class RunStats:
    samples: int = 0
    rows: int = 0
    generate_s: float = 0.0
    insert_s: float = 0.0
    wall_s: float = 0.0


def simulate(cfg: SimConfig, progress: Callable[[int, int], None] | None = None,
             stats: RunStats | None = None, tag: str = "simulator", token_salt: str = "") -> Manifest:
    """Generate the fleet and write it through ``telemetry.writer``; return the manifest.

    ``token_salt``: each insert's de-duplication token is the batch's content token (a rerun into
    the same store is a no-op) prefixed with it — a rebuild after the fleet was deleted passes a
    new salt, or the store takes its inserts for retries of the deleted ones and drops them.

    ``progress(samples_written, samples_estimated)`` is called after each batch.
    Generation runs one batch ahead in a thread (numpy and the engine release
    the GIL), so generation and insertion overlap.
    """
    from telemetry import writer

    manifest = Manifest(config={})
    stats = stats if stats is not None else RunStats()
    estimate = cfg.estimated_samples()
    q: queue.Queue = queue.Queue(maxsize=2)
    failure: list[BaseException] = []

    def produce():
        try:
            it = generate(cfg, manifest)
            while True:
                t = time.perf_counter()
                item = next(it, None)
                stats.generate_s += time.perf_counter() - t
                q.put(item)
                if item is None:
                    return
        except BaseException as exc:  # surfaced in the caller's thread
            failure.append(exc)
            q.put(None)

    wall = time.perf_counter()
    thread = threading.Thread(target=produce, name="simulator-generate", daemon=True)
    thread.start()
    while True:
        item = q.get()
        if item is None:
            break
        name, table = item
        t = time.perf_counter()
        writer.write(name, table, tag=tag,
                     token=f"{token_salt}:{writer.content_token(table)}" if token_salt else None)
        stats.insert_s += time.perf_counter() - t
        stats.rows += table.num_rows
        if name == "samples":
            stats.samples += table.num_rows
            if progress:
                progress(stats.samples, estimate)
    thread.join()
    stats.wall_s = time.perf_counter() - wall
    if failure:
        raise failure[0]
    return manifest


__all__ = ["SimConfig", "generate", "simulate", "Manifest", "RunStats", "asdict"]
