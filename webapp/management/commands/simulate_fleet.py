"""python manage.py simulate_fleet: load a simulated GPU fleet (telemetry, jobs,
inventory, failures with precursors) into the telemetry store, plus its
ground-truth manifest. With no arguments it loads the demo fleet."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from telemetry import migrate, store
from telemetry.simulator import SCENARIOS, RunStats, SimConfig, simulate
from telemetry.simulator.realistic import DEFAULT_FAILURE_SCALE as REALISTIC_FAILURE_SCALE

DEFAULTS = SimConfig(hosts=24, days=3, interval_s=120, failure_scale=200.0)


def parse_start(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CommandError(f"--start: {text!r} is not an ISO 8601 time (e.g. 2026-01-05T00:00:00Z)") from None
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def default_start(days: float) -> datetime:
    """Today 00:00 UTC minus the simulated span: same-day reruns are identical."""
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=days)


class Command(BaseCommand):
    help = ("Simulate a GPU fleet with failure precursors and write it through the ingestion writer. "
            "Defaults load the demo fleet (24 hosts x 3 days at 120 s).")

    def add_arguments(self, parser):
        parser.add_argument("--hosts", type=int, default=DEFAULTS.hosts, help="hosts of 8 GPUs (default %(default)s)")
        parser.add_argument("--days", type=float, default=DEFAULTS.days, help="simulated days (default %(default)s)")
        parser.add_argument("--interval", type=int, default=DEFAULTS.interval_s,
                            help="seconds between samples (default %(default)s)")
        parser.add_argument("--seed", type=int, default=DEFAULTS.seed, help="random seed (default %(default)s)")
        parser.add_argument("--start", default=None,
                            help="ISO UTC start; default: today 00:00 UTC minus --days (the last day ends today)")
        parser.add_argument("--cluster", default="demo", help="fleet name in the store (default %(default)s)")
        parser.add_argument("--manifest", default=None,
                            help="ground-truth JSON path (default <PRECURSOR_DATA_DIR>/ground-truth/<cluster>-seed<seed>.json)")
        parser.add_argument("--scenario", choices=SCENARIOS, default="demo",
                            help="demo: the quick demo fleet; realistic: a fleet as hard as a real one (heavy-tailed "
                                 "healthy noise, ~155 metrics, weak and missing precursors, false alarms, "
                                 "confounders), the yardstick of `bench analysis` (default %(default)s)")
        parser.add_argument("--failure-scale", type=float, default=None,
                            help="multiplier on the Llama 3 per-host interruption rate (0.0038 per host-day); default "
                                 f"{DEFAULTS.failure_scale:g} for the demo (a small fleet sees the failures of one ~100x "
                                 f"its size), {REALISTIC_FAILURE_SCALE:g} for the realistic scenario")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args, **opts):
        from tqdm import tqdm

        start = parse_start(opts["start"]) if opts["start"] else default_start(opts["days"])
        scale = opts["failure_scale"]
        if scale is None:
            scale = REALISTIC_FAILURE_SCALE if opts["scenario"] == "realistic" else DEFAULTS.failure_scale
        try:
            cfg = SimConfig(hosts=opts["hosts"], days=opts["days"], interval_s=opts["interval"], seed=opts["seed"],
                            start=start, cluster=opts["cluster"], failure_scale=scale, scenario=opts["scenario"])
        except ValueError as exc:
            raise CommandError(f"--{exc}") from None
        manifest_path = Path(opts["manifest"] or settings.DATA_DIR / "ground-truth" / f"{cfg.cluster}-seed{cfg.seed}.json")
        try:
            migrate.migrate(store.get_client(),
                            migrate.Target(cluster=settings.TELEMETRY_CLUSTER, ttl_days=settings.TELEMETRY_TTL_DAYS),
                            log=lambda m: self.stdout.write(m))
            bar = tqdm(total=cfg.estimated_samples(), unit=" samples", unit_scale=True, file=self.stderr._out,
                       disable=opts["no_progress"], desc=f"simulating {cfg.cluster}")
            stats = RunStats()

            def progress(done: int, total: int) -> None:
                bar.update(done - bar.n)

            manifest = simulate(cfg, progress=progress, stats=stats, tag="simulate_fleet")
            bar.update(bar.total - bar.n if manifest.counts["samples"] >= bar.total else 0)
            bar.close()
        except (store.StoreLocked, store.StoreUnavailable, migrate.MigrationError) as exc:
            raise CommandError(str(exc)) from None
        manifest.write(manifest_path)
        c = manifest.counts
        classes = len({f["cause"] for f in manifest.failures})
        self.stdout.write(
            f"{cfg.cluster}: {c['samples']:,} samples, {c['events']:,} events, {c['jobs']} jobs, "
            f"{c['interruptions']} interruptions over {classes} root causes, {c['false_alarms']} false alarms "
            f"({cfg.scenario} scenario) "
            f"in {stats.wall_s:.1f} s ({c['samples'] / max(stats.wall_s, 1e-9):,.0f} samples/s)\n"
            f"ground truth: {manifest_path}"
        )
