"""The matched-window engine: outcomes, the interruptions of an outcome, the windows before them
and their healthy controls, job allocations, and the one-minute rollup they are read from.
Used by the fleet test (fleet_test.py), the signal scan (signal_scan.py) and the dataset export
(investigations/services/exports.py): all three look at the same windows.

Outcome
-------
``parse_outcome`` reads an outcome text: a Slurm interruption state (``NODE_FAIL``, ``FAILED``,
...), one or more XID codes (``XID 79``, ``xid 48/94``: the interruptions with such an XID on one
of the job's hosts within ±10 min of t0), ``link down`` (a link-down event — an mlx5 ``Link down``
or pulled cable — on one of the job's hosts within ±10 min of t0), or ``any interruption``.
Anything else is refused with the accepted forms.

Windows (W = the lead window)
-----------------------------
- **before the outcome**: for each interruption of the outcome, [t0 − W, t0) on the job's hosts;
- **controls**: every matched healthy window the data has, of two kinds —
  **same hosts at other times**: the job's hosts over [t0 − W + j·W, t0 + j·W) for every whole
  j ≠ 0 that keeps the window inside the tested range (back to back, both sides, the whole
  history: a 36 h history still has them); **healthy peers at the same time**: disjoint groups of
  as many hosts as the job had, of the same cluster, reporting the metric, outside the job (an
  equal number of hosts: a window's value is the worst over its hosts, so fewer hosts would read
  lower). A candidate counts only when no interruption of any kind touched its hosts from its
  start to W after its end, and it is matched on activity: its hosts were running a job at its
  end (at least half of them, for the same hosts; each peer), as the hosts before an
  interruption were. An idle host runs cooler, quieter and slower, and workload-driven metrics
  would otherwise look like precursors. A cluster without any job allocations on record is not
  matched.
- **Where the outcome names the failing part** (the GPU of an XID, the port of a link-down), its
  value is read on one host — the failing host, or the peer in its place — so a control is one
  host too: the failing host at its other times, vetoed only by interruptions of that host and
  matched on that host's activity, and single healthy busy peers. A job-wide veto and job-sized
  peer groups would demand far more than the reading needs: on a busy 256-host fleet, where big
  jobs are interrupted often, 115 of 144 windows before a link-down had no control at all.
- A like rule holds for the windows before the outcome, on the hosts they are read on, for the
  hosts an earlier interruption left its mark on (``failed_t0s``: an XID, a link-down or a PSU
  failure of theirs at it — the host failed, or its GPUs were torn down with the job, XID 45):
  where the outcome names the failing part, a window whose failing host carries such a mark inside
  it (a lemon GPU failing again hours after its last failure) is left out with its controls
  (``before_interrupted``); where it names none (read on every host of the job), such hosts are
  left out of the window (``before_hosts_interrupted``; the window goes when none is left). Such a
  window holds the earlier interruption's aftermath — its XIDs, the reboot, counters reset — which
  no control can hold, so whatever follows a failure would read as a precursor of the next. A
  host that only lost its job, with nothing in its own logs (the other hosts of a requeued job's
  last run), stays: its window holds a restart, not a failure.
- Of the candidates, ``k`` per window before the outcome (``CONTROLS_PER_POSITIVE``, 24) are
  drawn by a hash of (cluster, job, kind, start, hosts), so a re-run draws the same ones;
  ``Exclusions`` counts the candidates left out and why (outside the history, touched by an
  interruption, idle, too few healthy peers, beyond k), so a metric that cannot be tested says
  exactly why.
A window whose hosts reported nothing of the metric in it (hourly coverage, ``covered``) is left
out and counted as ``no data`` by its users.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from telemetry import catalog, rules, store
from telemetry.queries.interruptions import EVENT_WINDOW_S, INTERRUPTION_STATES

CONTROL_REACH_S = 4 * 86400  # how far from the range controls (and the interruptions that veto them) reach
COVERAGE_S = 3600
QUERY_TIMEOUT_S = 600


_CAUSE_RE = re.compile(r"^(?:root\s*)?cause\s*[:=]\s*(.*)$", re.I)
_XID_RE = re.compile(r"^xids?\s*[:#]?\s*(\d{1,3}(?:\s*[/,+ ]\s*(?:xid\s*)?\d{1,3})*)$", re.I)


class NotTestable(ValueError):
    """The hypothesis cannot be tested as stated; the message says why and what would do."""


@dataclass(frozen=True)
class Outcome:
    label: str
    states: tuple[str, ...] = ()  # empty: any interruption state
    xids: tuple[int, ...] = ()  # non-empty: only interruptions with one of these XIDs near t0
    events: tuple[str, ...] = ()  # non-empty: only interruptions with an event of these kinds near t0
    # a cause from verdicts ("cause: PSU"): only the interruptions engineers gave that root cause —
    # ``jobs`` their (cluster, job_id, t0) as the product resolved them (investigations.services.causes);
    # the engine itself knows no verdicts, so a cause outcome not resolved there is refused
    cause: str = ""
    jobs: frozenset | None = None


def parse_outcome(text: str) -> Outcome:
    raw = " ".join((text or "").split())
    upper = raw.upper().replace(" ", "_")
    if upper in INTERRUPTION_STATES:
        return Outcome(label=upper, states=(upper,))
    if raw.lower() in ("any", "any interruption", "interruption", "interruptions", "any_interruption"):
        return Outcome(label="any interruption")
    if raw.lower().replace("_", " ").replace("-", " ") in ("link down", "linkdown"):
        return Outcome(label="link down", events=("link_down",))
    m = _XID_RE.match(raw)
    if m:
        codes = tuple(sorted({int(c) for c in re.findall(r"\d+", m.group(1))}))
        return Outcome(label="XID " + "/".join(map(str, codes)), xids=codes)
    cause = _CAUSE_RE.match(raw)
    if cause:
        name = cause.group(1).strip()
        if not name:
            raise NotTestable("outcome 'cause:' names no root cause: write it as on the verdicts ('cause: PSU')")
        if len(name) > 500:
            raise NotTestable("outcome cause: a root cause is at most 500 characters, as on a verdict")
        return Outcome(label=f"cause: {name}", cause=name)
    raise NotTestable(
        f"outcome {raw!r} is not a class the fleet test can find: use an interruption state "
        f"({', '.join(INTERRUPTION_STATES)}), XID codes ('XID 79', 'XID 48/94'), 'link down', a root cause "
        "from verdicts ('cause: PSU') or 'any interruption'")


@dataclass
class Interruption:
    cluster: str
    job_id: str
    name: str
    state: str
    t0: int  # epoch seconds
    hosts: tuple[str, ...]


@dataclass
class Window:
    kind: str  # before | same_hosts | peers
    index: int  # the interruption it belongs to
    hosts: tuple[str, ...]
    start: int
    end: int
    fired_at: int | None = None
    has_data: bool = True


# --- the engine's part ---------------------------------------------------------------------------

# The one-minute rollup of one metric in one cluster, merged per (host, component, minute): the
# AggregatingMergeTree may hold a minute in several unmerged parts.
ROLLUP_SQL = ("SELECT host, component, ts, min(min) AS lo, max(max) AS hi, sum(sum) AS s, sum(count) AS n, "
           "max(max_ts) AS last_ts FROM samples_1m "
           "WHERE cluster = {cluster:String} AND metric = {metric:String} "
           "AND ts >= toDateTime({lo_s:Int64}) AND ts < toDateTime({hi_s:Int64}) "
           "GROUP BY host, component, ts")


COVERAGE_SQL = ("SELECT host, intDiv(toUnixTimestamp(ts), {cov:UInt32}) AS hour FROM samples_1m "
                 "WHERE cluster = {cluster:String} AND metric = {metric:String} "
                 "AND ts >= toDateTime({lo_s:Int64}) AND ts < toDateTime({hi_s:Int64}) "
                 "GROUP BY host, hour ORDER BY host, hour")

SPAN_SQL = ("SELECT toUnixTimestamp(min(ts)), toUnixTimestamp(max(ts)), count() FROM samples_1m "
             "WHERE cluster = {cluster:String} AND metric = {metric:String}")

_INTERRUPTED = (
    "SELECT job_id, name, state, assumeNotNull(end_ts) AS end_ts FROM jobs FINAL "
    "WHERE cluster = {cluster:String} AND state IN {states:Array(String)} AND end_ts IS NOT NULL "
    "AND end_ts >= toDateTime64({lo_s:Int64}, 3, 'UTC') AND end_ts < toDateTime64({hi_s:Int64}, 3, 'UTC')")
_INTERRUPTIONS_SQL = (
    f"SELECT j.job_id, j.name, j.state, toUnixTimestamp(j.end_ts) AS t0, h.hosts FROM ({_INTERRUPTED}) AS j "
    # each run of a requeued job has its own hosts: the run that started last before t0
    "ASOF INNER JOIN (SELECT job_id, run_ts, groupArray(host) AS hosts FROM job_hosts FINAL "
    "WHERE cluster = {cluster:String} "
    f" AND job_id IN (SELECT job_id FROM ({_INTERRUPTED})) GROUP BY job_id, run_ts) AS h "
    "ON h.job_id = j.job_id AND h.run_ts <= j.end_ts "
    "ORDER BY t0, j.job_id")

_XIDS_SQL = ("SELECT host, toUnixTimestamp(ts) FROM events WHERE cluster = {cluster:String} AND kind = 'xid' "
             "AND code IN {codes:Array(Int64)} AND ts >= toDateTime64({lo_s:Int64}, 3, 'UTC') "
             "AND ts < toDateTime64({hi_s:Int64}, 3, 'UTC')")


_EVENT_KINDS_SQL = ("SELECT host, toUnixTimestamp(ts) FROM events WHERE cluster = {cluster:String} "
                    "AND kind IN {kinds:Array(String)} AND ts >= toDateTime64({lo_s:Int64}, 3, 'UTC') "
                    "AND ts < toDateTime64({hi_s:Int64}, 3, 'UTC')")

# What shows an interruption in a host's own logs — the host failed, or its GPUs were torn down with
# the job: any XID (a hardware fault, the application's error that failed the job, XID 45 as the
# killed job's channels are removed), a link going down, a power supply failing — on that host
# within EVENT_WINDOW_S of the interruption's t0.
AFTERMATH_EVENT_KINDS = ("xid", "link_down", "psu_failure")
_AFTERMATH_SQL = ("SELECT host, toUnixTimestamp(ts) FROM events WHERE cluster = {cluster:String} "
                  "AND kind IN {kinds:Array(String)} "
                  "AND ts >= toDateTime64({lo_s:Int64}, 3, 'UTC') AND ts < toDateTime64({hi_s:Int64}, 3, 'UTC')")

_ALLOCATIONS_SQL = (
    "SELECT host, toUnixTimestamp(start_ts) AS s, toUnixTimestamp(ifNull(end_ts, now64(3))) AS e "
    "FROM job_hosts FINAL WHERE cluster = {cluster:String} "
    "AND (end_ts IS NULL OR end_ts >= toDateTime64({lo_s:Int64}, 3, 'UTC')) "
    "AND start_ts < toDateTime64({hi_s:Int64}, 3, 'UTC') ORDER BY host, s")


@dataclass
class Allocations:
    """Per host, the sorted start times of its job allocations and the running maximum of their
    ends: a host is busy at t when the latest allocation starting at or before t ends after t."""
    by_host: dict[str, tuple[np.ndarray, np.ndarray]]

    @classmethod
    def load(cls, cluster: str, lo_s: int, hi_s: int, *, timeout_s: int) -> "Allocations":
        table = store.query_arrow(_ALLOCATIONS_SQL, {"cluster": cluster, "lo_s": lo_s, "hi_s": hi_s},
                                  tag="windows:allocations", timeout_s=timeout_s)
        by_host = {}
        if table.num_rows:
            starts = table.column(1).to_numpy().astype(np.int64)
            ends = table.column(2).to_numpy().astype(np.int64)
            for host, a, b in host_runs(table):
                by_host[host] = (starts[a:b], np.maximum.accumulate(ends[a:b]))
        return cls(by_host)

    def __bool__(self) -> bool:
        return bool(self.by_host)

    def busy(self, host: str, t: int) -> bool:
        found = self.by_host.get(host)
        if found is None:
            return False
        starts, ends = found
        i = int(np.searchsorted(starts, t, side="right")) - 1
        return i >= 0 and ends[i] > t


def clusters_with_jobs(*, timeout_s: int = 60) -> list[str]:
    """Every cluster the scheduler reported jobs for (where interruptions can be found)."""
    rows = store.query_rows("SELECT DISTINCT cluster FROM jobs ORDER BY cluster", tag="windows:clusters",
                            timeout_s=timeout_s)
    return [r[0] for r in rows]


def host_runs(table) -> list[tuple[str, int, int]]:
    """(host, first row, end row) of each host's run in an Arrow result ordered by host first."""
    n = table.num_rows
    if n == 0:
        return []
    idx, names = codes(table.column(0))
    starts = np.concatenate(([0], np.flatnonzero(idx[1:] != idx[:-1]) + 1))
    ends = np.append(starts[1:], n)
    return [(names[idx[a]], int(a), int(b)) for a, b in zip(starts.tolist(), ends.tolist())]


