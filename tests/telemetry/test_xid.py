"""Tests for telemetry.xid: every code in the reference catalog and real kernel lines is known."""

import re
from pathlib import Path

import pytest

from telemetry.xid import CATEGORIES, SEVERITIES, XIDS, describe

FORMATS = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "formats"


def formats_file(name: str) -> Path:
    path = FORMATS / name
    if not path.exists():
        pytest.skip(f"../shared/reference not present ({path})")
    return path


def test_simulator_codes_are_known_with_sensible_categories():
    for code in (13, 31, 43, 45, 48, 62, 63, 64, 74, 79, 92, 94, 95, 109, 119, 144, 145, 146, 147, 148, 149, 150):
        assert code in XIDS, code
        assert describe(code).code == code
    assert describe(48).category == "memory" and describe(48).severity == "critical"
    assert describe(79).category == "bus"
    assert describe(74).category == "nvlink"
    assert describe(43).severity in ("warning", "info")


def test_every_entry_is_well_formed():
    for code, x in XIDS.items():
        assert x.code == code
        assert x.mnemonic and x.meaning and x.action, code
        assert x.category in CATEGORIES, code
        assert x.severity in SEVERITIES, code


def test_unknown_code_gives_a_named_unknown_entry():
    x = describe(9999)
    assert x.code == 9999
    assert x.mnemonic == "UNKNOWN"
    assert "Unknown XID 9999" in x.meaning
    assert 9999 not in XIDS


def test_every_code_in_the_reference_catalog_is_known():
    text = formats_file("xid-catalog.md").read_text()
    table_codes = {int(c) for c in re.findall(r"^\| (\d+)(?: ★)? \| [A-Z]", text, flags=re.M)}
    unused_line = re.search(r"Unused.*?: ([\d, ]+)\.", text).group(1)
    unused = {int(c) for c in unused_line.split(",")}
    assert len(table_codes) > 90 and len(unused) > 50
    assert sorted(table_codes - set(XIDS)) == []
    assert sorted(unused - set(XIDS)) == []
    # 61 is unused in the Ampere+ catalog but named in the older table, so we keep its name
    assert all(XIDS[c].mnemonic == "UNUSED" for c in unused - {61})


def test_every_code_in_real_kernel_lines_is_known():
    text = formats_file("kernel-xid-lines.txt").read_text()
    codes = {int(c) for c in re.findall(r"NVRM: Xid \([^)]*\): (\d+),", text)}
    assert {13, 48, 79, 119} <= codes
    assert sorted(c for c in codes if describe(c).mnemonic in ("UNKNOWN", "UNUSED")) == []
