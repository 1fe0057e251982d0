"""Topology of a case: job -> hosts -> components, and the healthy peers to compare against.

``job_topology`` walks the inventory for the case page's left panel: each host
with its rack/leaf/spine and driver/firmware, its components grouped by kind
(GPUs, NVSwitches, NICs with the switch port they are cabled to, PSUs, fans,
disks). Three queries: the job, its hosts with their inventory, their components.

``peers_of`` picks healthy peer hosts for bands and the "what's different"
ranking: same cluster, not in the job, reporting data in the 15 minutes before
``at_ts`` (checked on the 1-minute rollup, restricted to the overlay's metrics
when given, so it reads a narrow key range), and with no error-or-worse event
from 1 h before to 10 min after ``at_ts``. Hosts with the job's majority GPU
model come first; ties are broken by a hash of the host name so the sample is
spread across racks rather than the alphabetically first ones. Capped.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from telemetry import store

KIND_ORDER = ("gpu", "nvswitch", "nic", "psu", "fan", "disk", "cpu")
PEER_CAP = 64
PRESENCE_WINDOW_S = 900
UNHEALTHY_BEFORE_S = 3600
UNHEALTHY_AFTER_S = 600
QUERY_TIMEOUT_S = 10


@dataclass(frozen=True)
class ComponentNode:
    component: str
    kind: str
    model: str
    serial: str
    uuid: str
    pci_bus_id: str
    firmware: str
    peer: str  # NICs: the switch port it is cabled to (leaf-03:p17); '' otherwise


@dataclass
class HostNode:
    host: str
    rack: str
    leaf: str
    spine: str
    gpu_model: str
    driver_version: str
    firmware_version: str
    in_inventory: bool
    components: dict[str, list[ComponentNode]] = field(default_factory=dict)  # kind -> components, KIND_ORDER first


@dataclass
class JobTopology:
    cluster: str
    job_id: str
    name: str
    state: str
    start_ts: datetime | None
    t0: datetime | None
    hosts: list[HostNode]

    @property
    def host_names(self) -> list[str]:
        return [h.host for h in self.hosts]

    @property
    def gpu_models(self) -> Counter:
        return Counter(h.gpu_model for h in self.hosts if h.gpu_model)


class UnknownJob(LookupError):
    pass


def _utc(ts):
    if ts is None:
        return None
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


def _natural(name: str):
    """gpu2 before gpu10; mlx5_2/1 before mlx5_10/1."""
    import re

    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def job_topology(cluster: str, job_id: str, *, timeout_s: int = QUERY_TIMEOUT_S) -> JobTopology:
    jobs = store.query_rows(
        # a requeued job has a record per run: the latest run
        "SELECT name, state, start_ts, end_ts FROM jobs FINAL WHERE cluster = {c:String} AND job_id = {j:String} "
        "ORDER BY run_ts DESC LIMIT 1",
        {"c": cluster, "j": job_id}, tag="topology.job", timeout_s=timeout_s,
    )
    if not jobs:
        raise UnknownJob(f"no job {job_id!r} in cluster {cluster!r}")
    name, state, start_ts, end_ts = jobs[0]
    host_rows = store.query_rows(
        "SELECT jh.host, h.rack, h.leaf, h.spine, h.gpu_model, h.driver_version, h.firmware_version, h.host != '' "
        "FROM (SELECT host FROM job_hosts FINAL WHERE cluster = {c:String} AND job_id = {j:String} "
        "      AND run_ts = (SELECT max(run_ts) FROM job_hosts WHERE cluster = {c:String} AND job_id = {j:String})"
        "     ) AS jh "
        "LEFT JOIN (SELECT host, rack, leaf, spine, gpu_model, driver_version, firmware_version "
        "           FROM hosts FINAL WHERE cluster = {c:String}) AS h ON h.host = jh.host "
        "ORDER BY jh.host",
        {"c": cluster, "j": job_id}, tag="topology.hosts", timeout_s=timeout_s,
        # join_use_nulls is off: a host missing from the inventory comes back with '' fields
    )
    hosts = {r[0]: HostNode(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bool(r[7])) for r in host_rows}
    if hosts:
        comp_rows = store.query_rows(
            "SELECT host, component, kind, model, serial, uuid, pci_bus_id, firmware, peer FROM components FINAL "
            "WHERE cluster = {c:String} AND host IN {hosts:Array(String)}",
            {"c": cluster, "hosts": list(hosts)}, tag="topology.components", timeout_s=timeout_s,
        )
        grouped: dict[str, dict[str, list[ComponentNode]]] = {}
        for host, comp, kind, model, serial, uuid, pci, fw, peer in comp_rows:
            grouped.setdefault(host, {}).setdefault(kind, []).append(
                ComponentNode(comp, kind, model, serial, uuid, pci, fw, peer))
        for host, kinds in grouped.items():
            ordered = sorted(kinds, key=lambda k: (KIND_ORDER.index(k) if k in KIND_ORDER else len(KIND_ORDER), k))
            hosts[host].components = {k: sorted(kinds[k], key=lambda c: _natural(c.component)) for k in ordered}
    return JobTopology(cluster, job_id, name, state, _utc(start_ts), _utc(end_ts),
                       sorted(hosts.values(), key=lambda h: _natural(h.host)))


def peers_of(
    cluster: str,
    hosts: list[str],
    at_ts: datetime,
    *,
    metrics: list[str] | None = None,
    limit: int = PEER_CAP,
    timeout_s: int = QUERY_TIMEOUT_S,
) -> list[str]:
    """Healthy peer hosts at `at_ts` (see module docstring), best first, at most `limit`."""
    if not (1 <= limit <= 1024):
        raise ValueError(f"limit {limit}: must be between 1 and 1024")
    at = _utc(at_ts)
    params = {
        "c": cluster,
        "job_hosts": list(hosts),
        "metrics": list(metrics or []),
        "lo": at - timedelta(seconds=PRESENCE_WINDOW_S),
        "at": at,
        "bad_lo": at - timedelta(seconds=UNHEALTHY_BEFORE_S),
        "bad_hi": at + timedelta(seconds=UNHEALTHY_AFTER_S),
        "limit": limit,
    }
    rows = store.query_rows(
        "WITH (SELECT topK(1)(gpu_model)[1] FROM hosts FINAL "
        "      WHERE cluster = {c:String} AND host IN {job_hosts:Array(String)}) AS job_model "
        "SELECT p.host FROM ("
        "  SELECT DISTINCT host FROM samples_1m WHERE cluster = {c:String} "
        "  AND (empty({metrics:Array(String)}) OR metric IN {metrics:Array(String)}) "
        "  AND ts >= toStartOfMinute(toDateTime({lo:DateTime64(3, 'UTC')})) AND ts <= toDateTime({at:DateTime64(3, 'UTC')}) "
        "  AND host NOT IN {job_hosts:Array(String)}) AS p "
        "LEFT JOIN (SELECT host, gpu_model FROM hosts FINAL WHERE cluster = {c:String}) AS h ON h.host = p.host "
        "WHERE p.host NOT IN (SELECT DISTINCT host FROM events WHERE cluster = {c:String} "
        "  AND ts >= {bad_lo:DateTime64(3, 'UTC')} AND ts <= {bad_hi:DateTime64(3, 'UTC')} "
        "  AND severity IN ('critical', 'error')) "
        "ORDER BY (h.gpu_model = job_model AND job_model != '') DESC, cityHash64(p.host) "
        "LIMIT {limit:UInt32}",
        params, tag="topology.peers_of", timeout_s=timeout_s,
    )
    return [r[0] for r in rows]