def codes(column) -> tuple[np.ndarray, list[str]]:
    """A string column of an Arrow result as integer codes and the distinct strings they index,
    by the Arrow kernels: never one Python string per row (a big fleet's firing, power or segment
    rows are millions, and their host and part names as Python strings cost more than the rows)."""
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    enc = pc.dictionary_encode(arr, null_encoding="encode")
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), [str(x) for x in enc.dictionary.to_pylist()]


def by_host(rows) -> dict[str, np.ndarray]:
    out: dict[str, list[int]] = {}
    for host, t in rows:
        out.setdefault(host, []).append(int(t))
    return {h: np.asarray(v, dtype=np.int64) for h, v in out.items()}


def columns_by_host(sql: str, params: dict, *, tag: str, timeout_s: int) -> dict[str, np.ndarray]:
    """(host, t) rows ordered by host, t — read as Arrow columns, not Python tuples: a noisy
    signal on a big fleet returns millions of firing minutes."""
    table = store.query_arrow(sql, params, tag=tag, timeout_s=timeout_s)
    times = table.column(1).to_numpy().astype(np.int64) if table.num_rows else None
    return {host: times[a:b] for host, a, b in host_runs(table)}


def pick_peers(job_key: str, candidates: list[str], k: int) -> tuple[str, ...]:
    ranked = sorted(candidates, key=lambda h: hashlib.blake2b(f"{job_key}|{h}".encode(), digest_size=8).digest())
    return tuple(sorted(ranked[:k]))


