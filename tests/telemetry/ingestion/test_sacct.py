"""sacct -P parser: real captures, step folding, states, times, hostlists, Arrow tables."""
from datetime import datetime, timezone
from pathlib import Path

import pytest

from telemetry import schema
from telemetry.ingestion.errors import IngestError
from telemetry.ingestion.sacct import expand_hostlist, parse_sacct, to_tables

FIXTURES = Path(__file__).parent / "fixtures"
REFERENCE = Path(__file__).resolve().parents[3] / ".." / "shared" / "reference" / "formats"


def ms(*args) -> int:
    return int(datetime(*args, tzinfo=timezone.utc).timestamp() * 1000)


def reference_blocks() -> list[str]:
    path = REFERENCE / "sacct-sample.txt"
    if not path.exists():
        pytest.skip("../shared/reference not present (format samples live outside the repo)")
    blocks, cur = [], []
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            if cur:
                blocks.append("\n".join(cur) + "\n")
                cur = []
            continue
        cur.append(line)
    if cur:
        blocks.append("\n".join(cur) + "\n")
    return blocks


def test_every_real_capture_parses_with_steps_folded_into_jobs():
    blocks = reference_blocks()
    assert len(blocks) == 3
    cu = parse_sacct(blocks[0])
    assert [r.job_id for r in cu] == ["239023", "239024", "239025", "239026"]
    assert all(r.state == "COMPLETED" and len(r.steps) == 3 and r.nodes == ("galvani-cn001",) for r in cu)
    assert "step 239023.0 CANCELLED exit 0:10" in cu[0].reason
    running = parse_sacct(blocks[1])
    assert len(running) == 1 and running[0].state == "RUNNING" and len(running[0].steps) == 22
    terminal = {r.job_id: r for r in parse_sacct(blocks[2])}
    assert {k: v.state for k, v in terminal.items()} == {
        "2699101": "TIMEOUT", "2699102": "OUT_OF_MEMORY", "2699103": "NODE_FAIL", "2699104": "FAILED",
        "2699001": "CANCELLED",
    }
    assert terminal["2699001"].state_detail == "by 54321"


def test_the_fixture_gives_times_nodes_and_gpus():
    rows = {r.job_id: r for r in parse_sacct((FIXTURES / "sacct_gpu_jobs.txt").read_text())}
    assert list(rows) == ["88001", "88002", "88003", "88004"]
    nf = rows["88001"]
    assert (nf.state, nf.user, nf.partition, nf.n_nodes, nf.n_gpus) == ("NODE_FAIL", "alice", "train", 2, 16)
    assert nf.nodes == ("gpu-b203", "gpu-b204")
    assert (nf.start_ms, nf.end_ms) == (ms(2024, 3, 14, 1, 5), ms(2024, 3, 14, 2, 11, 30))
    assert [s.step_id for s in nf.steps] == ["batch", "0"]
    assert rows["88002"].n_gpus == 8 and rows["88002"].state_detail == "by 1042"
    pending = rows["88003"]
    assert pending.start_ms is None and pending.end_ms is None and pending.nodes == () and pending.n_gpus == 0
    assert rows["88004"].nodes == ("gpu-a001", "gpu-a002", "gpu-d010") and rows["88004"].end_ms is None


def test_to_tables_matches_the_jobs_and_job_hosts_schemas():
    rows = parse_sacct((FIXTURES / "sacct_gpu_jobs.txt").read_text())
    jobs, hosts = to_tables(rows, "c1", 1_710_000_000_000)
    assert jobs.schema == schema.JOBS and hosts.schema == schema.JOB_HOSTS
    assert jobs.num_rows == 4 and hosts.num_rows == 2 + 1 + 3
    assert jobs.column("version").to_pylist() == [1_710_000_000_000] * 4
    assert jobs.column("reason").to_pylist()[1] == "by 1042"
    assert set(hosts.column("host").to_pylist()) == {"gpu-b203", "gpu-b204", "gpu-c007", "gpu-a001", "gpu-a002", "gpu-d010"}


def test_parsable_with_trailing_pipe_and_state_codes_are_accepted():
    rows = parse_sacct("JobID|State|NodeList|\n5|NF|n[1-2]|\n5.batch|CD|n1|\n6_3|TO|n3|\n")
    assert [(r.job_id, r.state, r.nodes) for r in rows] == [("5", "NODE_FAIL", ("n1", "n2")), ("6_3", "TIMEOUT", ("n3",))]


def test_steps_without_their_allocation_row_still_make_a_job():
    [r] = parse_sacct("JobID|State|NodeList\n7.0|FAILED|n[1-2]\n")
    assert r.job_id == "7" and r.state == "FAILED" and r.nodes == ("n1", "n2")


@pytest.mark.parametrize(
    "text, line, field, reason",
    [
        ("JobName|State\nx|FAILED\n", 1, "JobID", "header"),
        ("JobID|State\n1|FAILED|extra\n", 2, None, "expected 2"),
        ("JobID|State\n1|EXPLODED\n", 2, "State", "unknown job state"),
        ("JobID|Start\n1|yesterday\n", 2, "Start", "not a time"),
        ("JobID|NNodes\n1|two\n", 2, "NNodes", "not a whole number"),
        ("JobID|NodeList\n1|n[1-]\n", 2, "NodeList", "bad range"),
        ("JobID|State\n|FAILED\n", 2, "JobID", "empty JobID"),
    ],
)
def test_each_malformed_sacct_line_is_rejected_with_line_and_reason(text, line, field, reason):
    with pytest.raises(IngestError) as exc:
        parse_sacct(text)
    assert (exc.value.line, exc.value.field) == (line, field) and reason in exc.value.reason


@pytest.mark.parametrize(
    "expr, hosts",
    [
        ("gpu[001-004,017],cpu7", ["gpu001", "gpu002", "gpu003", "gpu004", "gpu017", "cpu7"]),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("node7", ["node7"]),
        ("a[8-11]", ["a8", "a9", "a10", "a11"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("x[1,3],y[2]", ["x1", "x3", "y2"]),
        ("", []),
    ],
)
def test_hostlists_expand(expr, hosts):
    assert expand_hostlist(expr) == hosts


@pytest.mark.parametrize("expr", ["n[1-", "n1]", "n[3-1]", "n[a-b]", "n[[1]]"])
def test_bad_hostlists_are_rejected(expr):
    with pytest.raises(IngestError):
        expand_hostlist(expr)
