"""What series labels mean, the one home for every ingest path (text scrapes, remote-write,
CSV / JSON Lines / Parquet backfills).

- **host**: ``Hostname`` (dcgm-exporter before 2026-05), ``hostname`` (after), ``host`` (a
  sender that names the machine), then ``instance`` without ``:port`` (the scrape target),
  else the request's default host.
- **component** (``component_of``): a ``component`` label as is, else the usual device labels
  (``gpu``, ``nvswitch``, ``UUID``, ``chip``/``sensor``, PCI ``bus``/``device``/``function``,
  ``device``/``port``, EDAC ``controller``, ``cpu``, ``interface``, ``hca``, ``disk``, ``nic``,
  ``psu``, ``fan``, ``nvme``), else '' (host level).
- **read**: those labels, ``cluster``, ``__name__`` and the identity labels the inventory keeps
  (``telemetry.ingestion.inventory``: UUID, PCI bus id, model, serial, driver, firmware).
- **not in the series key** (``not_stored``): every other label with a value. Series that differ
  only in such labels share one row key; their values are kept in the ``series_labels`` table
  (``telemetry.ingestion.series_labels``, one row per distinct label set per series), and every
  path reports them (label -> series that carried it) in the ingest summary's
  ``labels_not_stored``, whether or not they merged series.
"""
from __future__ import annotations

from typing import Mapping

from telemetry.ingestion import inventory

HOST_LABELS = ("Hostname", "hostname", "host", "instance")

# Further device labels of common exporters: label -> prefix for a bare number.
_DEVICE_LABELS = (("interface", ""), ("nic", "nic"), ("hca", ""), ("disk", ""), ("psu", "psu"), ("fan", "fan"),
                  ("nvme", "nvme"))

DEVICE_LABELS = frozenset({
    "component", "gpu", "GPU_I_ID", "nvlink", "nvswitch", "UUID", "uuid", "gpu_uuid", "chip", "sensor",
    "segment", "bus", "device", "function", "port", "controller", "csrow", "channel", "cpu", "cpucore",
    *(label for label, _ in _DEVICE_LABELS),
})

READ = frozenset({"__name__", "cluster", *HOST_LABELS, *DEVICE_LABELS, *inventory.LABELS_READ})


def strip_port(instance: str | None) -> str | None:
    if not instance:
        return None
    if instance.startswith("["):  # [ipv6]:port
        end = instance.find("]")
        return instance[1:end] if end > 0 else instance
    if instance.count(":") == 1:
        return instance.rsplit(":", 1)[0]
    return instance  # bare IPv6 or host


def host_of(labels: Mapping[str, str], default_host: str | None = None) -> str | None:
    """The host a series' labels name (``None`` when neither they nor ``default_host`` do)."""
    get = labels.get
    return get("Hostname") or get("hostname") or get("host") or strip_port(get("instance")) or default_host


def component_of(labels: Mapping[str, str]) -> str:
    """Component string for one series' labels ('' = host level)."""
    get = labels.get
    named = get("component")  # a sender that names its components says exactly which
    if named:
        return named
    gpu = get("gpu")
    if gpu:
        comp = f"gpu{gpu}"
        if get("GPU_I_ID"):
            comp += f"/mig{get('GPU_I_ID')}"
        if get("nvlink"):
            comp += f"/nvlink{get('nvlink')}"
        return comp
    switch = get("nvswitch")
    if switch:
        return f"nvswitch{switch}" + (f"/nvlink{get('nvlink')}" if get("nvlink") else "")
    uuid = get("UUID") or get("uuid") or get("gpu_uuid")
    if uuid:
        return uuid
    chip, sensor = get("chip"), get("sensor")
    if chip or sensor:
        return "/".join(x for x in (chip, sensor) if x)
    if get("bus") and get("function") and get("device"):
        return f"{get('segment') or '0000'}:{get('bus')}:{get('device')}.{get('function')}".lower()
    device = get("device")
    if device:
        port = get("port")
        return f"{device}/{port}" if port else device
    controller = get("controller")
    if controller:
        comp = f"mc{controller}"
        if get("csrow"):
            comp += f"/csrow{get('csrow')}"
        if get("channel"):
            comp += f"/ch{get('channel')}"
        return comp
    cpu = get("cpu")
    if cpu:
        return f"cpu{cpu}" + (f"/core{get('cpucore')}" if get("cpucore") else "")
    for label, prefix in _DEVICE_LABELS:
        value = get(label)
        if value:
            return f"{prefix}{value}" if value.isdigit() else value
    return ""


def not_stored(name: str, labels: Mapping[str, str]) -> tuple[str, ...]:
    """The labels (with a value) of series ``name`` that no column or inventory row keeps, sorted."""
    extra = inventory.info_labels(name)
    return tuple(sorted(k for k, v in labels.items() if v and k not in READ and k not in extra))


def tally(label_sets, counts) -> dict[str, int]:
    """label -> series, from (labels not stored, number of series with exactly those) pairs."""
    out: dict[str, int] = {}
    for names, n in zip(label_sets, counts):
        for label in names:
            out[label] = out.get(label, 0) + int(n)
    return dict(sorted(out.items()))


def merge_counts(*parts: Mapping[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in parts:
        for k, n in part.items():
            out[k] = out.get(k, 0) + n
    return dict(sorted(out.items()))