def covered(coverage: dict[str, np.ndarray], hosts, start: int, end: int) -> bool:
    lo, hi = start // COVERAGE_S, (end - 1) // COVERAGE_S
    for h in hosts:
        arr = coverage.get(h)
        if arr is None:
            continue
        i = int(np.searchsorted(arr, lo, side="left"))
        if i < len(arr) and arr[i] <= hi:
            return True
    return False


def touched(host_t0s: dict[str, np.ndarray], hosts, lo: int, hi: int) -> bool:
    """Did an interruption (any kind) on one of ``hosts`` end in [lo, hi)?"""
    for h in hosts:
        arr = host_t0s.get(h)
        if arr is None:
            continue
        i = int(np.searchsorted(arr, lo, side="left"))
        if i < len(arr) and arr[i] < hi:
            return True
    return False


def outcome_interruptions(cluster: str, outcome: Outcome, W: int, lo_s: int, hi_s: int, *,
                          timeout_s: int) -> tuple[list[Interruption], dict[str, np.ndarray]]:
    """The interruptions of ``outcome`` whose whole lead window lies in [lo_s, hi_s), and the
    sorted t0s of every interruption per host (they decide which controls are healthy)."""
    # Interruptions a little past the range too: controls reach 3 days and a lead window out.
    rows = store.query_rows(_INTERRUPTIONS_SQL, {"cluster": cluster, "states": list(INTERRUPTION_STATES),
                                                 "lo_s": lo_s - CONTROL_REACH_S - W, "hi_s": hi_s + W},
                            tag="windows:interruptions", timeout_s=timeout_s)
    every = [Interruption(cluster, r[0], r[1], r[2], int(r[3]), tuple(sorted(r[4]))) for r in rows]
    host_t0s: dict[str, list[int]] = {}
    for it in every:
        for h in it.hosts:
            host_t0s.setdefault(h, []).append(it.t0)
    host_t0s_arr = {h: np.asarray(sorted(v), dtype=np.int64) for h, v in host_t0s.items()}
    chosen = [it for it in every if lo_s + W <= it.t0 < hi_s and (not outcome.states or it.state in outcome.states)]
    if outcome.cause:
        if outcome.jobs is None:
            raise NotTestable(f"outcome {outcome.label!r}: a cause comes from the verdicts on cases; "
                              "run it from Precursor (the scan form, the API), which looks them up")
        # the case's t0 is the interruption's; a requeued job's other runs are other interruptions
        labelled: dict[str, list[int]] = {}
        for c, j, t in outcome.jobs:
            if c == cluster:
                labelled.setdefault(j, []).append(int(t))
        chosen = [it for it in chosen if any(abs(it.t0 - t) <= CASE_T0_SLACK_S for t in labelled.get(it.job_id, ()))]
    if outcome.xids and chosen:
        xid_rows = store.query_rows(_XIDS_SQL, {"cluster": cluster, "codes": list(outcome.xids),
                                                "lo_s": lo_s - EVENT_WINDOW_S, "hi_s": hi_s + EVENT_WINDOW_S},
                                    tag="windows:xids", timeout_s=timeout_s)
        xids = {h: np.sort(v) for h, v in by_host(xid_rows).items()}
        chosen = [it for it in chosen if touched(xids, it.hosts, it.t0 - EVENT_WINDOW_S, it.t0 + EVENT_WINDOW_S + 1)]
    if outcome.events and chosen:
        rows = store.query_rows(_EVENT_KINDS_SQL, {"cluster": cluster, "kinds": list(outcome.events),
                                                   "lo_s": lo_s - EVENT_WINDOW_S, "hi_s": hi_s + EVENT_WINDOW_S},
                                tag="windows:outcome_events", timeout_s=timeout_s)
        seen = {h: np.sort(v) for h, v in by_host(rows).items()}
        chosen = [it for it in chosen if touched(seen, it.hosts, it.t0 - EVENT_WINDOW_S, it.t0 + EVENT_WINDOW_S + 1)]
    return chosen, host_t0s_arr


