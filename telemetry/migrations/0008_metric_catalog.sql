-- Catalog entries added by users (custom metrics and aliases), beside the catalog in
-- code (telemetry/catalog.py). Versioned: every change is a new row, the current entry
-- of a name is its highest version, `deleted` retires it; the rows are the history
-- (who, when, what). Read by telemetry.catalog_store and merged into the catalog of
-- every process, so ingestion, pages and jobs use the same names.
CREATE TABLE IF NOT EXISTS metric_catalog$LOCAL $ON_CLUSTER
(
    name String,
    version UInt64,
    entry LowCardinality(String),
    target String,
    layer LowCardinality(String),
    unit String,
    kind LowCardinality(String),
    bad LowCardinality(String),
    component LowCardinality(String),
    description String,
    scale Float64,
    deleted UInt8,
    changed DateTime64(3, 'UTC'),
    changed_by String
)
ENGINE = $ENGINE(MergeTree)
ORDER BY (name, version)
$SETTINGS;

$DISTRIBUTED(metric_catalog, cityHash64(name));
