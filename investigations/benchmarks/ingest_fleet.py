"""Fleet-rate ingestion: 16 remote-write senders and 16 scrape relays against a running `serve`,
against the raw engine inserting the same rows in 100,000-row blocks, same run.

A generated fleet (``--hosts`` 4,000 nodes x (8 GPUs x 25 DCGM fields with the labels
dcgm-exporter emits + ``--node-series`` 100 node_exporter series) = 1.2 M series; the target
labels ``instance``/``job`` a Prometheus adds) is pushed as Prometheus' remote-write queues
push it: series sharded by hash over ``--senders`` (16) queues, each sending
``--batch`` (2,000)-sample requests over keep-alive HTTP, one sample per series per
15 s round, strictly increasing timestamps. A 429 is retried after its ``Retry-After``,
a 5xx after 1 s (as Prometheus does); a sample counts as sent when its request got a 2xx.

`serve` runs as a subprocess on a free port with its own data dir (embedded chDB). One
untimed round first (every label set is new then: the label-set caches fill), then
``--seconds`` (60) timed. Then the text path: ``--relays`` (16) relays posting one
500-sample scrape per host (the host's dcgm-exporter scrape + ``--text-node-series``
300 node_exporter series, no host label on the latter: ``?host=``) over the 4,000 hosts,
one untimed pass, then ``--text-seconds`` (30) timed. ``samples_stored`` is what the
server's ``/api/ingest/stats`` reports for the remote-write cluster after the run.
``--seconds 0`` runs the text phase alone (no fleet generation, no raw engine). The server's own
CPU per request (``/proc``) is reported beside each rate, so a figure taken on a loaded machine
can still be read (what the server spent, not what the neighbours did), and the part of it the
engine's background merges took (``server_merge_cpu_ms_per_request``: the raw figure times only
its inserts, so the merges of its parts are not in it).

The raw figure: the server stopped, this process inserts the rows of the first round
(decoded here with the same decoder, so the same rows) into its own fresh embedded store
(same schema and views) with bare ``insert_arrow`` in 100,000-row blocks.

Bodies are generated while sending (bytes assembled from pre-encoded label sets, so the
senders cost little CPU, but they do share the machine with the server: on 2 cores that
matters, and the figures say so).
"""
from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import cramjam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from telemetry.ingestion import normalize
from telemetry.ingestion.remote_write import COMPILED_SCANNER, varint

CLUSTER = "bench-fleet-rw"
TEXT_CLUSTER = "bench-fleet-text"
STEP_MS = 15_000
GPUS = 8
DCGM_FIELDS = (
    ("DCGM_FI_DEV_GPU_TEMP", 55.0), ("DCGM_FI_DEV_MEMORY_TEMP", 63.0), ("DCGM_FI_DEV_POWER_USAGE", 612.5),
    ("DCGM_FI_DEV_GPU_UTIL", 97.0), ("DCGM_FI_DEV_MEM_COPY_UTIL", 41.0), ("DCGM_FI_DEV_SM_CLOCK", 1980.0),
    ("DCGM_FI_DEV_MEM_CLOCK", 2619.0), ("DCGM_FI_DEV_FB_USED", 71234.0), ("DCGM_FI_DEV_FB_FREE", 9800.0),
    ("DCGM_FI_DEV_XID_ERRORS", 0.0), ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 3.0),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 12.0), ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0.0),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 183e6), ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 91_234_567_890.0),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.93), ("DCGM_FI_PROF_SM_ACTIVE", 0.88),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.61), ("DCGM_FI_PROF_DRAM_ACTIVE", 0.47),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 0.0), ("DCGM_FI_DEV_ENC_UTIL", 0.0), ("DCGM_FI_DEV_DEC_UTIL", 0.0),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", 2.1e9), ("DCGM_FI_PROF_PCIE_RX_BYTES", 1.7e9),
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", 9.4e10),
)