def failed_t0s(cluster: str, host_t0s: dict[str, np.ndarray], *, timeout_s: int) -> dict[str, np.ndarray]:
    """Per host, the t0s of the interruptions (of ``host_t0s``) that left their mark in that host's own
    logs: an XID, a link-down or a PSU failure of it within ``EVENT_WINDOW_S`` of t0
    (``AFTERMATH_EVENT_KINDS``) — the host failed, or its GPUs were torn down with the job. The
    other hosts of those jobs only lost their job."""
    every = [t for v in host_t0s.values() for t in v.tolist()]
    if not every:
        return {}
    rows = store.query_rows(_AFTERMATH_SQL, {"cluster": cluster, "kinds": list(AFTERMATH_EVENT_KINDS),
                                             "lo_s": min(every) - EVENT_WINDOW_S,
                                             "hi_s": max(every) + EVENT_WINDOW_S + 1},
                            tag="windows:failed_hosts", timeout_s=timeout_s)
    seen = {h: np.sort(v) for h, v in by_host(rows).items()}
    out = {}
    for h, t0s in host_t0s.items():
        ev = seen.get(h)
        if ev is None or not len(t0s):
            continue
        own = [t for t in t0s.tolist() if touched({h: ev}, (h,), t - EVENT_WINDOW_S, t + EVENT_WINDOW_S + 1)]
        if own:
            out[h] = np.asarray(own, dtype=np.int64)
    return out


