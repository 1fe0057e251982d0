-- Every run of a requeued job is its own record under the same JobID. With
-- `sacct -D` a job requeued after a node failure is listed once per run, and
-- Slurm gives each run its own Submit time (slurmdbd keys a job record by
-- JobID and submit time): the NODE_FAIL of the first run is an interruption as
-- much as the last run's end.
--
-- run_ts joins the sorting key: the run's submit time for jobs (its start when
-- the capture has no Submit column), its start for job_hosts (an allocation
-- exists only once the run started). It is computed on insert from those
-- columns, so writers send the same columns as before; rows stored before this
-- migration read it from the same default. The column is added bare in the
-- ALTER that extends the key (ClickHouse allows only that), then given its
-- default.
ALTER TABLE jobs$LOCAL $ON_CLUSTER
    ADD COLUMN IF NOT EXISTS run_ts DateTime64(3, 'UTC'),
    MODIFY ORDER BY (cluster, job_id, run_ts);

ALTER TABLE jobs$LOCAL $ON_CLUSTER
    MODIFY COLUMN run_ts DateTime64(3, 'UTC') DEFAULT ifNull(submit_ts, ifNull(start_ts, toDateTime64(0, 3, 'UTC')));

$ALTER_DISTRIBUTED(jobs, ADD COLUMN IF NOT EXISTS run_ts DateTime64(3, 'UTC') DEFAULT ifNull(submit_ts, ifNull(start_ts, toDateTime64(0, 3, 'UTC'))));

ALTER TABLE job_hosts$LOCAL $ON_CLUSTER
    ADD COLUMN IF NOT EXISTS run_ts DateTime64(3, 'UTC'),
    MODIFY ORDER BY (cluster, job_id, host, run_ts);

ALTER TABLE job_hosts$LOCAL $ON_CLUSTER
    MODIFY COLUMN run_ts DateTime64(3, 'UTC') DEFAULT ifNull(start_ts, toDateTime64(0, 3, 'UTC'));

$ALTER_DISTRIBUTED(job_hosts, ADD COLUMN IF NOT EXISTS run_ts DateTime64(3, 'UTC') DEFAULT ifNull(start_ts, toDateTime64(0, 3, 'UTC')));
