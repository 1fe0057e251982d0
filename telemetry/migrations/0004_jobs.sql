-- Scheduler jobs and their host allocations. A job is re-reported as its state
-- changes (sacct polled repeatedly): ReplacingMergeTree keeps the newest
-- version; readers use FINAL or argMax. An interruption is a job that ended
-- abnormally; see telemetry.queries.interruptions.
CREATE TABLE IF NOT EXISTS jobs$LOCAL $ON_CLUSTER
(
    cluster LowCardinality(String),
    job_id String,
    name String,
    user LowCardinality(String),
    partition LowCardinality(String),
    state LowCardinality(String),
    exit_code String,
    reason String,
    submit_ts Nullable(DateTime64(3, 'UTC')),
    start_ts Nullable(DateTime64(3, 'UTC')),
    end_ts Nullable(DateTime64(3, 'UTC')),
    n_hosts UInt32,
    n_gpus UInt32,
    version UInt64
)
ENGINE = $ENGINE(ReplacingMergeTree(version))
ORDER BY (cluster, job_id)
$SETTINGS;

$DISTRIBUTED(jobs, cityHash64(job_id));

CREATE TABLE IF NOT EXISTS job_hosts$LOCAL $ON_CLUSTER
(
    cluster LowCardinality(String),
    job_id String,
    host LowCardinality(String),
    start_ts Nullable(DateTime64(3, 'UTC')),
    end_ts Nullable(DateTime64(3, 'UTC')),
    version UInt64
)
ENGINE = $ENGINE(ReplacingMergeTree(version))
ORDER BY (cluster, job_id, host)
$SETTINGS;

$DISTRIBUTED(job_hosts, cityHash64(job_id));