CASE_T0_SLACK_S = 60  # a case's t0 against its interruption's (both from the job's end; a minute's slack)
CONTROLS_PER_POSITIVE = 24  # controls drawn per window before the outcome (k)
MAX_OFFSETS = 500  # same-host candidates looked at on each side (a 1-min window over a month)


@dataclass
class Exclusions:
    """Why candidate control windows were not used, counted per reason (the page says it)."""
    outside_history: int = 0  # the window falls outside the data's range
    interrupted: int = 0  # an interruption of its hosts ended in it or within W after it
    idle: int = 0  # its hosts were not running a job (controls are matched on activity)
    too_few_peers: int = 0  # fewer healthy busy hosts at that time than the job had
    beyond_k: int = 0  # usable, but k were drawn already
    # a window BEFORE the outcome left out (with its controls): an earlier interruption inside it left
    # its mark in the logs of the host it is read on (the failing part's; ``failed_t0s``), so it
    # holds that one's aftermath (its XIDs, the reboot, counters reset), as a control touched by an
    # interruption would, and controls never do
    before_interrupted: int = 0
    # hosts left out of windows before an outcome that names no part (read on every host of the
    # job): an earlier interruption inside the window left its mark in their logs
    before_hosts_interrupted: int = 0
    # hosts left out of windows (before the outcome, and controls) where the outcome names no part:
    # idle for most of the past their scores are measured against (``phase.idle_past_hosts``)
    before_hosts_idle_past: int = 0
    control_hosts_idle_past: int = 0

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


