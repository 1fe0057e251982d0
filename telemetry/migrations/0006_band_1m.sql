-- Fleet band rollup: per (cluster, metric, component family, minute) the
-- distribution of that metric over every series of the family, so the case
-- overlay draws "the fleet at the same minute" from a few thousand rows instead
-- of merging millions of peer rollup rows per chart.
--
-- Fed by a view on samples_1m (chained: each insert the rollup view makes
-- triggers it), whose inserted rows are already one per series-minute (within
-- the inserted block: a minute split across two inserts counts as two values),
-- so the insert path groups the raw samples once, not twice. Those values go
-- into t-digests, whose states merge across parts, shards and minutes. The view
-- cannot see the metric catalog, so it keeps every state and the reader picks
-- by kind and bad direction: the minute's mean, max and min for gauges; for
-- counters the within-minute rate (max - min) / (max_ts - min_ts), only from
-- >= 2 samples. A counter only goes up within a minute, so max - min is its
-- increase, except across a reset inside the minute, which gives one bogus
-- series-minute in the digest (the quantiles shrug off a few).
-- family = the component with every digit removed (gpu3 -> gpu, mlx5_0/1 ->
-- mlx_/), the same rule as telemetry.queries.overlay.component_family.
--
-- The CREATE ... AS SELECT backfills from the rollup already stored (merged
-- per series-minute first; nothing when the table exists); the view then
-- feeds every later insert. Samples written between the two statements are not
-- banded: migrations run before serving.
CREATE TABLE IF NOT EXISTS band_1m$LOCAL $ON_CLUSTER
(
    ts DateTime('UTC') CODEC(DoubleDelta, ZSTD(1)),
    cluster LowCardinality(String),
    metric LowCardinality(String),
    family LowCardinality(String),
    mean_q AggregateFunction(quantilesTDigest(0.05, 0.5, 0.95), Float64),
    max_q AggregateFunction(quantilesTDigest(0.05, 0.5, 0.95), Float64),
    min_q AggregateFunction(quantilesTDigest(0.05, 0.5, 0.95), Float64),
    level_n SimpleAggregateFunction(sum, UInt64),
    rate_q AggregateFunction(quantilesTDigest(0.05, 0.5, 0.95), Float64),
    rate_n SimpleAggregateFunction(sum, UInt64)
)
ENGINE = $ENGINE(AggregatingMergeTree)
PARTITION BY toYYYYMM(ts)
ORDER BY (cluster, metric, family, ts)
$TTL(ts)
$SETTINGS
AS SELECT
    ts, cluster, metric, replaceRegexpAll(component, '[0-9]+', '') AS family,
    quantilesTDigestState(0.05, 0.5, 0.95)(s / c) AS mean_q,
    quantilesTDigestState(0.05, 0.5, 0.95)(hi) AS max_q,
    quantilesTDigestState(0.05, 0.5, 0.95)(lo) AS min_q,
    count() AS level_n,
    quantilesTDigestStateIf(0.05, 0.5, 0.95)(
        (hi - lo) * 1000.0 / greatest(toUnixTimestamp64Milli(t_last) - toUnixTimestamp64Milli(t_first), 1),
        c >= 2) AS rate_q,
    countIf(c >= 2) AS rate_n
FROM
(
    SELECT
        cluster, metric, host, component, ts,
        min(min) AS lo, max(max) AS hi, sum(sum) AS s, sum(count) AS c,
        min(min_ts) AS t_first, max(max_ts) AS t_last
    FROM samples_1m$LOCAL
    GROUP BY cluster, metric, host, component, ts
)
GROUP BY cluster, metric, family, ts;

CREATE MATERIALIZED VIEW IF NOT EXISTS band_1m_mv$LOCAL $ON_CLUSTER TO band_1m$LOCAL AS
SELECT
    ts, cluster, metric, replaceRegexpAll(component, '[0-9]+', '') AS family,
    quantilesTDigestState(0.05, 0.5, 0.95)(sum / count) AS mean_q,
    quantilesTDigestState(0.05, 0.5, 0.95)(max) AS max_q,
    quantilesTDigestState(0.05, 0.5, 0.95)(min) AS min_q,
    count() AS level_n,
    quantilesTDigestStateIf(0.05, 0.5, 0.95)(
        (max - min) * 1000.0 / greatest(toUnixTimestamp64Milli(max_ts) - toUnixTimestamp64Milli(min_ts), 1),
        count >= 2) AS rate_q,
    countIf(count >= 2) AS rate_n
FROM samples_1m$LOCAL
GROUP BY cluster, metric, family, ts;
