"""Parser for NVIDIA ``NVRM: Xid`` lines in kernel logs (dmesg, syslog, journal).

``parse_kernel_log(text, host=..., year=..., now_ts_ms=..., boot_ts_ms=...)``
returns the Xid lines found (``XidLine``), the mlx5 link lines (``LinkLine``:
``mlx5_core 0000:01:00.0 enp1s0f0: Link down|up`` and ``Port module event:
module 0, Cable unplugged`` — a pulled cable is a link down) and how many other
lines were skipped.

The line prefix decides the timestamp and host:

- ``dmesg --time-format iso`` (``kern  :warn  : 2025-01-21T04:41:44,283302+00:00``)
  and journal/rsyslog ISO-8601 (``2024-12-02T11:38:47.123456+00:00 host kernel:``)
- ``dmesg -T`` / ``--ctime`` (``[Sun Feb 23 16:24:18 2025]``)
- syslog / ``journalctl -o short(-precise)`` (``Dec  2 11:38:47[.123456] host kernel:``);
  these carry no year: ``year`` if given, else the year that puts the line not
  after ``now_ts_ms`` (default: the clock), so a December log read in January
  lands in the previous year
- plain ``dmesg`` (``[14328.198504]``, seconds since boot): ``ts_ms`` is None
  unless ``boot_ts_ms`` (the boot wall-clock time) is given
- ``kernel:`` alone or no prefix: ``ts_ms`` is None.

Times without a zone (ctime, syslog) are taken as UTC: these fleets run their
nodes in UTC, and a parser cannot know a node's local zone anyway. The host
comes from the syslog/journal prefix when there is one, else from ``host``.
A line containing ``NVRM: Xid`` that does not parse raises ``IngestError``
naming the line.
"""
from __future__ import annotations

import calendar
import re
import time
from datetime import datetime, timezone
from typing import NamedTuple

from telemetry.ingestion.errors import IngestError


class XidLine(NamedTuple):
    ts_ms: int | None
    host: str | None
    pci_bus_id: str  # normalised 0000:bb:dd.f, lowercase
    xid: int
    pid: int | None
    process: str | None
    message: str
    line: int  # 1-based line number in the input


class LinkLine(NamedTuple):
    """An mlx5 port going down or up: ``mlx5_core <pci> <netdev>: Link down`` (the carrier), or a
    port module event (``Port module event: module 0, Cable unplugged``)."""
    ts_ms: int | None
    host: str | None
    pci_bus_id: str  # normalised 0000:bb:dd.f, lowercase
    device: str  # the netdev (enp1s0f0, ibp12s0) when the line names one, else ''
    kind: str  # link_down | link_up | port_module
    message: str  # the text after the device
    line: int


class KernelLogResult(NamedTuple):
    xids: list[XidLine]
    skipped: int
    links: tuple[LinkLine, ...] = ()


_MARK = "NVRM: Xid"
_BODY = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)\):"
    r"\s*(?P<xid>\d+)"
    r"(?:,\s*pid=(?:'<unknown>'|<unknown>|(?P<pid>\d+)))?"
    r"(?:,\s*name=(?P<name>[^,]*))?"
    r"(?:,\s*(?P<msg>.*?))?\s*$"
)
_LINK_MARK = "mlx5_core "
_LINK_BODY = re.compile(
    r"mlx5_core (?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)(?: (?P<dev>[^\s:]+))?: "
    r"(?:Link (?P<state>up|down)|(?:\w+:\d+:\(pid \d+\): )?Port module event(?P<err>\[error\])?: "
    r"module (?P<module>\d+), (?P<status>.+?))\s*$")
_MONTHS = {m: i for i, m in enumerate(calendar.month_abbr) if m}
_KMONO = r"(?:\[\s*(?P<mono>\d+\.\d+)\]\s*)?"
_PREFIXES = [
    # dmesg --decode --time-format iso, optionally without the facility/level columns
    ("iso", re.compile(
        r"(?:\w+\s*:\s*\w+\s*:\s*)?(?P<iso>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)"
        r"(?:\s+(?P<host>\S+)\s+kernel:)?\s*" + _KMONO)),
    ("ctime", re.compile(r"\[(?P<ctime>\w{3} +\w{3} +\d{1,2} +\d{2}:\d{2}:\d{2} +\d{4})\]\s*")),
    ("syslog", re.compile(
        r"(?P<mon>[A-Z][a-z]{2}) +(?P<day>\d{1,2}) (?P<hms>\d{2}:\d{2}:\d{2})(?P<frac>\.\d+)? +(?P<host>\S+) +kernel:\s*"
        + _KMONO)),
    ("mono", re.compile(r"\[\s*(?P<mono>\d+\.\d+)\]\s*")),
    ("bare", re.compile(r"(?:kernel:)?\s*")),
]
_LEVEL = re.compile(r"^<\d>")  # printk level as in /dev/kmsg or `dmesg -r`


def parse_kernel_log(
    text: str,
    *,
    host: str | None = None,
    year: int | None = None,
    now_ts_ms: int | None = None,
    boot_ts_ms: int | None = None,
) -> KernelLogResult:
    xids: list[XidLine] = []
    links: list[LinkLine] = []
    skipped = 0
    for lineno, line in enumerate(text.split("\n"), 1):
        idx = line.find(_MARK)
        if idx < 0:
            link = _parse_link_line(line, lineno, host, year, now_ts_ms, boot_ts_ms)
            if link is not None:
                links.append(link)
            elif line.strip():
                skipped += 1
            continue
        xids.append(_parse_xid_line(line, idx, lineno, host, year, now_ts_ms, boot_ts_ms))
    return KernelLogResult(xids, skipped, tuple(links))


