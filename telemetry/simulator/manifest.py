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

The ``realistic`` scenario (``"scenario": "realistic"``, see ``telemetry.simulator.realistic``)
writes the same ``format``, ``config`` (plus ``scenario``), ``counts`` (plus ``failures``,
``job_runs``, ``confounders``), ``cause_weights``, and instead of ``red_herrings``::

      "failures": [{
          "id", "cause", "host", "component", "t0",
          "job_id": "..." | null,                 # null: the host failed while idle (drained, no job lost)
          "job_run": 0 | 1 | ...,                 # run of that JobID (Slurm requeues keep the JobID)
          "job_state", "exit_code", "interrupted_job": bool,
          "lemon": bool, "correlated_event": "C001" | null, "down_until", "xids": [94],
          "has_precursor": bool,
          "precursor": null | {"metric", "onset", "lead_h", "shape": "ramp|plateau|intermittent",
                               "strength": 0..1},  # onset may precede the data (long leads)
          "signals": [{"metric" | "event:xid" | "event:link_down", "host", "component",
                       "shape": "ramp|plateau|intermittent|flag|flaps|event", "onset", "end",
                       "magnitude"?,             # events/day at the peak, offset, factor, flap count
                       "peak"?, "code"?}]
      }],
      "false_alarms": [{"id": "A0001", "like_cause", "host", "component", "onset", "end", "shape",
                        "strength", "metric", "signals": [...]}],
      "confounders": [
          {"kind": "heavy_phase_before_failure" | "checkpoint_before_failure", "failure_id", "job_id",
           "hosts", "start", "end", "t0", "causal": false},
          {"kind": "firmware_over_representation", "firmware", "host_share", "failure_share",
           "failures_counted", "causal": false, "explanation"},   # share of hosts' own hardware failures
          {"kind": "temperature_follows_load", "causal": false, "explanation"}],
      "lemons": [{"host", "hazard", "failures"}],
      "correlated_events": [{"id", "kind": "leaf_switch_reboot" | "rack_pdu_trip", "where", "cause",
                             "t0", "hosts"}],
      "true_precursor": {"hbm3": "gpu.ecc.dram_sbe_volatile", ...},   # first metric of each chain
      "requeued_runs": [{"job_id", "run", "start"}],
      "background": {"xids_on_healthy_gpus": {"13": n, ...}, "link_flaps": n},
      "rates": {"nominal_failures_per_host_day", "realised_failures_per_up_host_day",
                "interruptions_per_host_day", "false_alarms_per_host_day", "hardware_failures",
                "hardware_failures_without_precursor", "precursors", "false_alarm_episodes"}
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