def add_arguments(parser) -> None:
    parser.add_argument("--hosts", type=int, default=4000)
    parser.add_argument("--node-series", type=int, default=100, help="node_exporter series per host (remote-write)")
    parser.add_argument("--text-node-series", type=int, default=300,
                        help="node_exporter series per host scrape (text; + 200 DCGM = 500 samples)")
    parser.add_argument("--senders", type=int, default=16)
    parser.add_argument("--batch", type=int, default=2000, help="samples per remote-write request")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="timed remote-write phase (0: skip it and the raw engine, text only)")
    parser.add_argument("--relays", type=int, default=16)
    parser.add_argument("--text-seconds", type=float, default=30.0, help="timed text phase (0: skip)")
    parser.add_argument("--threads", type=int, default=24, help="serve's web request threads")
    parser.add_argument("--raw-block", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=11)


# --- the fleet ----------------------------------------------------------------------------


def _dcgm_labels(h: int, g: int, name: str) -> dict[str, str]:
    """A series' labels as Prometheus sends them: dcgm-exporter's (empty pod/namespace/container
    values dropped, as Prometheus drops empty labels) plus the target's instance and job."""
    labels = {
        "__name__": name, "gpu": str(g),
        "UUID": f"GPU-{h:04x}{g:04x}-5f2c-4b1e-9a3d-0c7e6b5a{(h * 8 + g) % 65536:04x}",
        "pci_bus_id": f"00000000:{(0x18 + g * 0x11) & 0xFF:02X}:00.0", "device": f"nvidia{g}",
        "modelName": "NVIDIA H100 80GB HBM3", "Hostname": f"gpu-{h:04d}",
        "DCGM_FI_DRIVER_VERSION": "550.54.15", "instance": f"gpu-{h:04d}:9400", "job": "dcgm-exporter",
    }
    if name == "DCGM_FI_DEV_XID_ERRORS":
        labels.update(err_code="0", err_msg="No Error")
    return labels


def _node_series(n: int) -> list[tuple[str, dict[str, str], float]]:
    """``n`` node_exporter series of one node (name, labels without the target labels, value)."""
    out: list[tuple[str, dict[str, str], float]] = []
    for name, v in (("node_load1", 31.2), ("node_load5", 30.8), ("node_load15", 29.9),
                    ("node_memory_MemAvailable_bytes", 1.7e12), ("node_memory_MemFree_bytes", 1.1e12),
                    ("node_boot_time_seconds", 1.79e9), ("node_procs_running", 34.0), ("node_context_switches_total", 8.1e11)):
        out.append((name, {}, v))
    for s in range(1, 13):
        out.append(("node_hwmon_temp_celsius", {"chip": "platform_coretemp_0", "sensor": f"temp{s}"}, 40.0 + s))
    for d in ("eth0", "eth1", "ib0", "ib1"):
        out.append(("node_network_receive_bytes_total", {"device": d}, 7.3e13))
        out.append(("node_network_transmit_bytes_total", {"device": d}, 6.9e13))
    for k in range(8):
        for name in ("node_infiniband_port_data_received_bytes_total", "node_infiniband_port_data_transmitted_bytes_total"):
            out.append((name, {"device": f"mlx5_{k}", "port": "1"}, 2.2e14))
    for k, mnt in enumerate(("/", "/var", "/scratch", "/home")):
        out.append(("node_filesystem_avail_bytes", {"device": f"/dev/nvme{k}n1p1", "fstype": "ext4", "mountpoint": mnt}, 3.1e12))
    for k in range(4):
        out.append(("node_edac_csrow_correctable_errors_total", {"controller": "0", "csrow": str(k)}, 1.0 + k))
        for name in ("node_disk_read_bytes_total", "node_disk_written_bytes_total"):
            out.append((name, {"device": f"nvme{k}n1"}, 4.4e12))
    cpu = 0
    while len(out) < n:
        for mode in ("idle", "user", "system", "iowait", "irq", "softirq", "steal", "nice"):
            out.append(("node_cpu_seconds_total", {"cpu": str(cpu), "mode": mode}, 1.5e6 + cpu))
        cpu += 1
    return out[:n]


