"""Root causes from verdicts as outcome classes: "cause: PSU" is the interruptions whose case's
current verdict is a confirmed one naming that root cause.

Slurm states and XIDs mix causes — a NODE_FAIL is a power supply, a fan, a kernel panic; an XID 48
is an SRAM or an HBM fault — and a precursor of one cause is diluted among the others' failures.
Once engineers have confirmed causes on cases, a scan or fleet test before one cause compares only
those interruptions with their controls (the controls are drawn as for any outcome: healthy
windows, whatever the verdicts). The engine (telemetry.queries.windows) knows no verdicts: it
takes the labelled interruptions' (cluster, job id, t0) from ``resolve``. A cause is matched on
its text, case and spacing aside ("psu" and "PSU " are one cause), as the verdicts wrote it."""
from __future__ import annotations

import dataclasses

from investigations.models import Case, Verdict
from telemetry.queries import windows


def _key(text: str) -> str:
    return " ".join((text or "").split()).lower()


def _confirming() -> dict[int, Verdict]:
    """{case id: its current verdict} where that verdict is confirmed and names a root cause."""
    return {cid: v for cid, v in Verdict.objects.all().current().items()
            if v.kind == Verdict.Kind.CONFIRMED and v.root_cause.strip()}


def _confirmed() -> dict[str, list[Case]]:
    """Cases per cause key, by their current verdict (confirmed, with a root cause)."""
    current = _confirming()
    cases = Case.objects.in_bulk(list(current))
    out: dict[str, list[Case]] = {}
    for cid, v in current.items():
        if cid in cases:
            out.setdefault(_key(v.root_cause), []).append(cases[cid])
    return out


def causes_present() -> list[dict]:
    """The causes confirmed on cases, most cases first: ``[{"outcome": "cause: PSU", "interruptions": n}]``
    (the spelling of the newest case's verdict)."""
    label: dict[str, tuple] = {}
    count: dict[str, int] = {}
    for v in _confirming().values():
        k = _key(v.root_cause)
        count[k] = count.get(k, 0) + 1
        if k not in label or v.created_at > label[k][0]:
            label[k] = (v.created_at, " ".join(v.root_cause.split()))
    return sorted(({"outcome": f"cause: {label[k][1]}", "interruptions": n} for k, n in count.items()),
                  key=lambda c: (-c["interruptions"], c["outcome"].lower()))


def resolve(outcome: windows.Outcome) -> windows.Outcome:
    """The outcome with its labelled interruptions filled in where it is a cause; ValueError where no
    case has a confirmed verdict naming it (with the causes that have)."""
    if not outcome.cause:
        return outcome
    cases = _confirmed().get(_key(outcome.cause), [])
    if not cases:
        known = ", ".join(f"{c['outcome'][len('cause: '):]} ({c['interruptions']})" for c in causes_present()[:12])
        raise ValueError(f"outcome {outcome.label!r}: no case has a confirmed verdict with that root cause"
                         + (f"; causes confirmed so far: {known}" if known else "; no verdict names a root cause yet"))
    return dataclasses.replace(outcome, jobs=frozenset((c.cluster, c.job_id, int(c.t0.timestamp())) for c in cases))
