"""Where the outcome names the failing part, its value is read on one host, so its controls are
one host each: the failing host at its other healthy, busy times and single healthy peers. Found on
the 256-host bench fleet: big jobs are interrupted often, and a same-host control was vetoed when
*any* host of the job was interrupted near it, while a peer control needed as many healthy hosts as
the job had — 115 of 144 windows before a link-down had no control at all, so nothing could be shown.
Where the outcome names no part (read on every host of the job) the whole-job rule stays."""
from __future__ import annotations

import numpy as np

from telemetry.queries import windows

W = 3600
LO = 1_700_000_000 - 1_700_000_000 % 86400
HI = LO + 10 * 86400
T0 = LO + 5 * 86400 + 7200
JOB = ("a0", "a1", "a2", "a3")
PEERS = tuple(f"p{i}" for i in range(6))
FAILING = ("a1", "gpu3")  # the XID's GPU
A1_EARLIER = T0 - 10 * 3600 + 1800  # the failing host's own earlier interruption


def _fleet():
    it = windows.Interruption("c", "j1", "train", "FAILED", T0, JOB)
    t0s = {h: [] for h in JOB + PEERS}
    # the job's other hosts are interrupted every hour of the history (short jobs dying one after
    # another): every window of theirs is touched
    for h in ("a0", "a2", "a3"):
        t0s[h] = list(range(LO + 1800, HI, 3600))
    t0s["a1"] = [A1_EARLIER, T0]
    for h in JOB:
        if T0 not in t0s[h]:
            t0s[h].append(T0)
    host_t0s = {h: np.asarray(sorted(v), dtype=np.int64) for h, v in t0s.items()}
    busy = windows.Allocations({h: (np.asarray([LO - 86400]), np.asarray([HI + 86400])) for h in JOB + PEERS})
    return it, host_t0s, busy


def test_a_named_part_gets_k_single_host_controls_though_its_jobs_other_hosts_are_often_interrupted():
    it, host_t0s, busy = _fleet()
    excluded = windows.Exclusions()
    found = windows.matched_windows("c", [it], host_t0s, W, LO, HI, list(JOB + PEERS), busy,
                                    excluded=excluded, failing=[FAILING], failed={})
    before = [w for w in found if w.kind == "before"]
    controls = [w for w in found if w.kind != "before"]
    # the window before the outcome still spans the job (the failing GPU's siblings are read there)
    assert [w.hosts for w in before] == [JOB]
    assert len(controls) == windows.CONTROLS_PER_POSITIVE
    assert all(len(w.hosts) == 1 for w in controls)
    same = [w for w in controls if w.kind == "same_hosts"]
    peers = [w for w in controls if w.kind == "peers"]
    assert same and all(w.hosts == ("a1",) for w in same)
    assert peers and all(w.hosts[0] in PEERS and (w.start, w.end) == (T0 - W, T0) for w in peers)
    # the failing host's own interruption still vetoes the windows it touches (from start to W after end)
    assert not any(w.start <= A1_EARLIER < w.end + W for w in same)
    assert excluded.interrupted >= 2  # the two windows touched by a1's earlier interruption
    # reproducible: the same draw again
    again = windows.matched_windows("c", [it], host_t0s, W, LO, HI, list(JOB + PEERS), busy,
                                    failing=[FAILING], failed={})
    assert [(w.kind, w.hosts, w.start) for w in again] == [(w.kind, w.hosts, w.start) for w in found]


def test_an_idle_failing_host_gives_no_same_host_control_at_that_time():
    it, host_t0s, _ = _fleet()
    # a1 ran jobs only from two days before t0; every other host all the time
    alloc = {h: (np.asarray([LO - 86400]), np.asarray([HI + 86400])) for h in JOB + PEERS}
    alloc["a1"] = (np.asarray([T0 - 2 * 86400]), np.asarray([HI + 86400]))
    found = windows.matched_windows("c", [it], host_t0s, W, LO, HI, list(JOB + PEERS), windows.Allocations(alloc),
                                    k=10_000, failing=[FAILING], failed={})
    same = [w for w in found if w.kind == "same_hosts"]
    assert same and min(w.end for w in same) > T0 - 2 * 86400


def test_an_outcome_naming_no_part_keeps_whole_job_controls():
    """NODE_FAIL names no part: the window is read on every host of the job, so a control is the
    job's hosts at another time (vetoed by any of theirs being interrupted) or as many healthy peers."""
    it, host_t0s, busy = _fleet()
    excluded = windows.Exclusions()
    found = windows.matched_windows("c", [it], host_t0s, W, LO, HI, list(JOB + PEERS), busy,
                                    excluded=excluded, failing=[None], failed={})
    controls = [w for w in found if w.kind != "before"]
    # every same-host window is touched by an interruption of a0, a2 or a3; six peers make one group of four
    assert [w.kind for w in controls] == ["peers"]
    assert len(controls[0].hosts) == len(JOB) and set(controls[0].hosts) <= set(PEERS)
    assert excluded.interrupted > 200
