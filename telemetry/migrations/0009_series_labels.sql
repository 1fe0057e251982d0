-- Labels a series carried that no samples column or inventory row keeps (e.g. slot="3", a
-- node_cpu_seconds_total mode): kept here, one row per distinct label set per series
-- (cluster, host, component, metric), so series that merged into one row key because they
-- differ only in such labels still show each label set. Written where ingestion resolves a
-- label set for the first time (telemetry.ingestion.series_labels), never per sample; an
-- inventory table like hosts/components: no TTL, rows dropped with their cluster.
CREATE TABLE IF NOT EXISTS series_labels$LOCAL $ON_CLUSTER
(
    cluster LowCardinality(String),
    host String,
    component String,
    metric LowCardinality(String),
    labels Map(String, String),
    first_seen DateTime64(3, 'UTC'),
    last_seen DateTime64(3, 'UTC')
)
ENGINE = $ENGINE(ReplacingMergeTree(last_seen))
ORDER BY (cluster, host, component, metric, labels)
$SETTINGS;

$DISTRIBUTED(series_labels, cityHash64(host));
