-- Discrete events: XID/SXID, link up/down, kernel and firmware messages,
-- scheduler job states. Ordered by host then time: the case page asks
-- "what happened on these hosts around t0".
CREATE TABLE IF NOT EXISTS events$LOCAL $ON_CLUSTER
(
    ts DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    cluster LowCardinality(String),
    host LowCardinality(String),
    component LowCardinality(String),
    source LowCardinality(String),
    kind LowCardinality(String),
    code Int32,
    severity LowCardinality(String),
    message String CODEC(ZSTD(3)),
    attributes Map(String, String) CODEC(ZSTD(3))
)
ENGINE = $ENGINE(MergeTree)
PARTITION BY toYYYYMM(ts)
ORDER BY (cluster, host, ts, kind)
$TTL(toDateTime(ts))
$SETTINGS;

$DISTRIBUTED(events, cityHash64(host));