def matched_windows(cluster: str, chosen: list[Interruption], host_t0s: dict[str, np.ndarray], W: int,
                    lo_s: int, hi_s: int, reporting: list[str],
                    allocations: Allocations | None = None, *, k: int = CONTROLS_PER_POSITIVE,
                    excluded: Exclusions | None = None, failing: list | None = None,
                    failed: dict[str, np.ndarray] | None = None) -> list[Window]:
    """The window before each chosen interruption and up to ``k`` matched healthy controls drawn
    from every candidate the data has (see the module docstring); ``excluded`` counts the rest.
    ``failing[i]``: the (host, unit) interruption i names (``contrasts.failing_units``) or None —
    which host its window is read on; ``failed`` (``failed_t0s``): the interruptions that left a mark
    in each host's own logs. With ``failed``, a window before the outcome holding such a mark of its
    read host is left out (or, read on every host of the job, that host left out of it); without,
    every window before the outcome is kept whole (a dataset export: each labelled case is a row,
    whatever preceded it)."""
    matched = bool(allocations)
    excluded = excluded if excluded is not None else Exclusions()
    windows: list[Window] = []
    for idx, it in enumerate(chosen):
        named = failing[idx] if failing is not None and idx < len(failing) else None
        if failed is None:
            hosts = it.hosts
        elif named is not None:
            if touched(failed, (named[0],), it.t0 - W, it.t0):
                excluded.before_interrupted += 1
                continue
            hosts = it.hosts
        else:
            hosts = tuple(h for h in it.hosts if not touched(failed, (h,), it.t0 - W, it.t0))
            excluded.before_hosts_interrupted += len(it.hosts) - len(hosts)
            if not hosts:
                excluded.before_interrupted += 1
                continue
        windows.append(Window("before", idx, hosts, it.t0 - W, it.t0))
        # what a control is read on: where the outcome names the failing part, its value is read on
        # one host (the failing host, or the peer in its place: contrasts.read_host), so a control
        # is that one host, healthy and busy; else the whole job's hosts
        read = (named[0],) if named is not None else it.hosts
        n = len(read)
        candidates: list[Window] = []
        # the same hosts at every other time the history holds, back to back with the lead window
        steps = range(max(-((it.t0 - W - lo_s) // W), -MAX_OFFSETS), min((hi_s - it.t0) // W, MAX_OFFSETS) + 1)
        for j in steps:
            if j == 0:
                continue
            s, e = it.t0 - W + j * W, it.t0 + j * W
            if s < lo_s or e > hi_s:
                excluded.outside_history += 1
                continue
            if touched(host_t0s, read, s, e + W):
                excluded.interrupted += 1
                continue
            if matched and 2 * sum(allocations.busy(h, e - 1) for h in read) < n:
                excluded.idle += 1
                continue
            candidates.append(Window("same_hosts", idx, read, s, e))
        # healthy peers at the same time, as many hosts as are read (the job's, or the one failing
        # host's), in disjoint groups
        job_hosts = set(it.hosts)
        pool = [h for h in reporting if h not in job_hosts]
        ok = [h for h in pool if not touched(host_t0s, (h,), it.t0 - W, it.t0 + W)]
        excluded.interrupted += len(pool) - len(ok)
        busy = [h for h in ok if not matched or allocations.busy(h, it.t0 - 1)]
        excluded.idle += len(ok) - len(busy)
        ranked = sorted(busy, key=lambda h: hashlib.blake2b(f"{cluster}|{it.job_id}|{h}".encode(),
                                                            digest_size=8).digest())
        groups = [tuple(sorted(ranked[g:g + n])) for g in range(0, len(ranked) - n + 1, n)]
        if not groups and busy:
            excluded.too_few_peers += 1
        candidates += [Window("peers", idx, g, it.t0 - W, it.t0) for g in groups]
        # k of them, by a hash of (job, window relative to t0): a re-run draws the same, and so does
        # the same history shifted in time (no draw depends on the date)
        candidates.sort(key=lambda w: hashlib.blake2b(
            f"{cluster}|{it.job_id}|{w.kind}|{w.start - it.t0}|{','.join(w.hosts)}".encode(), digest_size=8).digest())
        excluded.beyond_k += max(0, len(candidates) - k)
        windows += candidates[:k]
    return windows


def with_lead_window(found: list[Window], per_failure: list) -> list:
    """``per_failure`` (one entry per chosen interruption) with None where ``matched_windows``
    left the interruption's lead window out (``before_interrupted``): what is read per failure
    beside the windows — its own history, its part's firing — then skips it as the windows do."""
    kept = {w.index for w in found if w.kind == "before"}
    return [x if i in kept else None for i, x in enumerate(per_failure)]


def allocation_range(lo_s: int, hi_s: int, W: int) -> tuple[int, int]:
    """The span whose job allocations and interruptions decide the controls of [lo_s, hi_s)."""
    return lo_s - CONTROL_REACH_S - W, hi_s + W


def metric_span(cluster: str, metric: str, *, timeout_s: int = QUERY_TIMEOUT_S) -> tuple[int, int, int]:
    """(first minute, last minute, rollup rows) of ``metric`` in ``cluster``."""
    (first, last, n), = store.query_rows(SPAN_SQL, {"cluster": cluster, "metric": metric},
                                         tag="windows:span", timeout_s=timeout_s)
    return first, last, n


def coverage(cluster: str, metric: str, lo_s: int, hi_s: int, *, timeout_s: int) -> dict[str, np.ndarray]:
    """Per host, the sorted hours (epoch s // COVERAGE_S) in which it reported ``metric``."""
    return columns_by_host(COVERAGE_SQL, {"cluster": cluster, "metric": metric, "lo_s": lo_s, "hi_s": hi_s,
                                          "cov": COVERAGE_S}, tag="windows:coverage", timeout_s=timeout_s)


_METRICS_SQL = ("SELECT metric, toUnixTimestamp(min(ts)), toUnixTimestamp(max(ts)) FROM samples_1m "
                "WHERE cluster = {cluster:String} GROUP BY metric ORDER BY metric "
                # grouped as the rollup is ordered (cluster, metric, ...): 1.3 -> 0.8 s on 127 M rows
                "SETTINGS optimize_aggregation_in_order = 1")

_HOSTS_SQL = ("SELECT DISTINCT host FROM (SELECT host FROM hosts FINAL WHERE cluster = {cluster:String} "
              "UNION ALL SELECT host FROM job_hosts FINAL WHERE cluster = {cluster:String}) ORDER BY host")


def hosts_of(cluster: str, *, timeout_s: int = QUERY_TIMEOUT_S) -> list[str]:
    """The cluster's hosts: the inventory's and every host a job ran on."""
    return [r[0] for r in store.query_rows(_HOSTS_SQL, {"cluster": cluster}, tag="windows:hosts",
                                           timeout_s=timeout_s)]


def metrics_present(cluster: str, *, timeout_s: int = QUERY_TIMEOUT_S) -> list[tuple[str, int, int]]:
    """Catalog metrics with rollup rows in ``cluster``: (name, first ts, last ts), by name."""
    rows = store.query_rows(_METRICS_SQL, {"cluster": cluster}, tag="windows:metrics", timeout_s=timeout_s)
    return [(m, int(a), int(b)) for m, a, b in rows if catalog.is_known(m)]


def check_lead(lead_s: int, what: str) -> int:
    """NotTestable unless the lead window is within the bounds every user of windows shares."""
    try:
        return rules.check_lead_window(lead_s)
    except ValueError:
        raise NotTestable(f"lead window {lead_s} s: {what} needs 1 min to 30 days") from None