def _series_prefix(labels: dict[str, str]) -> bytes:
    """``TimeSeries`` tag, length and label fields (names sorted) for a one-sample series."""
    fields = []
    for name in sorted(labels):
        nb, vb = name.encode(), labels[name].encode()
        lab = b"\x0a" + varint(len(nb)) + nb + b"\x12" + varint(len(vb)) + vb
        fields.append(b"\x0a" + varint(len(lab)) + lab)
    body = b"".join(fields)
    return b"\x0a" + varint(len(body) + _SAMPLE_BYTES) + body


_SAMPLE_BYTES = 18  # Sample field: tag, length, 0x09 + double, 0x10 + a 6-byte varint timestamp


def _sample_fields(values: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """[n, 18] bytes: one ``Sample`` field per series (ms timestamps need 6 varint bytes until 2109)."""
    n = len(values)
    out = np.empty((n, _SAMPLE_BYTES), dtype=np.uint8)
    out[:, 0], out[:, 1], out[:, 2] = 0x12, 16, 0x09
    out[:, 3:11] = values.astype("<f8").view(np.uint8).reshape(n, 8)
    out[:, 11] = 0x10
    t = ts.astype(np.int64)
    for k in range(6):
        out[:, 12 + k] = ((t >> (7 * k)) & 0x7F) | (0x80 if k < 5 else 0)
    return out


class Fleet:
    def __init__(self, hosts: int, node_series: int, seed: int) -> None:
        rng = random.Random(seed)
        prefixes: list[bytes] = []
        base: list[float] = []
        host_of: list[int] = []
        node = _node_series(node_series)
        for h in range(hosts):
            for name, v in DCGM_FIELDS:
                for g in range(GPUS):
                    prefixes.append(_series_prefix(_dcgm_labels(h, g, name)))
                    base.append(v)
                    host_of.append(h)
            for name, labels, v in node:
                prefixes.append(_series_prefix({"__name__": name, **labels, "instance": f"gpu-{h:04d}:9100",
                                                "job": "node"}))
                base.append(v)
                host_of.append(h)
        self.prefixes = prefixes
        self.base = np.array(base)
        self.offset_ms = np.array([rng.randrange(STEP_MS) for _ in range(hosts)], dtype=np.int64)[host_of]
        self.label_bytes = sum(len(p) for p in prefixes)
        self.templates: dict = {}  # (sender, batch) -> {offset: template}: see ``body_from``

    def __len__(self) -> int:
        return len(self.prefixes)

    def shards(self, senders: int, seed: int) -> list[np.ndarray]:
        """Series indices per sender (Prometheus shards by series hash: a pseudo-random split)."""
        order = np.random.default_rng(seed).permutation(len(self))
        return [np.sort(order[k::senders]) for k in range(senders)]

    def _round_fields(self, idx: np.ndarray, t0: int, rnd: int) -> np.ndarray:
        values = self.base[idx] * (1.0 + 0.001 * ((rnd * 7 + idx) % 13)) + 0.5  # never 0.0, changes per round
        ts = t0 + rnd * STEP_MS + self.offset_ms[idx]
        return _sample_fields(values, ts)

    def body(self, idx: np.ndarray, t0: int, rnd: int) -> bytes:
        """Snappy-compressed WriteRequest of one sample per series ``idx`` for round ``rnd``."""
        fields = self._round_fields(idx, t0, rnd)
        prefixes = self.prefixes
        raw = b"".join([b for i, row in zip(idx.tolist(), fields) for b in (prefixes[i], row.tobytes())])
        return bytes(cramjam.snappy.compress_raw(raw))

    def template(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The uncompressed body of series ``idx`` with blank samples, and where each sample goes."""
        prefixes = [self.prefixes[i] for i in idx.tolist()]
        blank = bytes(_SAMPLE_BYTES)
        raw = np.frombuffer(b"".join([b for p in prefixes for b in (p, blank)]), dtype=np.uint8).copy()
        ends = np.cumsum([len(p) + _SAMPLE_BYTES for p in prefixes])
        return raw, (ends - _SAMPLE_BYTES)[:, None] + np.arange(_SAMPLE_BYTES)

    def body_from(self, template: tuple[np.ndarray, np.ndarray], idx: np.ndarray, t0: int, rnd: int) -> bytes:
        """``body`` (the same bytes) from ``template(idx)``: the senders build each push in ~0.4 ms
        instead of ~1.3 (measured for 2,000-sample pushes), CPU a Prometheus would spend on its own machine, not on the server's."""
        raw, where = template
        raw = raw.copy()
        raw[where] = self._round_fields(idx, t0, rnd)
        return bytes(cramjam.snappy.compress_raw(raw.tobytes()))


def _text_bodies(hosts: int, node_series: int) -> list[bytes]:
    """One scrape per host: its dcgm-exporter page (with Hostname) and node_exporter page (no host label)."""
    node = _node_series(node_series)
    out = []
    for h in range(hosts):
        lines = []
        for name, v in DCGM_FIELDS:
            lines.append(f"# HELP {name} {name}.\n# TYPE {name} gauge")
            for g in range(GPUS):
                lab = _dcgm_labels(h, g, name)
                del lab["__name__"], lab["instance"], lab["job"]
                body = ",".join(f'{k}="{val}"' for k, val in lab.items())
                lines.append(f"{name}{{{body}}} {v + g:g}")
        last = None
        for name, labels, v in node:
            if name != last:
                lines.append(f"# HELP {name} {name}.\n# TYPE {name} gauge")
                last = name
            body = ",".join(f'{k}="{val}"' for k, val in labels.items())
            lines.append(f"{name}{{{body}}} {v:g}" if body else f"{name} {v:g}")
        out.append(("\n".join(lines) + "\n").encode())
    return out


# --- the server ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _manage(env: dict, *args: str) -> str:
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=600)
    if done.returncode:
        raise RuntimeError(f"manage.py {' '.join(args)} failed: {done.stderr[-2000:]}")
    return done.stdout


class Server:
    def __init__(self, data_dir: Path, threads: int) -> None:
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "TELEMETRY_DSN")}
        self.env["PRECURSOR_DATA_DIR"] = str(data_dir)
        _manage(self.env, "migrate", "-v0")
        self.token = _manage(self.env, "create_token", "bench-fleet").strip().splitlines()[-1]
        self.port = _free_port()
        self.log = open(data_dir / "serve.log", "w+")
        repo = Path(__file__).resolve().parents[2]
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(self.port), "--threads", str(threads)],
            cwd=repo, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                status, _, _ = self.request("GET", "/healthz", b"", {})
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        self.log.seek(0)
        raise RuntimeError(f"serve did not become healthy:\n{self.log.read()[-3000:]}")

    def request(self, method: str, path: str, body: bytes, headers: dict, conn=None):
        own = conn is None
        conn = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        if own:
            conn.close()
        return resp.status, resp.getheader("Retry-After"), data

    def peak_rss_mb(self) -> float | None:
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
        except OSError:
            return None
        return None

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the server process has used so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def merge_cpu_s(self) -> float:
        """CPU seconds the engine's background merges (threads named MergeMutate*) have used."""
        return thread_cpu_s(self.proc.pid, "MergeMutate")

    def stats(self, cluster: str) -> dict:
        status, _, data = self.request("GET", f"/api/ingest/stats?cluster={cluster}", b"",
                                       {"Authorization": f"Bearer {self.token}"})
        if status != 200:
            raise RuntimeError(f"/api/ingest/stats answered {status}: {data[:300]!r}")
        return json.loads(data)

    def stored(self, cluster: str) -> int:
        return sum(m["rows"] for m in self.stats(cluster)["samples"].values())

    def group_commit(self) -> dict:
        """The server's samples group commit so far: inserts, requests, rows; and its deferred
        rollups (``rollup_flushes``, ``rollup_rows_fed``)."""
        stats = self.stats(CLUSTER)
        rolled = stats.get("rollup", {})
        return {**stats.get("group_commit", {}), "rollup_flushes": rolled.get("flushes", 0),
                "rollup_rows_fed": rolled.get("rows_fed", 0), "rollup_rows_written": rolled.get("rows_written", 0),
                "rollup_max_pending_bytes": rolled.get("max_pending_bytes", 0)}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def thread_cpu_s(pid: int, prefix: str) -> float:
    """CPU seconds (user + system) of the live threads of ``pid`` whose name starts with ``prefix``
    (the engine names its pools: MergeMutate* merge the parts inserts leave behind)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if name.startswith(prefix):
            fields = stat.rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


# --- senders ------------------------------------------------------------------------------


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.samples = 0
        self.requests = 0
        self.latencies: list[float] = []
        self.status: dict[int, int] = {}

    def add(self, samples: int, latency: float) -> None:
        with self.lock:
            self.samples += samples
            self.requests += 1
            self.latencies.append(latency)


def _post_until_accepted(server: Server, conn_box: list, path: str, body: bytes, headers: dict, tally: Tally,
                         stop: threading.Event) -> float | None:
    """POST until 2xx (429: wait Retry-After; 5xx or a dropped connection: wait 1 s); the latency
    of the accepted attempt, or None when stopped before."""
    while True:
        if conn_box[0] is None:
            conn_box[0] = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
        start = time.perf_counter()
        try:
            status, retry_after, _ = server.request("POST", path, body, headers, conn=conn_box[0])
        except (OSError, http.client.HTTPException):
            conn_box[0].close()
            conn_box[0] = None
            status, retry_after = 599, "1"
        latency = time.perf_counter() - start
        with tally.lock:
            tally.status[status] = tally.status.get(status, 0) + 1
        if 200 <= status < 300:
            return latency
        if 400 <= status < 500 and status != 429:
            raise RuntimeError(f"{path}: {status}")
        if stop.is_set() and status != 429:
            return None
        time.sleep(float(retry_after or 1))


def _remote_write_phase(server: Server, fleet: Fleet, shards: list[np.ndarray], batch: int, t0: int,
                        rounds: range | None, seconds: float | None, first_round: int, tally: Tally) -> int:
    """Senders push whole rounds (``rounds``) or for ``seconds``; returns the next round number."""
    stop = threading.Event()
    path = f"/api/ingest/remote-write?cluster={CLUSTER}"
    headers = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/x-protobuf",
               "Content-Encoding": "snappy", "X-Prometheus-Remote-Write-Version": "0.1.0"}
    next_round = [first_round]

    def sender(k: int) -> None:
        conn = [None]
        rnd = first_round
        own = shards[k]
        templates = fleet.templates.setdefault((k, batch), {})  # built in the warm round, reused after
        while True:
            if rounds is not None and rnd >= rounds.stop:
                break
            for j in range(0, len(own), batch):
                if stop.is_set():
                    return
                idx = own[j : j + batch]
                if j not in templates:
                    templates[j] = fleet.template(idx)
                body = fleet.body_from(templates[j], idx, t0, rnd)
                latency = _post_until_accepted(server, conn, path, body, headers, tally, stop)
                if latency is not None:
                    tally.add(len(idx), latency)
            rnd += 1
            with tally.lock:
                next_round[0] = max(next_round[0], rnd)

    threads = [threading.Thread(target=sender, args=(k,), daemon=True) for k in range(len(shards))]
    for t in threads:
        t.start()
    if seconds is not None:
        time.sleep(seconds)
        stop.set()
    for t in threads:
        t.join()
    return next_round[0]


def _text_phase(server: Server, bodies: list[bytes], relays: int, t0: int, seconds: float | None,
                first_round: int, tally: Tally) -> None:
    stop = threading.Event()
    headers = {"Authorization": f"Bearer {server.token}", "Content-Type": "text/plain; version=0.0.4"}

    def relay(k: int) -> None:
        conn = [None]
        rnd = first_round
        while True:
            for h in range(k, len(bodies), relays):
                if stop.is_set():
                    return
                ts = t0 + rnd * STEP_MS
                path = f"/api/ingest/prometheus?cluster={TEXT_CLUSTER}&host=gpu-{h:04d}&ts={ts}"
                latency = _post_until_accepted(server, conn, path, bodies[h], headers, tally, stop)
                if latency is not None:
                    tally.add(_text_samples[h], latency)
            rnd += 1
            if seconds is None:
                return

    threads = [threading.Thread(target=relay, args=(k,), daemon=True) for k in range(relays)]
    for t in threads:
        t.start()
    if seconds is not None:
        time.sleep(seconds)
        stop.set()
    for t in threads:
        t.join()


_text_samples: list[int] = []


def _p(values: list[float], q: float) -> float:
    return round(float(np.percentile(np.array(values), q)) * 1000, 1) if values else 0.0


# --- the raw engine -----------------------------------------------------------------------


def _raw_rows_per_s(tables: list[pa.Table], block: int, data_dir: Path, progress,
                    seconds: float = 0.0) -> tuple[float, int, float]:
    """The raw engine inserting the round's rows in ``block``-row blocks, pass after pass (each
    pass 15 s later, like the fleet's rounds), for ``seconds`` of insert time and at least two
    passes: returns (sustained rows/s, rows, burst rows/s of the first two passes). The server is
    measured over a sustained phase, paying the background merges of all it stored meanwhile;
    the raw figure is taken over as long, so the engine's own merges compete with its inserts
    too (the first two passes alone, the figure quoted before 2026-12-05, ran before most
    merges started)."""
    from telemetry import migrate, store

    store.configure(f"chdb://{data_dir}")
    client = store.get_client()
    from django.conf import settings

    migrate.migrate(client, migrate.Target(cluster="", ttl_days=settings.TELEMETRY_TTL_DAYS), log=lambda m: None)
    table = pa.concat_tables(tables).combine_chunks()
    blocks = [table.slice(i, block) for i in range(0, table.num_rows, block)]
    progress(f"raw engine: {len(blocks)} blocks of {block:,} rows per pass, for {max(seconds, 0):.0f} s")
    client.insert_arrow("samples", blocks[0])  # warm the engine (first insert plans everything once)
    rows, spent, burst = 0, 0.0, 0.0
    k = 0
    while k < 2 or spent < seconds:
        k += 1
        shift = pa.scalar(STEP_MS * k, pa.duration("ms"))
        for b in blocks:
            b = b.set_column(0, "ts", pc.add(b.column("ts"), shift))
            start = time.perf_counter()
            client.insert_arrow("samples", b)
            spent += time.perf_counter() - start
            rows += b.num_rows
        if k == 2:
            burst = rows / spent
    return rows / spent, rows, burst


# --- run ----------------------------------------------------------------------------------


def run(options: dict, progress) -> dict:
    hosts = options["hosts"]
    t0 = (int(time.time() * 1000) // STEP_MS) * STEP_MS - 3_600_000
    tmp = Path(tempfile.mkdtemp(prefix="precursor-bench-fleet-"))
    rw: dict = {}
    try:
        fleet = tables = None
        if options["seconds"] > 0:
            fleet, tables, rw = _fleet(options, t0, progress)
        progress("text bodies …")
        text_bodies = _text_bodies(hosts, options["text_node_series"]) if options["text_seconds"] > 0 else []
        _text_samples[:] = [len(_node_series(options["text_node_series"])) + GPUS * len(DCGM_FIELDS)] * len(text_bodies)

        server = Server(tmp / "serve", options["threads"])
        progress(f"serve (pid {server.proc.pid}) on port {server.port}")
        try:
            if fleet is not None:
                shards = fleet.shards(options["senders"], options["seed"])
                rw.update(_remote_write_run(server, fleet, shards, options["batch"], t0, options, progress))
            text = _text_run(server, text_bodies, t0, options, progress) if text_bodies else {}
            peak = server.peak_rss_mb()
        finally:
            server.stop()
        if fleet is not None:
            progress("raw engine, same rows, 100,000-row blocks …")
            raw_rate, raw_rows, burst = _raw_rows_per_s(tables, options["raw_block"], tmp / "raw", progress,
                                                        seconds=rw.get("timed_s", 0.0))
            rw.update(raw_rows_per_s=round(raw_rate), ratio=round(rw["samples_per_s"] / raw_rate, 3),
                      raw_rows=raw_rows, raw_block_rows=options["raw_block"],
                      raw_burst_rows_per_s=round(burst), burst_ratio=round(rw["samples_per_s"] / burst, 3))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "hosts": hosts,
        **rw,
        "peak_rss_mb": peak,
        **text,
        "cpus": os.cpu_count(),
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "targets": {"ratio": ">= 0.5", "samples_stored": "= samples_sent", "p95_ms": "<= 2000",
                    "text_samples_per_s": ">= 100000"},
    }


def _fleet(options: dict, t0: int, progress) -> tuple[Fleet, list[pa.Table], dict]:
    """The remote-write fleet, the rows of its round 0 decoded here by the same decoder (what
    the raw engine inserts) and the label-set cache's size for this fleet, measured."""
    progress(f"generating the fleet: {options['hosts']:,} hosts x ({GPUS} GPUs x {len(DCGM_FIELDS)} DCGM fields "
             f"+ {options['node_series']} node_exporter series) …")
    fleet = Fleet(options["hosts"], options["node_series"], options["seed"])
    batch = options["batch"]
    progress("decoding round 0 in this process (raw rows, cache size) …")
    normalize._templates.pop(CLUSTER, None)
    tables = []
    for shard in fleet.shards(options["senders"], options["seed"]):
        for j in range(0, len(shard), batch):
            tables.append(normalize.decode_to_table(fleet.body(shard[j : j + batch], t0, 0), cluster=CLUSTER).table)
    cache = normalize._templates[CLUSTER]
    cache_bytes, cache_series = cache.nbytes(), cache.size
    normalize._templates.pop(CLUSTER, None)
    progress(f"{len(fleet):,} series, {sum(t.num_rows for t in tables):,} rows per round; label-set cache "
             f"{cache_bytes / cache_series:.1f} bytes/series")
    return fleet, tables, {
        "fleet_series": len(fleet),
        "compiled_scanner": COMPILED_SCANNER,  # serve inherits this process's environment
        "label_cache_bytes_per_series": round(cache_bytes / cache_series, 1),
        "label_cache_bytes_per_series_bound": normalize.BYTES_PER_SERIES,
        "label_cache_mb_for_fleet": round(cache_bytes / 2**20, 1),
    }


