"""Kernel log Xid parser: every real line, each timestamp format, bad lines."""
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from telemetry.ingestion.errors import IngestError
from telemetry.ingestion.kernel_log import normalize_pci_bus_id, parse_kernel_log

FIXTURES = Path(__file__).parent / "fixtures"
REFERENCE = Path(__file__).resolve().parents[3] / ".." / "shared" / "reference" / "formats"


def ms(*args) -> int:
    return int(datetime(*args, tzinfo=timezone.utc).timestamp() * 1000)


def test_every_real_xid_line_gives_an_xid_with_the_right_code():
    path = REFERENCE / "kernel-xid-lines.txt"
    if not path.exists():
        pytest.skip("../shared/reference not present (format samples live outside the repo)")
    text = path.read_text()
    expected = [
        (n, int(m.group(1)))
        for n, line in enumerate(text.split("\n"), 1)
        if (m := re.search(r"NVRM: Xid \([^)]*\): (\d+)", line))
    ]
    result = parse_kernel_log(text, host="fallback", now_ts_ms=ms(2025, 6, 1))
    assert [(x.line, x.xid) for x in result.xids] == expected
    assert len(expected) == 30
    assert {x.xid for x in result.xids} >= {13, 31, 43, 45, 48, 62, 63, 64, 79, 109, 119, 144, 145, 149}
    assert all(re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", x.pci_bus_id) for x in result.xids)
    first = result.xids[0]
    assert first.ts_ms == ms(2025, 1, 21, 4, 41, 44, 283000) and first.host == "fallback"
    syslog = [x for x in result.xids if x.xid == 48]
    assert syslog[0].host == "worker4" and syslog[0].ts_ms == ms(2024, 12, 2, 11, 38, 47)


def test_the_fixture_covers_syslog_iso_ctime_and_monotonic_prefixes():
    text = (FIXTURES / "kernel_mixed.log").read_text()
    r = parse_kernel_log(text, host="given", year=2024, boot_ts_ms=ms(2024, 3, 13, 23, 44, 17))
    assert [x.xid for x in r.xids] == [94, 63, 95, 79]
    # the pulled cable (line 6) is a link-down event now, not a skipped line
    assert r.skipped == 1
    assert [(x.kind, x.pci_bus_id, x.line) for x in r.links] == [("link_down", "0000:c1:00.0", 6)]
    syslog, iso, ctime, mono = r.xids
    assert (syslog.ts_ms, syslog.host, syslog.pid, syslog.process) == (ms(2024, 3, 14, 2, 11, 9), "gpu-b203", 51100, "python3")
    assert syslog.message == "Contained ECC error."
    assert (iso.ts_ms, iso.host, iso.pid, iso.process, iso.pci_bus_id) == (
        ms(2024, 3, 14, 2, 11, 10, 250000), "gpu-b203", None, None, "0000:9a:00.0")
    assert (ctime.ts_ms, ctime.host) == (ms(2024, 3, 14, 2, 11, 11), "given")
    assert mono.ts_ms == ms(2024, 3, 13, 23, 44, 17) + 8814100
    assert mono.message == "GPU has fallen off the bus." and mono.line == 5


def test_monotonic_timestamps_stay_unknown_without_a_boot_time():
    [x] = parse_kernel_log("[ 12.5] NVRM: Xid (PCI:0000:07:00): 79, GPU has fallen off the bus").xids
    assert x.ts_ms is None and x.host is None


def test_journal_short_precise_and_printk_level_prefixes():
    r = parse_kernel_log(
        "Dec 02 11:38:47.123456 worker4 kernel: NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, DBE\n"
        "<4>[  12.5] NVRM: Xid (PCI:0000:07:00): 64, x\n",
        year=2024,
    )
    assert r.xids[0].ts_ms == ms(2024, 12, 2, 11, 38, 47) + 123 and r.xids[0].host == "worker4"
    assert [x.xid for x in r.xids] == [48, 64]


def test_a_december_syslog_line_read_in_january_lands_in_the_previous_year():
    [x] = parse_kernel_log(
        "Dec 31 23:59:00 h kernel: NVRM: Xid (PCI:0000:07:00): 79, gone", now_ts_ms=ms(2025, 1, 1, 0, 5)
    ).xids
    assert x.ts_ms == ms(2024, 12, 31, 23, 59)


@pytest.mark.parametrize("raw, norm", [("0000:38:00", "0000:38:00.0"), ("00000000:9B:00.1", "0000:9b:00.1")])
def test_pci_bus_ids_are_normalised(raw, norm):
    assert normalize_pci_bus_id(raw) == norm


@pytest.mark.parametrize(
    "line, reason",
    [
        ("[1.0] NVRM: Xid (PCI:0000:07:00) 79, no colon", "not in the form"),
        ("[1.0] NVRM: Xid (PCI:zz:07:00): 79, bad pci", "not in the form"),
        ("[1.0] NVRM: Xid (PCI:0000:07:00): seventy-nine", "not in the form"),
        ("some random prefix NVRM: Xid (PCI:0000:07:00): 79, x", "unrecognised text before"),
    ],
)
def test_an_unparseable_xid_line_is_rejected_naming_the_line(line, reason):
    with pytest.raises(IngestError) as exc:
        parse_kernel_log("ok line\n" + line + "\n")
    assert exc.value.line == 2 and reason in exc.value.reason


def test_a_syslog_date_that_does_not_exist_is_rejected():
    with pytest.raises(IngestError) as exc:
        parse_kernel_log("Feb 30 10:00:00 h kernel: NVRM: Xid (PCI:0000:07:00): 79, x", year=2024)
    assert exc.value.field == "timestamp" and exc.value.line == 1


MLX5_LINES = """\
2026-03-14T02:10:00.000000+00:00 gpu-n1 kernel: mlx5_core 0000:1A:00.0 ibp26s0: Link down
[32704.121294] mlx5_core 0000:01:00.0: Port module event: module 0, Cable unplugged
Mar 14 02:12:00 gpu-n1 kernel: mlx5_core 0000:01:00.1: mlx5_port_module_event:1151:(pid 0): Port module event[error]: module 1, Cable error, High Temperature
2026-03-14T02:13:00+00:00 gpu-n1 kernel: mlx5_core 0000:1a:00.0 ibp26s0: Link up
2026-03-14T02:14:00+00:00 gpu-n1 kernel: mlx5_core 0000:1a:00.0: E-Switch: cleanup
"""


def test_mlx5_link_down_and_pulled_cable_lines_become_link_events():
    res = parse_kernel_log(MLX5_LINES, host="gpu-n9", year=2026, boot_ts_ms=0)
    assert [(x.host, x.pci_bus_id, x.device, x.kind) for x in res.links] == [
        ("gpu-n1", "0000:1a:00.0", "ibp26s0", "link_down"),
        ("gpu-n9", "0000:01:00.0", "", "link_down"),
        ("gpu-n1", "0000:01:00.1", "", "port_module"),
        ("gpu-n1", "0000:1a:00.0", "ibp26s0", "link_up"),
    ]
    assert res.links[0].ts_ms == int(datetime(2026, 3, 14, 2, 10, tzinfo=timezone.utc).timestamp() * 1000)
    assert res.links[0].message == "Link down" and "Cable error" in res.links[2].message
    assert res.skipped == 1 and res.xids == []  # another mlx5_core message is not a link event
