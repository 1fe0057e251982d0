"""Job topology and healthy-peer selection against a real embedded store."""
from __future__ import annotations

from datetime import timedelta

import pytest

from telemetry.queries import topology
from telemetry.queries.topology import UnknownJob

from . import BASE, event_row, every, host_row, write_rows, write_samples

T0 = BASE + timedelta(hours=10)


def comp(cluster, host, component, kind, peer="", model="H100"):
    return {"cluster": cluster, "host": host, "component": component, "kind": kind, "model": model,
            "serial": f"S-{host}-{component}", "uuid": f"GPU-{host}-{component}", "pci_bus_id": "0000:1b:00.0",
            "firmware": "fw1", "peer": peer, "updated": BASE}


def test_job_topology_groups_components_by_kind(clean_store):
    write_rows("jobs", [{"cluster": "c1", "job_id": "7", "name": "llm", "user": "u", "partition": "p",
                         "state": "NODE_FAIL", "exit_code": "0:0", "reason": "", "submit_ts": T0 - timedelta(hours=3),
                         "start_ts": T0 - timedelta(hours=2), "end_ts": T0, "n_hosts": 2, "n_gpus": 16, "version": 1}])
    write_rows("job_hosts", [{"cluster": "c1", "job_id": "7", "host": h, "start_ts": T0 - timedelta(hours=2),
                              "end_ts": T0, "version": 1} for h in ("n1", "n2")])
    write_rows("hosts", [host_row("c1", "n1", rack="r7", leaf="leaf-7", spine="spine-2"), host_row("c1", "n3")])
    rows = [comp("c1", "n1", f"gpu{g}", "gpu") for g in (10, 2, 0)]
    rows += [comp("c1", "n1", "mlx5_0/1", "nic", peer="leaf-7:p17"), comp("c1", "n1", "psu0", "psu"),
             comp("c1", "n1", "nvswitch0", "nvswitch"), comp("c1", "n3", "gpu0", "gpu")]
    write_rows("components", rows)

    topo = topology.job_topology("c1", "7")
    assert topo.state == "NODE_FAIL" and topo.t0 == T0
    assert topo.host_names == ["n1", "n2"]
    n1, n2 = topo.hosts
    assert (n1.rack, n1.leaf, n1.spine, n1.driver_version, n1.in_inventory) == ("r7", "leaf-7", "spine-2", "550.54", True)
    assert list(n1.components) == ["gpu", "nvswitch", "nic", "psu"]
    assert [c.component for c in n1.components["gpu"]] == ["gpu0", "gpu2", "gpu10"]
    assert n1.components["nic"][0].peer == "leaf-7:p17"
    assert not n2.in_inventory and n2.components == {}


def test_unknown_job_is_named(clean_store):
    with pytest.raises(UnknownJob, match="no job '404' in cluster 'c1'"):
        topology.job_topology("c1", "404")


def test_peers_are_healthy_reporting_hosts_outside_the_job(clean_store):
    ts = every(T0 - timedelta(minutes=10), 30, 20)
    hosts = ["job1", "job2", "a100-1", "h100-1", "h100-2", "h100-sick", "h100-silent", "h100-other-metric"]
    write_rows("hosts", [host_row("c1", h, gpu_model="A100" if h.startswith("a100") else "H100") for h in hosts])
    for h in hosts:
        if h == "h100-silent":
            continue
        metric = "gpu.power" if h == "h100-other-metric" else "gpu.temp"
        write_samples("c1", h, "gpu0", metric, ts, [40.0 + len(h)] * len(ts))
    write_samples("c1", "h100-old", "gpu0", "gpu.temp", every(T0 - timedelta(days=1), 30, 5), [1.0] * 5)
    write_samples("c2", "h100-elsewhere", "gpu0", "gpu.temp", ts, [2.0] * len(ts))
    write_rows("events", [event_row("c1", "h100-sick", T0 - timedelta(minutes=20), "xid", 48, "gpu0", "critical")])

    peers = topology.peers_of("c1", ["job1", "job2"], T0)
    assert set(peers) == {"a100-1", "h100-1", "h100-2", "h100-other-metric"}
    assert peers[-1] == "a100-1"  # other GPU model last
    assert set(topology.peers_of("c1", ["job1", "job2"], T0, metrics=["gpu.temp"])) == {"a100-1", "h100-1", "h100-2"}
    assert len(topology.peers_of("c1", ["job1"], T0, limit=2)) == 2
