"""`bench ingest-fleet`: its hand-assembled remote-write bodies are what the reference decoder
reads (labels as dcgm-exporter + Prometheus send them, one sample per series), and the command
knows the benchmark by its dashed name."""
from __future__ import annotations

import numpy as np

from telemetry.ingestion.remote_write import decode_write_request
from investigations.benchmarks import ingest_fleet
from webapp.management.commands import bench


def test_the_fleet_bodies_decode_to_the_series_they_claim():
    fleet = ingest_fleet.Fleet(hosts=3, node_series=100, seed=1)
    assert len(fleet) == 3 * (8 * 25 + 100)
    idx = np.array([0, 5, 199, 200, 299, 599])
    t0 = 1_790_000_000_000
    series = decode_write_request(fleet.body(idx, t0, rnd=2))
    assert len(series) == 6
    first = dict(series[0].labels)
    assert first["__name__"].startswith("DCGM_FI_") and first["Hostname"] == "gpu-0000"
    assert {"gpu", "UUID", "pci_bus_id", "device", "modelName", "instance", "job"} <= set(first)
    assert dict(series[4].labels)["job"] == "node" and dict(series[4].labels)["instance"] == "gpu-0000:9100"
    for s, i in zip(series, idx.tolist()):
        assert s.timestamps == [t0 + 2 * ingest_fleet.STEP_MS + int(fleet.offset_ms[i])]
        assert s.values[0] != 0.0
    later = decode_write_request(fleet.body(idx, t0, rnd=3))
    assert all(b.timestamps[0] > a.timestamps[0] for a, b in zip(series, later))


def test_a_body_from_its_template_is_the_same_request_byte_for_byte():
    """The senders build pushes from per-batch templates (cheaper for the machine the server
    shares); what they send must not change."""
    fleet = ingest_fleet.Fleet(hosts=3, node_series=100, seed=1)
    t0 = 1_790_000_000_000
    for idx in (np.array([0, 5, 199, 200, 299, 599]), np.arange(len(fleet)), np.array([7])):
        template = fleet.template(idx)
        for rnd in (0, 1, 4):
            assert fleet.body_from(template, idx, t0, rnd) == fleet.body(idx, t0, rnd)
    assert fleet.body_from(fleet.template(idx), idx, t0, 1) != fleet.body(idx, t0, 2)


def test_the_bench_command_names_the_module_with_a_dash():
    assert "ingest-fleet" in bench.available() and "ingest" in bench.available()
    assert bench._module("ingest-fleet") is ingest_fleet


def test_thread_cpu_is_summed_by_thread_name():
    import os
    from pathlib import Path

    main = Path(f"/proc/{os.getpid()}/comm").read_text().strip()
    sum(i * i for i in range(300_000))  # some CPU on this (the main) thread
    assert ingest_fleet.thread_cpu_s(os.getpid(), main) > 0
    assert ingest_fleet.thread_cpu_s(os.getpid(), "no-such-thread") == 0


def test_remote_write_pushes_keep_their_connection_on_the_real_server(tmp_path):
    """Reproduced first: `serve` (waitress) answered remote-write with 204, and waitress closes
    the connection after any response without a Content-Length, which it drops from a 204; so
    every push of a sender cost a new TCP connection (in bench ingest-fleet, accepting and setting
    up connections was ~7 % of the server's interpreter time). Two pushes must share one socket."""
    import http.client

    fleet = ingest_fleet.Fleet(hosts=2, node_series=10, seed=1)
    server = ingest_fleet.Server(tmp_path / "serve", threads=4)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        headers = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/x-protobuf",
                   "Content-Encoding": "snappy", "X-Prometheus-Remote-Write-Version": "0.1.0"}
        sockets = []
        for rnd in range(2):
            conn.request("POST", f"/api/ingest/remote-write?cluster={ingest_fleet.CLUSTER}",
                         body=fleet.body(np.arange(len(fleet)), 1_790_000_000_000, rnd), headers=headers)
            resp = conn.getresponse()
            assert resp.read() == b""
            assert not resp.will_close, (resp.status, resp.getheaders())  # the server keeps the connection
            assert resp.status == 200 and int(resp.getheader("X-Precursor-Rows-Written")) >= len(fleet)
            sockets.append(conn.sock)
        assert sockets[0] is sockets[1] and sockets[0] is not None
        conn.close()
    finally:
        server.stop()
