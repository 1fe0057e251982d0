-- Inventory and topology: host -> rack, leaf, spine; components with model,
-- serial, UUID, PCI bus id (maps kernel XID lines to GPUs), firmware, and the
-- switch port a NIC is cabled to. Newest report wins.
CREATE TABLE IF NOT EXISTS hosts$LOCAL $ON_CLUSTER
(
    cluster LowCardinality(String),
    host String,
    rack LowCardinality(String),
    leaf LowCardinality(String),
    spine LowCardinality(String),
    gpu_model LowCardinality(String),
    driver_version LowCardinality(String),
    firmware_version LowCardinality(String),
    updated DateTime64(3, 'UTC')
)
ENGINE = $ENGINE(ReplacingMergeTree(updated))
ORDER BY (cluster, host)
$SETTINGS;

$DISTRIBUTED(hosts, cityHash64(host));

CREATE TABLE IF NOT EXISTS components$LOCAL $ON_CLUSTER
(
    cluster LowCardinality(String),
    host String,
    component String,
    kind LowCardinality(String),
    model LowCardinality(String),
    serial String,
    uuid String,
    pci_bus_id String,
    firmware LowCardinality(String),
    peer String,
    updated DateTime64(3, 'UTC')
)
ENGINE = $ENGINE(ReplacingMergeTree(updated))
ORDER BY (cluster, host, component)
$SETTINGS;

$DISTRIBUTED(components, cityHash64(host));
