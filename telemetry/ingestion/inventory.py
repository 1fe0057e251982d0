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
Concurrent requests share one read and one insert per table (``group_commit.Batcher``), and rows
this process already knows to hold the fields cost no store call: a fleet's warm-up (every label
set new) pays no per-request inventory round trips.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator, Mapping, NamedTuple

import pyarrow as pa

from telemetry import schema, store, writer
from telemetry.ingestion import group_commit, series_labels
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
    table: str  # hosts | components | series_labels (telemetry.ingestion.series_labels)
    cluster: str
    host: str
    component: str  # '' for a hosts row
    fields: tuple[tuple[str, str], ...]  # (column, value), only what the labels say; series_labels: (label, value)
    metric: str = ""  # series_labels: the series' stored metric


# The labels a GPU series' inventory rows depend on: a DCGM scrape carries the same ones on every
# field of a GPU (25 label sets, one answer), so answers are remembered by their values.
_GPU_LABELS = ("gpu", "UUID", "uuid", "gpu_uuid", "DCGM_FI_DRIVER_VERSION",
               *dict.fromkeys(k for _, keys in _GPU_FIELDS for k in keys))
_FROM_LABELS: dict[tuple, tuple[Entry, ...]] = {}
_FROM_LABELS_MAX = 100_000


def from_labels(name: str, labels: Mapping[str, str], cluster: str, host: str, component: str) -> list[Entry]:
    """The inventory rows one series' labels imply (often none)."""
    if name in _INFO_SERIES:
        return _from_labels(name, labels, cluster, host, component)
    key = (cluster, host, component, *map(labels.get, _GPU_LABELS))
    found = _FROM_LABELS.get(key)
    if found is None:
        if len(_FROM_LABELS) >= _FROM_LABELS_MAX:
            _FROM_LABELS.clear()
        found = _FROM_LABELS[key] = tuple(_from_labels(name, labels, cluster, host, component))
    return list(found)


def _from_labels(name: str, labels: Mapping[str, str], cluster: str, host: str, component: str) -> list[Entry]:
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

# What this process last read or wrote per inventory row ((table, key) -> text columns), so a
# label set noting what is already there costs no store round trip. At most _KNOWN_MAX rows
# (a 4,000-node fleet has ~40,000: 8 GPUs, NICs and disks per node), ~300 bytes each; starts
# over past that. Cleared with the label-set caches (``normalize.forget_label_sets``).
_KNOWN_MAX = 200_000
_known: dict[tuple, dict[str, str]] = {}
_known_lock = threading.Lock()


def forget() -> None:
    with _known_lock:
        _known.clear()
    series_labels.forget()


def _wanted(entries) -> dict[str, dict[tuple, dict[str, str]]]:
    """table -> row key -> the fields ``entries`` set there (later entries win)."""
    out: dict[str, dict[tuple, dict[str, str]]] = {}
    for e in entries:
        key = (e.cluster, e.host) if e.table == "hosts" else (e.cluster, e.host, e.component)
        out.setdefault(e.table, {}).setdefault(key, {}).update(e.fields)
    return out


def write(entries: list[Entry] | tuple[Entry, ...], *, now_ms: int | None = None) -> dict[str, int]:
    """Merge ``entries`` into the newest inventory rows and write those that changed; rows per table.

    Rows this process knows to hold the fields already cost nothing; the rest is written together
    with what concurrent requests noted meanwhile (one read and one insert per table for all of
    them, ``group_commit.Batcher``), and this returns once that write returned."""
    if not entries:
        return {}
    kept = [e for e in entries if e.table == series_labels.TABLE]
    if kept:  # labels no other column keeps: their own table
        out = series_labels.write(kept, now_ms=now_ms)
        rest = [e for e in entries if e.table != series_labels.TABLE]
        return {**write(rest, now_ms=now_ms), **out} if rest else out
    wanted = _wanted(entries)
    with _known_lock:
        for table, rows in wanted.items():
            for key in [k for k, fields in rows.items() if _holds(_known.get((table, k)), fields)]:
                del rows[key]
    wanted = {t: rows for t, rows in wanted.items() if rows}
    if not wanted:
        return {}
    return _batcher.submit(group_commit.Entry("", (wanted, now_ms), weight=sum(len(r) for r in wanted.values())))


def _holds(known: dict[str, str] | None, fields: dict[str, str]) -> bool:
    return known is not None and all(known.get(c) == v for c, v in fields.items())


def _flush(batch) -> None:
    """One write for every request queued (``Batcher`` flush): each gets its own rows written."""
    merged: dict[str, dict[tuple, dict[str, str]]] = {}
    stamps = [now for _, now in (e.table for e in batch) if now is not None]
    for e in batch:
        for table, rows in e.table[0].items():
            for key, fields in rows.items():
                merged.setdefault(table, {}).setdefault(key, {}).update(fields)
    written = _write_rows(merged, max(stamps) if stamps else int(time.time() * 1000))
    for e in batch:
        counts = {t: sum(1 for k in rows if k in written.get(t, ())) for t, rows in e.table[0].items()}
        e.result = {t: n for t, n in counts.items() if n}


_batcher = group_commit.Batcher(_flush, max_weight=50_000)  # rows per write


def _write_rows(wanted: dict[str, dict[tuple, dict[str, str]]], now_ms: int) -> dict[str, set]:
    """Read the current rows of ``wanted``'s keys (one query per table), write those that change;
    the keys written per table."""
    written: dict[str, set] = {}
    for table in ("hosts", "components"):
        rows_wanted = wanted.get(table)
        if not rows_wanted:
            continue
        sch = schema.TABLES[table]
        text_cols = [f.name for f in sch if f.name not in _KEYS[table] and f.name != "updated"]
        current = _current(table, sorted({k[0] for k in rows_wanted}), sorted({k[1] for k in rows_wanted}), text_cols)
        rows, states = [], {}
        for key, fields in rows_wanted.items():
            old = current.get(key, {c: "" for c in text_cols})
            new = {**old, **fields}
            states[(table, key)] = new
            if new != old or key not in current:
                rows.append(dict(zip(_KEYS[table], key)) | new)
        if rows:
            cols = {name: [r[name] for r in rows] for name in _KEYS[table] + tuple(text_cols)}
            cols["updated"] = pa.array([now_ms] * len(rows), pa.int64()).cast(schema.TS)
            out = writer.conform(table, pa.table(cols))
            writer.write(table, out, tag="ingest:inventory")
            written[table] = {tuple(r[c] for c in _KEYS[table]) for r in rows}
        with _known_lock:
            if len(_known) + len(states) > _KNOWN_MAX:
                _known.clear()
            _known.update(states)
    return written


def _current(table: str, clusters: list[str], hosts: list[str], cols: list[str]) -> dict[tuple, dict[str, str]]:
    keys = _KEYS[table]
    rows = store.query_rows(
        f"SELECT {', '.join(keys + tuple(cols))} FROM {table} FINAL "
        "WHERE cluster IN {clusters:Array(String)} AND host IN {hosts:Array(String)}",
        {"clusters": clusters, "hosts": hosts}, tag="ingest:inventory:current")
    n = len(keys)
    return {tuple(r[:n]): dict(zip(cols, r[n:])) for r in rows}
