-- Deferred rollups for streaming pushes (telemetry.rollup).
--
-- A remote-write push or a text scrape holds one or two samples per series, so the rollup
-- view made almost as many samples_1m rows as samples, one more part per insert and twice
-- the background merges (bench ingest-fleet: 17.4 ms server CPU per 2,000-sample push with
-- the view, 9.6 ms without), and each series-minute came in as many one-sample pieces, so
-- band_1m never saw two samples of a counter in one minute (no rates). In the embedded
-- store, streaming inserts now carry a log_comment starting with 'rollup-deferred'; the
-- view skips those, and the process feeds the same rows to the rollup later, many pushes at
-- once, through samples_feed (a Null table: nothing is stored, its view writes samples_1m,
-- whose own view writes band_1m as before). Every other insert (files, the simulator, a
-- ClickHouse server's inserts) is rolled by the view as before, de-duplication included.
DROP VIEW IF EXISTS samples_1m_mv$LOCAL $ON_CLUSTER;

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
FROM (SELECT ts AS raw_ts, cluster, host, component, metric, value FROM samples$LOCAL
      WHERE getSetting('log_comment') NOT LIKE 'rollup-deferred%')
GROUP BY cluster, metric, host, component, ts;

CREATE TABLE IF NOT EXISTS samples_feed$LOCAL $ON_CLUSTER
(
    ts DateTime64(3, 'UTC'),
    cluster LowCardinality(String),
    host LowCardinality(String),
    component LowCardinality(String),
    metric LowCardinality(String),
    value Float64
)
ENGINE = Null;

CREATE MATERIALIZED VIEW IF NOT EXISTS samples_feed_mv$LOCAL $ON_CLUSTER TO samples_1m$LOCAL AS
SELECT
    toStartOfMinute(raw_ts) AS ts,
    cluster, host, component, metric,
    min(value) AS min,
    max(value) AS max,
    sum(value) AS sum,
    count() AS count,
    min(raw_ts) AS min_ts,
    max(raw_ts) AS max_ts
FROM (SELECT ts AS raw_ts, cluster, host, component, metric, value FROM samples_feed$LOCAL)
GROUP BY cluster, metric, host, component, ts;

$DISTRIBUTED(samples_feed, cityHash64(host));
