-- Fleet band rollup: per (cluster, metric, component family, minute) the
-- distribution of that metric over every series of the family, so the case
-- overlay draws "the fleet at the same minute" from a few thousand rows instead
-- of merging millions of peer rollup rows per chart.
--
-- Each series first collapses to one value per minute (within the inserted
-- block: a minute split across two inserts counts as two values), then those
-- values go into t-digests, whose states merge across parts, shards and
-- minutes. The view cannot see the metric catalog, so it keeps every state and
-- the reader picks by kind and bad direction: the minute's mean, max and min
-- for gauges; for counters the within-minute rate (last - first) / (t_last -
-- t_first), only from >= 2 samples and skipped when negative (a reset).
-- family = the component with every digit removed (gpu3 -> gpu, mlx5_0/1 ->
-- mlx_/), the same rule as telemetry.queries.overlay.component_family.
--
-- The CREATE ... AS SELECT backfills the samples already stored (nothing when
-- the table exists); the view then feeds every later insert. Samples written
-- between the two statements are not banded: migrations run before serving.
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
    minute AS ts, cluster, metric, family,
    quantilesTDigestState(0.05, 0.5, 0.95)(mean_v) AS mean_q,
    quantilesTDigestState(0.05, 0.5, 0.95)(max_v) AS max_q,
    quantilesTDigestState(0.05, 0.5, 0.95)(min_v) AS min_q,
    count() AS level_n,
    quantilesTDigestStateIf(0.05, 0.5, 0.95)(rate_v, has_rate) AS rate_q,
    countIf(has_rate) AS rate_n
FROM
(
    SELECT
        cluster, metric, replaceRegexpAll(component, '[0-9]+', '') AS family, toStartOfMinute(raw_ts) AS minute,
        avg(value) AS mean_v, max(value) AS max_v, min(value) AS min_v,
        (argMax(value, raw_ts) - argMin(value, raw_ts)) * 1000.0
            / greatest(toUnixTimestamp64Milli(max(raw_ts)) - toUnixTimestamp64Milli(min(raw_ts)), 1) AS rate_v,
        toUInt8(count() >= 2 AND rate_v >= 0) AS has_rate
    FROM (SELECT ts AS raw_ts, cluster, host, component, metric, value FROM samples$LOCAL)
    GROUP BY cluster, metric, host, component, family, minute
)
GROUP BY cluster, metric, family, ts;

CREATE MATERIALIZED VIEW IF NOT EXISTS band_1m_mv$LOCAL $ON_CLUSTER TO band_1m$LOCAL AS
SELECT
    minute AS ts, cluster, metric, family,
    quantilesTDigestState(0.05, 0.5, 0.95)(mean_v) AS mean_q,
    quantilesTDigestState(0.05, 0.5, 0.95)(max_v) AS max_q,
    quantilesTDigestState(0.05, 0.5, 0.95)(min_v) AS min_q,
    count() AS level_n,
    quantilesTDigestStateIf(0.05, 0.5, 0.95)(rate_v, has_rate) AS rate_q,
    countIf(has_rate) AS rate_n
FROM
(
    SELECT
        cluster, metric, replaceRegexpAll(component, '[0-9]+', '') AS family, toStartOfMinute(raw_ts) AS minute,
        avg(value) AS mean_v, max(value) AS max_v, min(value) AS min_v,
        (argMax(value, raw_ts) - argMin(value, raw_ts)) * 1000.0
            / greatest(toUnixTimestamp64Milli(max(raw_ts)) - toUnixTimestamp64Milli(min(raw_ts)), 1) AS rate_v,
        toUInt8(count() >= 2 AND rate_v >= 0) AS has_rate
    FROM (SELECT ts AS raw_ts, cluster, host, component, metric, value FROM samples$LOCAL)
    GROUP BY cluster, metric, host, component, family, minute
)
GROUP BY cluster, metric, family, ts;
