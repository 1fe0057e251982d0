"""Inventory from the labels of scraped and pushed series: what each GPU, NIC and disk is, kept so
kernel XIDs map to a GPU and a failure concentrated on one model, driver or firmware can be seen.

dcgm-exporter labels every GPU series with the board's identity and the node's driver
(``../shared/reference/formats/dcgm-exporter-labels.md``); node_exporter has ``*_info`` series
with the same for NICs and NVMe disks. Per series label set (resolved once, see
``normalize``), ``from_labels`` gives the rows it implies:

================================  ==================================================
label                             stored as
================================  ==================================================
``UUID`` / ``uuid`` / ``gpu_uuid``  components.uuid of the GPU
``pci_bus_id``                    components.pci_bus_id (normalised ``0000:bb:dd.f``):
                                  kernel ``NVRM: Xid (PCI:...)`` lines map to the GPU
``modelName`` / ``model_name`` /  components.model, hosts.gpu_model
``DCGM_FI_DEV_NAME``
``DCGM_FI_DEV_SERIAL``            components.serial
``DCGM_FI_DEV_VBIOS_VERSION``     components.firmware (the GPU's VBIOS)
``DCGM_FI_DRIVER_VERSION``        hosts.driver_version
node_infiniband_info              NIC ``device``: model ``hca_type``, firmware ``firmware_version``
node_nvme_info                    disk ``device``: model, serial, firmware ``firmware_revision``
================================  ==================================================

The GPU is the series' component up to its first ``/`` (``gpu3/nvlink2`` -> ``gpu3``). Only the
fields a series carries are set: rows are merged into the newest inventory row (a rack from a
bulk inventory stays), and written only when something changed, stamped with the receive time.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator, Mapping, NamedTuple

import pyarrow as pa

from telemetry import schema, store, writer
from telemetry.ingestion.kernel_log import normalize_pci_bus_id

_GPU_FIELDS = (  # (components column, labels in order of preference)
    ("uuid", ("UUID", "uuid", "gpu_uuid")),
    ("pci_bus_id", ("pci_bus_id",)),
    ("model", ("modelName", "model_name", "DCGM_FI_DEV_NAME")),
    ("serial", ("DCGM_FI_DEV_SERIAL",)),
    ("firmware", ("DCGM_FI_DEV_VBIOS_VERSION",)),
)
_INFO_SERIES = {  # node_exporter info series -> (kind, {components column: label})
    "node_infiniband_info": ("nic", {"model": "hca_type", "firmware": "firmware_version"}),
    "node_nvme_info": ("disk", {"model": "model", "serial": "serial", "firmware": "firmware_revision"}),
}
# Labels whose values the inventory keeps (``telemetry.ingestion.labels``: not reported as not stored).
LABELS_READ = frozenset({*(k for _, keys in _GPU_FIELDS for k in keys), "DCGM_FI_DRIVER_VERSION"})


def info_labels(name: str) -> frozenset[str]:
    """Further labels the inventory keeps for the info series ``name`` (node_infiniband_info, ...)."""
    info = _INFO_SERIES.get(name)
    return frozenset(info[1].values()) if info is not None else frozenset()


class Entry(NamedTuple):
    table: str  # hosts | components
    cluster: str
    host: str
    component: str  # '' for a hosts row
    fields: tuple[tuple[str, str], ...]  # (column, value), only what the labels say


def from_labels(name: str, labels: Mapping[str, str], cluster: str, host: str, component: str) -> list[Entry]:
    """The inventory rows one series' labels imply (often none)."""
    out: list[Entry] = []
    info = _INFO_SERIES.get(name)
    if info is not None:
        device = labels.get("device")
        if device:
            kind, cols = info
            fields = [("kind", kind)] + [(c, labels[k]) for c, k in cols.items() if labels.get(k)]
            out.append(Entry("components", cluster, host, device, tuple(fields)))
        return out
    if not (labels.get("gpu") or labels.get("UUID") or labels.get("uuid") or labels.get("gpu_uuid")):
        return out
    gpu = component.split("/", 1)[0]
    fields = [("kind", "gpu")]
    for column, keys in _GPU_FIELDS:
        value = next((labels[k] for k in keys if labels.get(k)), "")
        if not value:
            continue
        if column == "pci_bus_id":
            try:
                value = normalize_pci_bus_id(value)
            except ValueError:
                continue  # not a PCI address: nothing to map kernel lines with
        fields.append((column, value))
    if gpu and len(fields) > 1:
        out.append(Entry("components", cluster, host, gpu, tuple(fields)))
    host_fields = [(c, v) for c, v in fields if c == "model"][:1]
    host_fields = [("gpu_model", v) for _, v in host_fields]
    if labels.get("DCGM_FI_DRIVER_VERSION"):
        host_fields.append(("driver_version", labels["DCGM_FI_DRIVER_VERSION"]))
    if host_fields:
        out.append(Entry("hosts", cluster, host, "", tuple(host_fields)))
    return out


_local = threading.local()


@contextmanager
def collecting() -> Iterator[list[Entry]]:
    """Collect the entries ``note`` sees in this thread while the block runs."""
    found: list[Entry] = []
    outer = getattr(_local, "found", None)
    _local.found = found
    try:
        yield found
    finally:
        _local.found = outer


def note(entries: list[Entry]) -> None:
    found = getattr(_local, "found", None)
    if found is not None and entries:
        found.extend(entries)


_KEYS = {"hosts": ("cluster", "host"), "components": ("cluster", "host", "component")}


def write(entries: list[Entry] | tuple[Entry, ...], *, now_ms: int | None = None) -> dict[str, int]:
    """Merge ``entries`` into the newest inventory rows and write those that changed; rows per table."""
    if not entries:
        return {}
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    written: dict[str, int] = {}
    for table in ("hosts", "components"):
        wanted: dict[tuple, dict[str, str]] = {}
        for e in entries:
            if e.table == table:
                key = (e.cluster, e.host) if table == "hosts" else (e.cluster, e.host, e.component)
                wanted.setdefault(key, {}).update(dict(e.fields))
        if not wanted:
            continue
        sch = schema.TABLES[table]
        text_cols = [f.name for f in sch if f.name not in _KEYS[table] and f.name != "updated"]
        current = _current(table, sorted({k[0] for k in wanted}), sorted({k[1] for k in wanted}), text_cols)
        rows = []
        for key, fields in wanted.items():
            old = current.get(key, {c: "" for c in text_cols})
            new = {**old, **fields}
            if new != old or key not in current:
                rows.append(dict(zip(_KEYS[table], key)) | new)
        if not rows:
            continue
        cols = {name: [r[name] for r in rows] for name in _KEYS[table] + tuple(text_cols)}
        cols["updated"] = pa.array([now_ms] * len(rows), pa.int64()).cast(schema.TS)
        out = writer.conform(table, pa.table(cols))
        writer.write(table, out, tag="ingest:inventory")
        written[table] = len(rows)
    return written


def _current(table: str, clusters: list[str], hosts: list[str], cols: list[str]) -> dict[tuple, dict[str, str]]:
    keys = _KEYS[table]
    rows = store.query_rows(
        f"SELECT {', '.join(keys + tuple(cols))} FROM {table} FINAL "
        "WHERE cluster IN {clusters:Array(String)} AND host IN {hosts:Array(String)}",
        {"clusters": clusters, "hosts": hosts}, tag="ingest:inventory:current")
    n = len(keys)
    return {tuple(r[:n]): dict(zip(cols, r[n:])) for r in rows}