def _remote_write_run(server: Server, fleet: Fleet, shards: list[np.ndarray], batch: int, t0: int, options: dict,
                      progress) -> dict:
    progress("remote-write: warm round (every label set new) …")
    warm = Tally()
    start = time.perf_counter()
    next_round = _remote_write_phase(server, fleet, shards, batch, t0, range(0, 1), None, 0, warm)
    warm_s = time.perf_counter() - start
    progress(f"warm round: {warm.samples:,} samples in {warm_s:.1f} s; timed {options['seconds']:.0f} s …")
    timed = Tally()
    groups = server.group_commit()
    start, cpu, merges = time.perf_counter(), server.cpu_s(), server.merge_cpu_s()
    _remote_write_phase(server, fleet, shards, batch, t0, None, options["seconds"], next_round, timed)
    elapsed = time.perf_counter() - start
    cpu, merges = server.cpu_s() - cpu, server.merge_cpu_s() - merges
    groups = {k: v - groups.get(k, 0) for k, v in server.group_commit().items()}
    stored = server.stored(CLUSTER)
    progress(f"remote-write: {timed.samples / elapsed:,.0f} samples/s, p95 "
             f"{_p(timed.latencies, 95):,.0f} ms, stored {stored:,} of {warm.samples + timed.samples:,} sent")
    statuses: dict[str, int] = {}
    for t in (warm, timed):
        for s, n in t.status.items():
            statuses[str(s)] = statuses.get(str(s), 0) + n
    return {
        "senders": options["senders"],
        "samples_per_request": batch,
        "samples_per_s": round(timed.samples / elapsed),
        "p50_ms": _p(timed.latencies, 50),
        "p95_ms": _p(timed.latencies, 95),
        "p99_ms": _p(timed.latencies, 99),
        "timed_s": round(elapsed, 1),
        "warm_round_s": round(warm_s, 1),
        "server_cpu_ms_per_request": round(1000 * cpu / max(1, timed.requests), 2),
        "server_cores_used": round(cpu / elapsed, 2),
        # of it, the engine's background merges of the parts the inserts made (warm round's too)
        "server_merge_cpu_ms_per_request": round(1000 * merges / max(1, timed.requests), 2),
        # timed phase: pushes and rows per insert of the server's group commit
        "requests_per_insert": round(groups["requests"] / groups["inserts"], 2) if groups.get("inserts") else None,
        "rows_per_insert": round(groups["rows"] / groups["inserts"]) if groups.get("inserts") else None,
        # timed phase: the server's feeds of the pushed rows to the rollups (telemetry.rollup),
        # part of its CPU above (the raw engine's inserts are rolled by the view, per block)
        "rollup_flushes": groups.get("rollup_flushes"),
        "rollup_rows_fed": groups.get("rollup_rows_fed"),
        # samples_1m rows written for them: one per series-minute of each flush, so about one per
        # sample where a flush holds one sample per series (no band rates: README, Telemetry model)
        "rollup_rows_written": groups.get("rollup_rows_written"),
        # the most the server's rollup buffer held (Arrow bytes; not a difference over the phase)
        "rollup_buffer_peak_mb": round(server.group_commit().get("rollup_max_pending_bytes", 0) / 1e6, 1),
        "samples_sent": warm.samples + timed.samples,
        "samples_stored": stored,
        "http_status_counts": statuses,
        "peak_rss_mb_after_remote_write": server.peak_rss_mb(),
    }


