"""Parser for Slurm ``sacct -P`` (``--parsable2``) output, and Slurm hostlists.

``parse_sacct(text)`` reads the pipe-delimited table (header line first,
columns in any order; ``-p`` output with its trailing ``|`` is accepted too)
and returns one ``SacctRow`` per job run: step rows (``123.batch``, ``123.extern``,
``123.0``) are folded into their job's ``steps``, not returned as jobs. Only
``JobID`` is required; any of JobName, User, Partition, State, ExitCode,
Reason, Submit, Start, End, NodeList, NNodes, AllocTRES, AllocGRES/ReqGRES is
used when present. A requeued job listed by ``sacct -D`` once per run under
the same JobID gives one row per run (told apart by their Submit time, which
Slurm resets on requeue; by Start when the capture has no Submit), each with
its own state, so the NODE_FAIL of the first run is kept. ``State`` is split
into the base state and its detail (``CANCELLED by 1234`` -> ``CANCELLED`` +
``by 1234``); one/two-letter state
codes are expanded. ``Unknown``/``None``/empty times become None; times carry
no zone in sacct output and are taken as UTC (set the cluster's Slurm to UTC,
or convert before ingesting).

``expand_hostlist("gpu[001-004,017],cpu7")`` expands Slurm hostlist syntax
(zero padding kept, several bracket groups per name).

``to_tables(rows, cluster, observed_ts_ms)`` gives Arrow tables with the
``jobs`` and ``job_hosts`` schemas; ``version`` is the observation time so a
newer observation of the same job replaces an older one.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from itertools import product
from typing import Iterable, NamedTuple

import pyarrow as pa

from telemetry import schema
from telemetry.ingestion import limits
from telemetry.ingestion.errors import IngestError

STATE_CODES = {
    "BF": "BOOT_FAIL", "CA": "CANCELLED", "CD": "COMPLETED", "CF": "CONFIGURING", "CG": "COMPLETING",
    "DL": "DEADLINE", "F": "FAILED", "NF": "NODE_FAIL", "OOM": "OUT_OF_MEMORY", "PD": "PENDING",
    "PR": "PREEMPTED", "R": "RUNNING", "RQ": "REQUEUED", "RS": "RESIZING", "RV": "REVOKED",
    "S": "SUSPENDED", "TO": "TIMEOUT",
}
STATES = frozenset(STATE_CODES.values()) | {
    "REQUEUE_FED", "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD",
}
_STEP_PROBLEM_STATES = frozenset(STATES - {"COMPLETED", "RUNNING", "PENDING", "COMPLETING", "CONFIGURING"})


class SacctStep(NamedTuple):
    step_id: str  # "batch", "extern", "0", ...
    state: str
    state_detail: str
    exit_code: str
    nodes: tuple[str, ...]


class SacctRow(NamedTuple):
    job_id: str
    name: str
    user: str
    partition: str
    state: str  # base state: COMPLETED, FAILED, NODE_FAIL, CANCELLED, ...
    state_detail: str  # e.g. "by 1234" for "CANCELLED by 1234"; '' if none
    exit_code: str  # "code:signal"
    reason: str
    submit_ms: int | None
    start_ms: int | None
    end_ms: int | None
    nodes: tuple[str, ...]
    n_nodes: int
    n_gpus: int
    steps: tuple[SacctStep, ...]
    line: int


_UINT32_MAX = 2**32 - 1
_TIME_NONE = frozenset({"", "Unknown", "None", "N/A"})
_GPU_TRES = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")
_GPU_GRES = re.compile(r"gpu(?::[^:(,]+)?:(\d+)")


def parse_sacct(text: str) -> list[SacctRow]:
    lines = text.split("\n")
    header: list[str] | None = None
    header_line = ""
    trailing_pipe = False
    jobs: dict[str, dict] = {}
    allocated = 0  # job -> host rows so far: bounded per batch (each line is bounded per job first)
    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        if header is None:
            header_line = line
            trailing_pipe = line.endswith("|")
            header = (line[:-1] if trailing_pipe else line).split("|")
            if "JobID" not in header:
                raise IngestError(
                    f"first line is not a sacct -P header with a JobID column: {line[:80]!r}", line=lineno, field="JobID"
                )
            if len(set(header)) != len(header):
                raise IngestError("header names a column twice", line=lineno)
            continue
        if line == header_line:
            continue  # concatenated captures repeat the header
        if trailing_pipe:
            if not line.endswith("|"):
                raise IngestError("line lacks the trailing '|' the header has (sacct -p)", line=lineno)
            line = line[:-1]
        fields = line.split("|")
        if len(fields) != len(header):
            raise IngestError(
                f"expected {len(header)} '|'-separated fields (as in the header), got {len(fields)}", line=lineno
            )
        rec = dict(zip(header, fields))
        allocated += _add_record(jobs, rec, lineno)
        limits.check_batch_hosts(allocated, lineno)
    if header is None:
        return []
    return [row for j in jobs.values() for row in _finish_job(j)]


def _add_record(jobs: dict[str, dict], rec: dict[str, str], lineno: int) -> int:
    """Fold one line into ``jobs``; the number of hosts it named."""
    jobid = rec["JobID"].strip()
    if not jobid:
        raise IngestError("empty JobID", line=lineno, field="JobID")
    parent, _, step = jobid.partition(".")
    state, detail = _split_state(rec.get("State", ""), lineno)
    nodes = _nodes(rec, lineno)
    job = jobs.get(parent)
    if job is None:
        job = jobs[parent] = {"job_id": parent, "runs": {}, "current": None, "steps": [], "step_nodes": [],
                              "line": lineno}
    if step:
        # A step belongs to the run listed last before it (sacct -D lists each run with its steps).
        run = job["current"] or job
        run["steps"].append(SacctStep(step, state, detail, rec.get("ExitCode", ""), tuple(nodes)))
        run["step_nodes"].extend(nodes)
        return len(nodes)
    times = {k: _time(rec.get(k), lineno, k) for k in ("Submit", "Start", "End")}
    # sacct -D (duplicates) lists every run of a requeued job under its JobID, each with its own
    # Submit time: each run is its own record. The same run listed twice (concatenated polls)
    # is one record, the later listing winning.
    key = times["Submit"] if times["Submit"] is not None else times["Start"]
    run = job["runs"].get(key)
    if run is None:
        run = job["runs"][key] = {"job_id": parent, "steps": [], "step_nodes": []}
    run["rec"] = rec
    run["state"] = (state, detail)
    run["nodes"] = nodes
    run["line"] = lineno
    run["times"] = times
    run["n_nodes"] = _int(rec.get("NNodes"), lineno, "NNodes")
    if run["n_nodes"] is not None:
        limits.check_job_hosts(run["n_nodes"], "NNodes", lineno)
    run["n_gpus"] = _gpus(rec, lineno)
    if run["n_gpus"] is not None and run["n_gpus"] > _UINT32_MAX:
        raise IngestError(f"{run['n_gpus']} GPUs is more than a job can have (at most {_UINT32_MAX})",
                          line=lineno, field="AllocTRES")
    job["current"] = run
    return len(nodes)


def _finish_job(job: dict) -> list[SacctRow]:
    """One row per run of the job (runs in the order listed); steps alone make one row."""
    runs = list(job["runs"].values())
    if not runs:
        return [_finish({**job, "rec": None})]
    if job["steps"]:  # steps listed before any allocation row: the first run's
        runs[0]["steps"][:0] = job["steps"]
    return [_finish(run) for run in runs]


def _finish(job: dict) -> SacctRow:
    rec = job.get("rec")
    steps = tuple(job["steps"])
    if rec is None:
        # Only step rows were given: derive what we can from them.
        first = steps[0]
        nodes = tuple(dict.fromkeys(job["step_nodes"]))
        return SacctRow(job["job_id"], "", "", "", first.state, first.state_detail, first.exit_code, "",
                        None, None, None, nodes, len(nodes), 0, steps, job["line"])
    state, detail = job["state"]
    nodes = tuple(job["nodes"])
    reasons = []
    if rec.get("Reason", "").strip() not in ("", "None"):
        reasons.append(rec["Reason"].strip())
    for s in steps:
        if s.state in _STEP_PROBLEM_STATES and s.state != state:
            reasons.append(f"step {job['job_id']}.{s.step_id} {s.state}{' ' + s.state_detail if s.state_detail else ''} "
                           f"exit {s.exit_code}".rstrip())
    t = job["times"]
    n_nodes = job["n_nodes"] if job["n_nodes"] is not None else len(nodes)
    return SacctRow(
        job_id=job["job_id"],
        name=rec.get("JobName", ""),
        user=rec.get("User", ""),
        partition=rec.get("Partition", ""),
        state=state,
        state_detail=detail,
        exit_code=rec.get("ExitCode", ""),
        reason="; ".join(reasons),
        submit_ms=t["Submit"],
        start_ms=t["Start"],
        end_ms=t["End"],
        nodes=nodes,
        n_nodes=n_nodes,
        n_gpus=job["n_gpus"] if job["n_gpus"] is not None else 0,
        steps=steps,
        line=job["line"],
    )


def _split_state(raw: str, lineno: int) -> tuple[str, str]:
    raw = raw.strip()
    if not raw:
        return "", ""
    base, _, detail = raw.partition(" ")
    base = base.rstrip("+")  # fixed-width output marks truncation with '+'
    base = STATE_CODES.get(base, base)
    if base not in STATES:
        raise IngestError(f"unknown job state {raw!r}", line=lineno, field="State")
    return base, detail.strip()


def _nodes(rec: dict[str, str], lineno: int) -> list[str]:
    raw = rec.get("NodeList", "").strip()
    if not raw or raw.startswith("None"):  # "None assigned" while pending
        return []
    try:
        return expand_hostlist(raw)
    except IngestError as exc:
        raise type(exc)(exc.reason, line=lineno, field="NodeList") from None


def _time(raw: str | None, lineno: int, field: str) -> int | None:
    if raw is None or raw.strip() in _TIME_NONE:
        return None
    try:
        dt = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise IngestError(f"not a time (expected YYYY-MM-DDTHH:MM:SS): {raw!r}", line=lineno, field=field) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return round(dt.timestamp() * 1000)


def _int(raw: str | None, lineno: int, field: str) -> int | None:
    if raw is None or not raw.strip():
        return None
    s = raw.strip()
    if not s.isdigit():
        raise IngestError(f"not a whole number: {raw!r}", line=lineno, field=field)
    return int(s)


def _gpus(rec: dict[str, str], lineno: int) -> int | None:
    tres = rec.get("AllocTRES", "")
    if tres:
        total = [int(n) for n in _GPU_TRES.findall(tres)]
        # AllocTRES lists "gres/gpu=8" and may add typed "gres/gpu:h100=8": prefer the untyped total.
        plain = re.search(r"gres/gpu=(\d+)", tres)
        if plain:
            return int(plain.group(1))
        if total:
            return sum(total)
    for col in ("AllocGRES", "ReqGRES"):
        gres = rec.get(col, "")
        counts = [int(n) for n in _GPU_GRES.findall(gres)]
        if counts:
            # GRES strings count per node (e.g. "gpu:8" on each of NNodes nodes).
            per_node = sum(counts)
            nn = _int(rec.get("NNodes"), lineno, "NNodes") or 1
            return per_node * nn
    return None


def hostlist_size(hostlist: str) -> int:
    """How many hosts ``hostlist`` names, counted without expanding it."""
    total = 0
    for item in _split_top(hostlist):
        count = 1 if item else 0
        for kind, text in _item_parts(item, hostlist):
            if kind == "range":
                count *= _range_size(text, hostlist)
        total += count
    return total


def expand_hostlist(hostlist: str, *, max_hosts: int | None = None) -> list[str]:
    """Expand a Slurm hostlist expression; ``IngestError`` if it is malformed.

    The size is counted before anything is expanded: ``x[0-999][0-999]`` is a million
    hosts in 15 bytes, so over ``max_hosts`` (default ``limits.MAX_HOSTS_PER_JOB``) it
    raises ``limits.TooLarge`` without allocating them."""
    limit = limits.MAX_HOSTS_PER_JOB if max_hosts is None else max_hosts
    size = hostlist_size(hostlist)
    if size > limit:
        raise limits.TooLarge(f"hostlist names {size} hosts, over the limit of {limit} hosts per job")
    out: list[str] = []
    for item in _split_top(hostlist):
        if item:
            parts = [[text] if kind == "text" else _expand_range(text, hostlist)
                     for kind, text in _item_parts(item, hostlist)]
            out.extend("".join(p) for p in product(*parts))
    return out


def _item_parts(item: str, hostlist: str) -> list[tuple[str, str]]:
    """One hostlist item as ("text", literal) and ("range", bracket body) pieces."""
    parts: list[tuple[str, str]] = []
    pos = 0
    while pos < len(item):
        lb = item.find("[", pos)
        if lb < 0:
            if "]" in item[pos:]:
                raise IngestError(f"unbalanced ']' in hostlist {hostlist!r}")
            parts.append(("text", item[pos:]))
            break
        rb = item.find("]", lb)
        if rb < 0:
            raise IngestError(f"unclosed '[' in hostlist {hostlist!r}")
        if "]" in item[pos:lb]:
            raise IngestError(f"unbalanced ']' in hostlist {hostlist!r}")
        parts.append(("text", item[pos:lb]))
        parts.append(("range", item[lb + 1 : rb]))
        pos = rb + 1
    return parts


def _split_top(s: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, c in enumerate(s):
        if c == "[":
            depth += 1
            if depth > 1:
                raise IngestError(f"nested '[' in hostlist {s!r}")
        elif c == "]":
            depth -= 1
            if depth < 0:
                raise IngestError(f"unbalanced ']' in hostlist {s!r}")
        elif c == "," and depth == 0:
            items.append(s[start:i].strip())
            start = i + 1
    if depth:
        raise IngestError(f"unclosed '[' in hostlist {s!r}")
    items.append(s[start:].strip())
    return items


def _range_pieces(body: str, whole: str) -> list[tuple[str, str | None]]:
    pieces = []
    for piece in body.split(","):
        piece = piece.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", piece)
        if m is None:
            raise IngestError(f"bad range {piece!r} in hostlist {whole!r}")
        lo_s, hi_s = m.group(1), m.group(2)
        if hi_s is not None and int(hi_s) < int(lo_s):
            raise IngestError(f"range {piece!r} runs backwards in hostlist {whole!r}")
        pieces.append((lo_s, hi_s))
    return pieces


def _range_size(body: str, whole: str) -> int:
    return sum(1 if hi is None else int(hi) - int(lo) + 1 for lo, hi in _range_pieces(body, whole))


def _expand_range(body: str, whole: str) -> list[str]:
    out: list[str] = []
    for lo_s, hi_s in _range_pieces(body, whole):
        if hi_s is None:
            out.append(lo_s)
            continue
        width = len(lo_s)
        out.extend(str(n).zfill(width) for n in range(int(lo_s), int(hi_s) + 1))
    return out


def to_tables(rows: Iterable[SacctRow], cluster: str, observed_ts_ms: int) -> tuple[pa.Table, pa.Table]:
    """(jobs, job_hosts) Arrow tables for ``rows``, versioned by ``observed_ts_ms``."""
    rows = list(rows)
    job_cols: list[list] = [[] for _ in schema.JOBS.names]
    host_cols: list[list] = [[] for _ in schema.JOB_HOSTS.names]
    for r in rows:
        # Column order of schema.JOBS: cluster, job_id, name, user, partition, state,
        # exit_code, reason, submit, start, end, n_hosts, n_gpus, version.
        values = (
            cluster, r.job_id, r.name, r.user, r.partition, r.state, r.exit_code,
            " ".join(x for x in (r.state_detail, r.reason) if x),
            r.submit_ms, r.start_ms, r.end_ms, r.n_nodes, r.n_gpus, observed_ts_ms,
        )
        for col, v in zip(job_cols, values):
            col.append(v)
        for h in r.nodes:
            for col, v in zip(host_cols, (cluster, r.job_id, h, r.start_ms, r.end_ms, observed_ts_ms)):
                col.append(v)
    jobs = dict(zip(schema.JOBS.names, job_cols))
    hosts = dict(zip(schema.JOB_HOSTS.names, host_cols))
    return (
        pa.Table.from_pydict(jobs, schema=schema.JOBS),
        pa.Table.from_pydict(hosts, schema=schema.JOB_HOSTS),
    )
