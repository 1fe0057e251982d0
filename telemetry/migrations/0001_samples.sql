-- Raw samples: one row per (series, timestamp). Counters are stored raw; rates
-- are computed at query time with reset handling. DoubleDelta suits the regular
-- scrape timestamps, Gorilla the slowly changing float gauges.
CREATE TABLE IF NOT EXISTS samples$LOCAL $ON_CLUSTER
(
    ts DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    cluster LowCardinality(String),
    host LowCardinality(String),
    component LowCardinality(String),
    metric LowCardinality(String),
    value Float64 CODEC(Gorilla, ZSTD(1))
)
ENGINE = $ENGINE(MergeTree)
PARTITION BY toDate(ts)
ORDER BY (cluster, metric, host, component, ts)
$TTL(toDateTime(ts))
$SETTINGS;

$DISTRIBUTED(samples, cityHash64(host));