def _text_run(server: Server, text_bodies: list[bytes], t0: int, options: dict, progress) -> dict:
    progress(f"text: warm pass over the {len(text_bodies):,} hosts …")
    text_warm = Tally()
    start, warm_cpu = time.perf_counter(), server.cpu_s()
    _text_phase(server, text_bodies, options["relays"], t0, None, 0, text_warm)
    warm_s = time.perf_counter() - start
    warm_cpu = server.cpu_s() - warm_cpu
    progress(f"text: warm pass {text_warm.samples:,} samples in {warm_s:.1f} s; timed {options['text_seconds']:.0f} s …")
    text_tally = Tally()
    start, cpu, merges = time.perf_counter(), server.cpu_s(), server.merge_cpu_s()
    _text_phase(server, text_bodies, options["relays"], t0, options["text_seconds"], 1, text_tally)
    text_elapsed = time.perf_counter() - start
    cpu, merges = server.cpu_s() - cpu, server.merge_cpu_s() - merges
    text_stored = server.stored(TEXT_CLUSTER)
    progress(f"text: {text_tally.samples / text_elapsed:,.0f} samples/s, p95 {_p(text_tally.latencies, 95):,.0f} ms")
    return {
        "text_samples_per_s": round(text_tally.samples / text_elapsed),
        "text_p95_ms": _p(text_tally.latencies, 95),
        "text_warm_pass_s": round(warm_s, 1),
        "text_warm_server_cpu_ms_per_request": round(1000 * warm_cpu / max(1, text_warm.requests), 2),
        # what the server process itself spent per scrape (the relays and other load excluded)
        "text_server_cpu_ms_per_request": round(1000 * cpu / max(1, text_tally.requests), 2),
        "text_server_cores_used": round(cpu / text_elapsed, 2),
        "text_server_merge_cpu_ms_per_request": round(1000 * merges / max(1, text_tally.requests), 2),
        "text_samples_sent": text_warm.samples + text_tally.samples,
        "text_samples_stored": text_stored,
        "text_scrape_samples": _text_samples[0],
        "text_hosts": len(text_bodies),
        "text_relays": options["relays"],
    }
