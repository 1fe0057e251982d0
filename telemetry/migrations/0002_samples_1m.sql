-- One-minute rollup for long ranges, fed by a materialized view on samples.
-- min/max/sum/count serve gauges and peer bands; min_ts/max_ts are the times
-- of the minute's first and last sample (band_1m's within-minute rates).
-- No first/last values (argMin/argMax states cost ~20% of the insert path):
-- a counter only goes up within a minute, so its minute-closing value is max
-- and its opening value min. A reset inside a minute shows at the next minute
-- boundary instead (that minute's max is below this one's: read as a reset).
CREATE TABLE IF NOT EXISTS samples_1m$LOCAL $ON_CLUSTER
(
    ts DateTime('UTC') CODEC(DoubleDelta, ZSTD(1)),
    cluster LowCardinality(String),
    host LowCardinality(String),
    component LowCardinality(String),
    metric LowCardinality(String),
    min SimpleAggregateFunction(min, Float64),
    max SimpleAggregateFunction(max, Float64),
    sum SimpleAggregateFunction(sum, Float64),
    count SimpleAggregateFunction(sum, UInt64),
    min_ts SimpleAggregateFunction(min, DateTime64(3, 'UTC')),
    max_ts SimpleAggregateFunction(max, DateTime64(3, 'UTC'))
)
ENGINE = $ENGINE(AggregatingMergeTree)
PARTITION BY toYYYYMM(ts)
ORDER BY (cluster, metric, host, component, ts)
$TTL(ts)
$SETTINGS;

CREATE MATERIALIZED VIEW IF NOT EXISTS samples_1m_mv$LOCAL $ON_CLUSTER TO samples_1m$LOCAL AS
SELECT
    toStartOfMinute(raw_ts) AS ts,
    cluster, host, component, metric,
    min(value) AS min,
    max(value) AS max,
    sum(value) AS sum,
    count() AS count,
    min(raw_ts) AS min_ts,
    max(raw_ts) AS max_ts
FROM (SELECT ts AS raw_ts, cluster, host, component, metric, value FROM samples$LOCAL)
GROUP BY cluster, metric, host, component, ts;

$DISTRIBUTED(samples_1m, cityHash64(host));
