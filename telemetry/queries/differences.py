""""What's different here": rank catalog metrics by how the affected components departed from their peers.

For a case (cluster, t0, lead window, affected hosts, peer hosts) every catalog
metric present in the window is summarised per component in the engine — the
mean for gauges, the per-second rate for counters (reset-aware, over the
minute maxima of the 1-minute rollup: a counter only goes up within a minute,
so its max is the closing value and its min the opening one; a reset inside a
minute shows at the next minute boundary, whose max is below this one's) — in
one query. Then, on those
aggregates only, each affected component is scored against the peers' values
of the same metric on the same component family (``gpu3`` vs every ``gpuN``
of the peers):

    z = (value - median(peers)) / (1.4826 * MAD(peers))

MAD of zero (typical for error counters that are flat on healthy hosts) falls
back to the peers' standard deviation, then to 1 % of |median|, then to a tiny
floor, so one error on a silent metric scores high rather than dividing by zero;
|z| is capped at ``Z_CAP``. The ranking score follows the catalog's ``bad``
direction: ``up`` ranks rises, ``down`` ranks drops, ``none`` ranks either way
(those are often workload-driven, so ``include_neutral=False`` leaves them out).

The lead window is read from the rollup, so it is aligned to whole minutes:
[t0 - lead_s, t0) rounded down to the minute.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import numpy as np
import pandas as pd

from telemetry import catalog, rules, store

Z_CAP = 1000.0
MIN_PEER_COMPONENTS = 3
MAX_HOSTS = 512
QUERY_TIMEOUT_S = 30
MAX_LEAD_S = 14 * 86400  # narrower than a hypothesis's: raw samples of every component are read


@dataclass(frozen=True)
class DifferenceQuery:
    cluster: str
    t0: datetime
    lead_s: int
    affected_hosts: list[str]
    peers: list[str]
    metrics: list[str] | None = None  # default: every catalog metric
    top_n: int = 20
    include_neutral: bool = True


@dataclass(frozen=True)
class Difference:
    metric: str
    layer: str
    unit: str  # with "/s" for counter rates
    bad: str
    host: str
    component: str
    score: float  # direction-aware, higher = more suspicious
    z: float  # signed robust z-score
    affected_value: float
    peer_median: float
    peer_p95: float
    n_peers: int  # peer components compared against


_SQL = (
    "SELECT metric, host, component, has({affected:Array(String)}, host) AS is_affected, "
    "if(has({counters:Array(String)}, metric), "
    "   sum(inc) / ((toUnixTimestamp(max(ts)) - toUnixTimestamp(min(ts))) + 60), "
    "   sum(s) / sum(c)) AS stat "
    "FROM ("
    "  SELECT metric, host, component, ts, s, c, "
    "  if(prev_last IS NULL, if(last_v >= first_v, last_v - first_v, last_v), "
    "     if(last_v >= prev_last, last_v - prev_last, last_v)) AS inc "
    "  FROM ("
    "    SELECT *, lagInFrame(toNullable(last_v), 1, NULL) OVER w AS prev_last FROM ("
    "      SELECT metric, host, component, ts, sum(sum) AS s, sum(count) AS c, "
    "      min(min) AS first_v, max(max) AS last_v "
    "      FROM samples_1m "
    "      WHERE cluster = {cluster:String} AND metric IN {metrics:Array(String)} AND host IN {hosts:Array(String)} "
    "      AND ts >= {lo:DateTime('UTC')} AND ts < {hi:DateTime('UTC')} "
    "      GROUP BY metric, host, component, ts) "
    "    WINDOW w AS (PARTITION BY metric, host, component ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW))) "
    "GROUP BY metric, host, component"
)


def _utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


def component_stats(q: DifferenceQuery, *, timeout_s: int = QUERY_TIMEOUT_S) -> pd.DataFrame:
    """Per (metric, host, component) lead-window statistic; columns metric, host, component, is_affected, stat."""
    metrics = list(q.metrics) if q.metrics is not None else list(catalog.CATALOG)
    unknown = [m for m in metrics if not catalog.is_known(m)]
    if unknown:
        raise ValueError(f"metrics: {', '.join(map(repr, unknown[:5]))} not canonical catalog names")
    if not q.affected_hosts:
        raise ValueError("affected_hosts: at least one host is needed")
    if len(q.affected_hosts) + len(q.peers) > MAX_HOSTS:
        raise ValueError(f"hosts: at most {MAX_HOSTS} affected hosts and peers together")
    if not (rules.LEAD_WINDOW_MIN_S <= q.lead_s <= MAX_LEAD_S):
        raise ValueError(f"lead_s {q.lead_s}: must be between {rules.LEAD_WINDOW_MIN_S} s and {MAX_LEAD_S // 86400} days")
    t0 = _utc(q.t0)
    hi = t0.replace(second=0, microsecond=0)
    lo = (t0 - timedelta(seconds=q.lead_s)).replace(second=0, microsecond=0)
    affected = sorted(set(q.affected_hosts))
    peers = sorted(set(q.peers) - set(affected))
    params = {
        "cluster": q.cluster,
        "metrics": metrics,
        "counters": [m for m in metrics if catalog.CATALOG[m].is_counter],
        "hosts": affected + peers,
        "affected": affected,
        "lo": lo,
        "hi": hi,
    }
    df = store.query_df(_SQL, params, tag="differences.component_stats", timeout_s=timeout_s)
    if not df.empty:
        df["is_affected"] = df["is_affected"].astype(bool)
    return df


def _scale(peer: np.ndarray, med: float) -> float:
    mad = float(np.median(np.abs(peer - med))) * 1.4826
    if mad > 0:
        return mad
    sd = float(np.std(peer))
    if sd > 0:
        return sd
    return max(abs(med) * 0.01, 1e-9)


def rank(stats: pd.DataFrame, *, top_n: int = 20, include_neutral: bool = True) -> list[Difference]:
    """Score affected components against peers of the same metric and component family (pandas on aggregates)."""
    if stats.empty:
        return []
    stats = stats[np.isfinite(stats["stat"].astype(float))].copy()
    stats["family"] = stats["component"].str.replace(r"[0-9]+", "", regex=True)
    out: list[Difference] = []
    for (metric, _family), group in stats.groupby(["metric", "family"], sort=False):
        m = catalog.CATALOG[metric]
        if m.bad == "none" and not include_neutral:
            continue
        peer = group.loc[~group["is_affected"], "stat"].to_numpy(dtype=float)
        if len(peer) < MIN_PEER_COMPONENTS:
            continue
        med = float(np.median(peer))
        p95 = float(np.percentile(peer, 95))
        scale = _scale(peer, med)
        for row in group.loc[group["is_affected"]].itertuples(index=False):
            z = float(np.clip((row.stat - med) / scale, -Z_CAP, Z_CAP))
            score = z if m.bad == "up" else (-z if m.bad == "down" else abs(z))
            if score <= 0:
                continue
            out.append(Difference(
                metric=metric, layer=m.layer, unit=m.unit + ("/s" if m.is_counter else ""), bad=m.bad,
                host=row.host, component=row.component, score=score, z=z, affected_value=float(row.stat),
                peer_median=med, peer_p95=p95, n_peers=len(peer),
            ))
    out.sort(key=lambda d: (-d.score, d.metric, d.host, d.component))
    return out[:top_n]


def whats_different(q: DifferenceQuery, *, timeout_s: int = QUERY_TIMEOUT_S) -> list[Difference]:
    return rank(component_stats(q, timeout_s=timeout_s), top_n=q.top_n, include_neutral=q.include_neutral)
