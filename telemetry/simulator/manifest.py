"""Ground-truth manifest of a simulated fleet: what was injected, where and when.

JSON format (``format: "precursor-simulator-manifest/1"``); times are ISO 8601
UTC with milliseconds, onsets are the timestamp of the first sample showing the
signal::

    {
      "format": "precursor-simulator-manifest/1",
      "config": {"cluster", "hosts", "days", "interval_s", "seed", "start", "failure_scale"},
      "counts": {"samples", "events", "jobs", "interruptions", "false_alarms", "red_herrings"},
      "cause_weights": {"faulty_gpu": 148, ...},          # the Llama 3 mix used
      "failures": [{
          "id": "F0001", "cause": "hbm3", "host": "gpu0007", "component": "gpu3",
          "t0": "...", "job_id": "...", "job_state": "FAILED", "reason": "...",
          "xids": [48, 94], "down_until": "..." | null, "has_precursor": true,
          "lead_h": 5.2 | null,
          "signals": [{"metric": "gpu.ecc.dram_sbe_volatile" | "event:xid" | "event:link_down",
                       "host", "component", "shape", "onset": "...", "end": "...", "code": 63?}]
      }],
      "false_alarms": [{"id": "A0001", "like_cause": "network", "host", "component",
                        "onset", "end", "signals": [...same as above...]}],
      "red_herrings": [
          {"kind": "heavy_phase_before_failure", "failure_id", "job_id", "hosts": [...], "start", "end", "t0"},
          {"kind": "checkpoint_before_failure", "failure_id", "job_id", "hosts": [...], "start", "end", "t0"},
          {"kind": "firmware_over_representation", "firmware", "host_share", "failure_share",
           "explanation"}
      ]
    }
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

FORMAT = "precursor-simulator-manifest/1"


def iso(epoch_s: float | None) -> str | None:
    if epoch_s is None:
        return None
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass
class Manifest:
    config: dict
    counts: dict = field(default_factory=dict)
    cause_weights: dict = field(default_factory=dict)
    failures: list[dict] = field(default_factory=list)
    false_alarms: list[dict] = field(default_factory=list)
    red_herrings: list[dict] = field(default_factory=list)
    scenario: str = "demo"
    extra: dict = field(default_factory=dict)  # the realistic scenario's further keys (see above)

    def to_dict(self) -> dict:
        out = {"format": FORMAT, "scenario": self.scenario, "config": self.config, "counts": self.counts,
               "cause_weights": self.cause_weights, "failures": self.failures, "false_alarms": self.false_alarms}
        if self.scenario == "demo":
            out["red_herrings"] = self.red_herrings
        return out | self.extra

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False)

    def write(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json())
        return path

    @property
    def signals(self) -> list[dict]:
        """Every precursor signal, from failures and false alarms alike."""
        return [s for item in self.failures + self.false_alarms for s in item["signals"]]
