-- One-minute rollup for long ranges, fed by a materialized view on samples.
-- first/last keep the counter values at the minute edges so rates over the
-- rollup stay exact; min/max/sum/count serve gauges and peer bands.
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
    first AggregateFunction(argMin, Float64, DateTime64(3, 'UTC')),
    last AggregateFunction(argMax, Float64, DateTime64(3, 'UTC'))
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
    argMinState(value, raw_ts) AS first,
    argMaxState(value, raw_ts) AS last
FROM (SELECT ts AS raw_ts, cluster, host, component, metric, value FROM samples$LOCAL)
GROUP BY cluster, metric, host, component, ts;

$DISTRIBUTED(samples_1m, cityHash64(host));