def _parse_link_line(line, lineno, host, year, now_ts_ms, boot_ts_ms) -> LinkLine | None:
    """An mlx5 link/port-module line, or None for any other line (those are skipped, not refused)."""
    idx = line.find(_LINK_MARK)
    if idx < 0:
        return None
    body = _LINK_BODY.match(line, idx)
    if body is None:
        return None  # another mlx5_core message: not a link event
    ts_ms, line_host = _parse_prefix(_LEVEL.sub("", line[:idx].strip()), lineno, year, now_ts_ms, boot_ts_ms)
    if body.group("state"):
        kind = f"link_{body.group('state')}"
    else:
        # A pulled cable takes the link down; other module events (plugged, errors) are kept as such.
        kind = "link_down" if body.group("status").strip().lower() == "cable unplugged" else "port_module"
    return LinkLine(ts_ms=ts_ms, host=line_host or host, pci_bus_id=normalize_pci_bus_id(body.group("pci")),
                    device=body.group("dev") or "", kind=kind,
                    message=line[body.end("dev") + 2 if body.group("dev") else body.end("pci") + 2:].strip(),
                    line=lineno)


def _parse_xid_line(line, idx, lineno, host, year, now_ts_ms, boot_ts_ms) -> XidLine:
    body = _BODY.match(line, idx)
    if body is None:
        raise IngestError(
            f"NVRM: Xid line not in the form 'NVRM: Xid (PCI:dddd:bb:dd): <code>, ...': {line[idx:idx + 80]!r}",
            line=lineno,
            field="xid",
        )
    prefix = _LEVEL.sub("", line[:idx].strip())
    ts_ms, line_host = _parse_prefix(prefix, lineno, year, now_ts_ms, boot_ts_ms)
    pid = body.group("pid")
    name = body.group("name")
    if name is not None:
        name = name.strip()
        if name in ("<unknown>", ""):
            name = None
    return XidLine(
        ts_ms=ts_ms,
        host=line_host or host,
        pci_bus_id=normalize_pci_bus_id(body.group("pci")),
        xid=int(body.group("xid")),
        pid=int(pid) if pid is not None else None,
        process=name,
        message=(body.group("msg") or "").strip(),
        line=lineno,
    )


def normalize_pci_bus_id(raw: str) -> str:
    """``0000:38:00`` / ``00000000:38:00.0`` -> ``0000:38:00.0`` (lowercase, 4-digit domain)."""
    domain, bus, rest = raw.lower().split(":")
    if "." not in rest:
        rest += ".0"
    return f"{domain[-4:].rjust(4, '0')}:{bus}:{rest}"


def _parse_prefix(prefix, lineno, year, now_ts_ms, boot_ts_ms) -> tuple[int | None, str | None]:
    for kind, rx in _PREFIXES:
        m = rx.fullmatch(prefix)
        if m is None:
            continue
        try:
            if kind == "iso":
                dt = datetime.fromisoformat(m.group("iso"))
                if dt.tzinfo is None:
                    dt = dt.replace(tzinfo=timezone.utc)
                return round(dt.timestamp() * 1000), m.group("host")
            if kind == "ctime":
                dt = datetime.strptime(" ".join(m.group("ctime").split()), "%a %b %d %H:%M:%S %Y")
                return _utc_ms(dt), None
            if kind == "syslog":
                return _syslog_ms(m, year, now_ts_ms), m.group("host")
        except ValueError as exc:
            raise IngestError(f"bad timestamp {prefix!r} ({exc})", line=lineno, field="timestamp") from None
        mono = m.groupdict().get("mono")
        if mono is not None and boot_ts_ms is not None:
            return boot_ts_ms + round(float(mono) * 1000), None
        return None, None
    raise IngestError(
        f"unrecognised text before 'NVRM: Xid' (not a dmesg, syslog or journal timestamp): {prefix[:60]!r}",
        line=lineno,
        field="timestamp",
    )


def _utc_ms(dt: datetime) -> int:
    return round(dt.replace(tzinfo=timezone.utc).timestamp() * 1000)


def _syslog_ms(m: re.Match, year: int | None, now_ts_ms: int | None) -> int:
    month = _MONTHS.get(m.group("mon"))
    if month is None:
        raise ValueError(f"unknown month {m.group('mon')!r}")
    hh, mm, ss = (int(x) for x in m.group("hms").split(":"))
    frac = m.group("frac")
    micro = int(frac[1:7].ljust(6, "0")) if frac else 0
    day = int(m.group("day"))
    if year is not None:
        return _utc_ms(datetime(year, month, day, hh, mm, ss, micro))
    now_ms = now_ts_ms if now_ts_ms is not None else int(time.time() * 1000)
    now_year = datetime.fromtimestamp(now_ms / 1000, tz=timezone.utc).year
    ts = _utc_ms(datetime(now_year, month, day, hh, mm, ss, micro))
    if ts > now_ms + 86_400_000:  # a day of slack for clock skew between hosts
        ts = _utc_ms(datetime(now_year - 1, month, day, hh, mm, ss, micro))
    return ts


def wall_clock_prefix(line: str) -> bool:
    """True when the line's time is a wall clock without a zone (``dmesg -T``, syslog, ISO
    without an offset): the times ``tz`` re-reads in a named zone. Epoch-anchored (boot +
    uptime) and zoned times are not."""
    idx = line.find(_MARK)
    if idx < 0:
        idx = line.find(_LINK_MARK)
    prefix = _LEVEL.sub("", line[: idx if idx >= 0 else len(line)].strip())
    for kind, rx in _PREFIXES:
        m = rx.fullmatch(prefix)
        if m is None:
            continue
        if kind == "iso":
            return not re.search(r"(?:Z|[+-]\d{2}:?\d{2})$", m.group("iso"))
        return kind in ("ctime", "syslog")
    return False
