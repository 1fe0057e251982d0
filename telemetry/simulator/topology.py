"""Fleet inventory and topology: racks, leaf/spine switches, hosts and their parts.

Model: 4 hosts per rack, one leaf switch per 2 racks, one spine per 4 leaves.
Each host is an HGX H100 8-GPU server: gpu0..7, nvswitch0..3, one 400G backend
NIC per GPU (``mlx5_0/1`` .. ``mlx5_7/1``, cabled to the leaf), two frontend
NICs (``mlx5_8/1``, ``mlx5_9/1``) for storage and management, six PSUs, six
fans and a local NVMe (``nvme0n1``).

Driver and VBIOS versions are mixed across racks as in a fleet mid-rollout. The
first third of the racks carry VBIOS ``FW_HOT``; the scheduler places the
biggest jobs on the lowest-numbered hosts, so those racks are busier and see
more failures: the firmware is over-represented among failures without causing
any (a red herring recorded in the manifest). The realistic scenario gives the old racks a
higher hazard of their own and flashes ``FW_HOT`` onto its lemon hosts too
(``realistic._flash_depot_firmware``).
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from telemetry import schema

HOSTS_PER_RACK = 4
RACKS_PER_LEAF = 2
LEAVES_PER_SPINE = 4
GPUS = [f"gpu{i}" for i in range(8)]
NVSWITCHES = [f"nvswitch{i}" for i in range(4)]
BACKEND_NICS = [f"mlx5_{i}/1" for i in range(8)]
FRONTEND_NICS = ["mlx5_8/1", "mlx5_9/1"]
PSUS = [f"psu{i}" for i in range(6)]
FANS = [f"fan{i}" for i in range(6)]
DISKS = ["nvme0n1"]
GPU_MODEL = "NVIDIA H100 80GB HBM3"
GPU_BUS = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]  # HGX H100 PCI buses of gpu0..7
NIC_BUS = ["19", "2b", "3b", "5e", "9b", "ac", "bb", "dc", "0c", "0d"]
DRIVERS = ("535.183.01", "550.90.07", "550.127.05")
FW_HOT = "96.00.99.00.01"
FW_OTHER = ("96.00.89.00.01", "96.00.A5.00.01")


@dataclass
class Host:
    index: int
    name: str
    rack: str
    leaf: str
    spine: str
    driver: str
    firmware: str
    gpu_serials: list[str]
    gpu_uuids: list[str]


@dataclass
class Topology:
    cluster: str
    hosts: list[Host]

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    def firmware_share(self) -> dict[str, float]:
        fw = [h.firmware for h in self.hosts]
        return {v: fw.count(v) / len(fw) for v in sorted(set(fw))}


def host_name(i: int) -> str:
    return f"gpu{i:04d}"


def build(cluster: str, n_hosts: int, rng: np.random.Generator) -> Topology:
    n_racks = -(-n_hosts // HOSTS_PER_RACK)
    hot_racks = max(1, n_racks // 3)
    rack_driver = [DRIVERS[min(len(DRIVERS) - 1, r * len(DRIVERS) // n_racks)] for r in range(n_racks)]
    rng.shuffle(rack_driver)  # driver rollout is not aligned with firmware
    hosts = []
    for i in range(n_hosts):
        r = i // HOSTS_PER_RACK
        leaf = r // RACKS_PER_LEAF
        fw = FW_HOT if r < hot_racks else FW_OTHER[r % 2]
        serials = [f"16523{int(rng.integers(10**7, 10**8))}" for _ in GPUS]
        uuids = [f"GPU-{uuid.UUID(bytes=rng.bytes(16), version=4)}" for _ in GPUS]
        hosts.append(Host(i, host_name(i), f"rack-{r:02d}", f"leaf-{leaf:02d}",
                          f"spine-{leaf // LEAVES_PER_SPINE:02d}", rack_driver[r], fw, serials, uuids))
    return Topology(cluster, hosts)


def hosts_table(topo: Topology, updated_ms: int) -> pa.Table:
    h = topo.hosts
    return pa.table({
        "cluster": [topo.cluster] * len(h),
        "host": [x.name for x in h],
        "rack": [x.rack for x in h],
        "leaf": [x.leaf for x in h],
        "spine": [x.spine for x in h],
        "gpu_model": [GPU_MODEL] * len(h),
        "driver_version": [x.driver for x in h],
        "firmware_version": [x.firmware for x in h],
        "updated": pa.array([updated_ms] * len(h), schema.TS),
    }, schema=schema.HOSTS)


def components_table(topo: Topology, updated_ms: int) -> pa.Table:
    rows: dict[str, list] = {name: [] for name in schema.COMPONENTS.names}

    def add(host: Host, component, kind, model, serial="", uid="", bus="", fw="", peer=""):
        for key, value in (("cluster", topo.cluster), ("host", host.name), ("component", component), ("kind", kind),
                           ("model", model), ("serial", serial), ("uuid", uid), ("pci_bus_id", bus),
                           ("firmware", fw), ("peer", peer), ("updated", updated_ms)):
            rows[key].append(value)

    for host in topo.hosts:
        for g, name in enumerate(GPUS):
            add(host, name, "gpu", GPU_MODEL, host.gpu_serials[g], host.gpu_uuids[g], f"0000:{GPU_BUS[g]}:00.0",
                host.firmware)
        for s, name in enumerate(NVSWITCHES):
            add(host, name, "nvswitch", "NVSwitch Gen3", f"NVS{host.index:04d}{s}", "", f"0000:{5 + s:02x}:00.0",
                "96.10.55.00.01")
        for n, name in enumerate(BACKEND_NICS + FRONTEND_NICS):
            backend = n < len(BACKEND_NICS)
            port = (host.index % (HOSTS_PER_RACK * RACKS_PER_LEAF)) * 8 + n + 1
            add(host, name, "nic", "ConnectX-7 400GbE" if backend else "ConnectX-7 200GbE",
                f"MT{host.index:04d}X{n:02d}", "", f"0000:{NIC_BUS[n]}:00.0", "28.39.1002",
                f"{host.leaf}:p{port}" if backend else f"fe-{host.rack}:p{host.index % HOSTS_PER_RACK * 2 + n - 7}")
        for p in PSUS:
            add(host, p, "psu", "3300W 80+ Titanium", f"PS{host.index:04d}{p[-1]}")
        for f in FANS:
            add(host, f, "fan", "80mm fan module")
        add(host, "nvme0n1", "disk", "3.84TB NVMe U.2", f"S6{host.index:06d}")
    rows["updated"] = pa.array(rows["updated"], schema.TS)
    return pa.table(rows, schema=schema.COMPONENTS)
