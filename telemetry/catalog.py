"""Metric catalog: every metric Precursor stores, as data.

Ingestion uses it to turn source names (DCGM fields, node_exporter series, mlx5
ethtool stats, InfiniBand port counters) into one canonical name; query runners
use it to whitelist identifiers and to know whether to take a rate; the signal
scan uses ``bad`` to know which direction of change is suspicious.

Naming scheme
-------------
``<prefix>.<snake_name>`` (lowercase, dots only to group), where the prefix says
where the number comes from:

=============  =========  =====================================================
prefix         layer      what
=============  =========  =====================================================
``gpu.``       gpu        per-GPU device state (DCGM); sub-groups ``gpu.ecc.``,
                          ``gpu.row_remap.``, ``gpu.retired_pages.``,
                          ``gpu.pcie.``, ``gpu.throttle.``, ``gpu.clock_event.``
``nvlink.``    nvswitch   GPU-side NVLink counters (reported per GPU); the
                          nvswitch layer is the whole scale-up NVLink fabric
``nvswitch.``  nvswitch   NVSwitch device counters (per switch)
``net.``       network    NIC/Ethernet/RoCE: mlx5 ethtool, netdev, RDMA
                          hw_counters (CNP/ECN, transport errors)
``ib.``        network    IBTA PortCounters of an HCA port (IB or RoCE)
``storage.``   storage    block devices, filesystems, NVMe, checkpoint I/O
``power.``     power      PSUs, node power sensors, RAPL energy
``cooling.``   cooling    fans, inlet/outlet air, liquid loop
``host.``      host       CPU, memory, load, PSI, EDAC, PCIe links, sensors
``job.``       job        training-job health reported by the job itself
=============  =========  =====================================================

Unit conventions: temperatures ``C``, power ``W``, energy ``J``, clocks ``MHz``,
memory sizes ``MiB`` where DCGM reports MiB and ``bytes`` otherwise, time spent
``s`` or ``ns`` as the source counts it, ``ratio`` for 0..1, ``%`` for 0..100.
Counters (``kind="counter"``) are stored raw; rates are computed at query time
with reset handling.

Aliases
-------
``aliases`` are exact source names (case-sensitive). A source name that only
differs by labels (node_exporter ``chip``/``sensor``/``device``) is one alias;
mapping labels to components is ingestion's job. Deprecated and current DCGM
names of the same field id are both aliases of one metric.

Deliberately *not* aliased: DCGM per-lane/per-link NVLink fields
(``..._L0_TOTAL``, ``..._PER_LINK_TOTAL``) and mlx5 per-ring/per-priority stats;
mapping them onto the per-device totals would double-count next to the totals.
DCGM fields that describe the device (driver version, serial, ...) are labels,
listed in ``LABEL_FIELDS``, not metrics.

Scale
-----
Some sources count in another unit than the canonical one. ``Metric.scale`` is
the multiplier ingestion applies to values arriving under ``aliases``;
``alias_scales`` overrides it for individual aliases; values written under the
canonical name are never scaled. Use ``Metric.scale_for(source_name)``.
Example: IB ``port_xmit_data``/``PortXmitData`` count 4-byte words, so
``ib.port_xmit_data`` has ``scale=4.0``; node_exporter already multiplies, so its
``node_infiniband_port_data_transmitted_bytes_total`` alias has scale 1.0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterable

LAYERS = ("gpu", "nvswitch", "network", "storage", "power", "cooling", "host", "job")
KINDS = ("gauge", "counter")
BAD_DIRECTIONS = ("up", "down", "none")
COMPONENT_KINDS = ("gpu", "nvswitch", "nic", "psu", "fan", "disk", "cpu", "", "job")

PREFIX_LAYER = {
    "gpu": "gpu",
    "nvlink": "nvswitch",
    "nvswitch": "nvswitch",
    "net": "network",
    "ib": "network",
    "storage": "storage",
    "power": "power",
    "cooling": "cooling",
    "host": "host",
    "job": "job",
}

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")


class UnknownMetric(KeyError):
    """Raised by ``get`` for a name that is neither canonical nor an alias."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "unknown metric"


@dataclass(frozen=True)
class Metric:
    name: str
    layer: str
    unit: str
    kind: str
    bad: str
    component: str
    description: str
    aliases: tuple[str, ...] = ()
    # Multiplier for values ingested under `aliases` (see module docstring).
    scale: float = 1.0
    # Per-alias overrides of `scale`: ((alias, multiplier), ...).
    alias_scales: tuple[tuple[str, float], ...] = ()

    @property
    def is_counter(self) -> bool:
        return self.kind == "counter"

    @property
    def all_aliases(self) -> tuple[str, ...]:
        return self.aliases + tuple(a for a, _ in self.alias_scales)

    def scale_for(self, source_name: str) -> float:
        """Multiplier that turns a value named `source_name` into `self.unit`."""
        if source_name == self.name:
            return 1.0
        for alias, factor in self.alias_scales:
            if alias == source_name:
                return factor
        if source_name in self.aliases:
            return self.scale
        raise UnknownMetric(f"{source_name!r} is not a name of metric {self.name!r}")


# DCGM fields that dcgm-exporter turns into labels rather than samples.
LABEL_FIELDS = frozenset(
    {
        "DCGM_FI_DRIVER_VERSION",
        "DCGM_FI_SYSTEM_DRIVER_VERSION",
        "DCGM_FI_NVML_VERSION",
        "DCGM_FI_SYSTEM_NVML_VERSION",
        "DCGM_FI_CUDA_DRIVER_VERSION",
        "DCGM_FI_DEV_BRAND",
        "DCGM_FI_DEV_GPU_BRAND",
        "DCGM_FI_DEV_NAME",
        "DCGM_FI_DEV_GPU_NAME",
        "DCGM_FI_DEV_SERIAL",
        "DCGM_FI_DEV_BOARD_SERIAL",
        "DCGM_FI_DEV_UUID",
        "DCGM_FI_DEV_GPU_UUID",
        "DCGM_FI_DEV_PCI_BUSID",
        "DCGM_FI_DEV_PCI_BUS_ID",
        "DCGM_FI_DEV_OEM_INFOROM_VER",
        "DCGM_FI_DEV_INFOROM_OEM_VERSION",
        "DCGM_FI_DEV_ECC_INFOROM_VER",
        "DCGM_FI_DEV_INFOROM_ECC_VERSION",
        "DCGM_FI_DEV_POWER_INFOROM_VER",
        "DCGM_FI_DEV_INFOROM_POWER_VERSION",
        "DCGM_FI_DEV_INFOROM_IMAGE_VER",
        "DCGM_FI_DEV_INFOROM_IMAGE_VERSION",
        "DCGM_FI_DEV_VBIOS_VERSION",
        "DCGM_FI_DEV_NVSWITCH_FIRMWARE_VERSION",
    }
)

_DEFS: list[Metric] = []


def _m(
    name: str,
    unit: str,
    kind: str,
    bad: str,
    component: str,
    description: str,
    *aliases: str,
    scale: float = 1.0,
    alias_scales: Iterable[tuple[str, float]] = (),
) -> None:
    layer = PREFIX_LAYER.get(name.split(".", 1)[0], "")
    _DEFS.append(
        Metric(
            name=name,
            layer=layer,
            unit=unit,
            kind=kind,
            bad=bad,
            component=component,
            description=description,
            aliases=tuple(aliases),
            scale=scale,
            alias_scales=tuple(alias_scales),
        )
    )


def _ethtool(*stats: str) -> tuple[str, ...]:
    """mlx5 ethtool stat names plus node_exporter's spelling of each.

    node_exporter's ethtool collector renames whole-word rx/tx to
    received/transmitted and prefixes ``node_ethtool_``.
    """
    out: list[str] = []
    for stat in stats:
        renamed = re.sub(r"(^|_)rx(_|$)", r"\1received\2", stat)
        renamed = re.sub(r"(^|_)tx(_|$)", r"\1transmitted\2", renamed)
        out += [stat, "node_ethtool_" + renamed]
    return tuple(out)


G, C = "gauge", "counter"

# --- gpu: clocks, utilisation, memory ------------------------------------------------
_m("gpu.sm_clock", "MHz", G, "none", "gpu", "Current streaming-multiprocessor clock.",
   "DCGM_FI_DEV_SM_CLOCK", alias_scales=[("DCGM_FI_DEV_SM_CLOCK_HERTZ", 1e-6)])
_m("gpu.mem_clock", "MHz", G, "none", "gpu", "Current memory clock.",
   "DCGM_FI_DEV_MEM_CLOCK", alias_scales=[("DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", 1e-6)])
_m("gpu.sm_clock_max", "MHz", G, "none", "gpu", "Highest SM clock the board supports.",
   "DCGM_FI_DEV_MAX_SM_CLOCK", alias_scales=[("DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ", 1e-6)])
_m("gpu.mem_clock_max", "MHz", G, "none", "gpu", "Highest memory clock the board supports.",
   "DCGM_FI_DEV_MAX_MEM_CLOCK", alias_scales=[("DCGM_FI_DEV_MEMORY_MAX_CLOCK_HERTZ", 1e-6)])
_m("gpu.app_sm_clock", "MHz", G, "none", "gpu", "SM clock target set as the application clock.",
   "DCGM_FI_DEV_APP_SM_CLOCK", alias_scales=[("DCGM_FI_DEV_SM_APP_CLOCK_HERTZ", 1e-6)])
_m("gpu.app_mem_clock", "MHz", G, "none", "gpu", "Memory clock target set as the application clock.",
   "DCGM_FI_DEV_APP_MEM_CLOCK", alias_scales=[("DCGM_FI_DEV_MEMORY_APP_CLOCK_HERTZ", 1e-6)])
_m("gpu.pstate", "count", G, "none", "gpu", "Performance state number (0 is fastest).",
   "DCGM_FI_DEV_PSTATE", "DCGM_FI_DEV_GPU_PSTATE")
_m("gpu.util", "%", G, "none", "gpu", "Share of the sample period in which any kernel was running.",
   "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO")
_m("gpu.mem_copy_util", "%", G, "none", "gpu", "Share of the sample period the memory controller was busy.",
   "DCGM_FI_DEV_MEM_COPY_UTIL")
_m("gpu.enc_util", "%", G, "none", "gpu", "Video encoder busy share.", "DCGM_FI_DEV_ENC_UTIL")
_m("gpu.dec_util", "%", G, "none", "gpu", "Video decoder busy share.", "DCGM_FI_DEV_DEC_UTIL")
_m("gpu.gr_engine_active", "ratio", G, "none", "gpu", "Fraction of time the graphics/compute engine had work.",
   "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO")
_m("gpu.sm_active", "ratio", G, "none", "gpu", "Fraction of cycles in which SMs had at least one warp.",
   "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_UTIL_RATIO")
_m("gpu.sm_occupancy", "ratio", G, "none", "gpu", "Resident warps relative to the SM maximum.",
   "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_SM_OCCUPANCY_RATIO")
_m("gpu.tensor_active", "ratio", G, "none", "gpu", "Fraction of cycles the tensor pipes were busy; a stall shows as a drop.",
   "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_TENSOR_UTIL_RATIO")
_m("gpu.dram_active", "ratio", G, "none", "gpu", "Fraction of cycles the HBM interface moved data.",
   "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_DRAM_UTIL_RATIO")
_m("gpu.fp64_active", "ratio", G, "none", "gpu", "Fraction of cycles the FP64 pipes were busy.",
   "DCGM_FI_PROF_PIPE_FP64_ACTIVE", "DCGM_FI_PROF_FP64_UTIL_RATIO")
_m("gpu.fp32_active", "ratio", G, "none", "gpu", "Fraction of cycles the FP32 pipes were busy.",
   "DCGM_FI_PROF_PIPE_FP32_ACTIVE", "DCGM_FI_PROF_FP32_UTIL_RATIO")
_m("gpu.fp16_active", "ratio", G, "none", "gpu", "Fraction of cycles the FP16 pipes were busy.",
   "DCGM_FI_PROF_PIPE_FP16_ACTIVE", "DCGM_FI_PROF_FP16_UTIL_RATIO")
_m("gpu.fb_used", "MiB", G, "none", "gpu", "Framebuffer (HBM) memory in use.", "DCGM_FI_DEV_FB_USED")
_m("gpu.fb_free", "MiB", G, "down", "gpu", "Framebuffer memory still free.", "DCGM_FI_DEV_FB_FREE")
_m("gpu.fb_reserved", "MiB", G, "none", "gpu", "Framebuffer memory held back by the driver.", "DCGM_FI_DEV_FB_RESERVED")
_m("gpu.fb_total", "MiB", G, "down", "gpu", "Framebuffer size; shrinks when memory is retired or capacity is reduced.",
   "DCGM_FI_DEV_FB_TOTAL")
_m("gpu.fb_used_ratio", "ratio", G, "none", "gpu", "Used framebuffer over usable framebuffer.",
   "DCGM_FI_DEV_FB_USED_PERCENT", "DCGM_FI_DEV_FB_USED_RATIO")

# --- gpu: temperature, power, energy --------------------------------------------------
_m("gpu.temp", "C", G, "up", "gpu", "GPU die temperature.", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS")
_m("gpu.mem_temp", "C", G, "up", "gpu", "HBM temperature.", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS")
_m("gpu.temp_margin", "C", G, "down", "gpu", "Degrees left before the nearest thermal slowdown threshold.",
   "DCGM_FI_DEV_GPU_TEMP_LIMIT", "DCGM_FI_DEV_GPU_TEMP_MARGIN_CELSIUS")
_m("gpu.temp_slowdown", "C", G, "none", "gpu", "Temperature at which the GPU starts slowing its clocks.",
   "DCGM_FI_DEV_SLOWDOWN_TEMP", "DCGM_FI_DEV_GPU_TEMP_SLOWDOWN_CELSIUS")
_m("gpu.temp_shutdown", "C", G, "none", "gpu", "Temperature at which the GPU shuts itself down.",
   "DCGM_FI_DEV_SHUTDOWN_TEMP", "DCGM_FI_DEV_GPU_TEMP_SHUTDOWN_CELSIUS")
_m("gpu.temp_max_op", "C", G, "none", "gpu", "Highest GPU temperature allowed for normal operation.",
   "DCGM_FI_DEV_GPU_MAX_OP_TEMP", "DCGM_FI_DEV_GPU_MAX_OP_TEMP_CELSIUS")
_m("gpu.mem_temp_max_op", "C", G, "none", "gpu", "Highest HBM temperature allowed before slowdown.",
   "DCGM_FI_DEV_MEM_MAX_OP_TEMP", "DCGM_FI_DEV_MEMORY_MAX_OP_TEMP_CELSIUS")
_m("gpu.power", "W", G, "none", "gpu", "Board power draw, averaged by the driver.",
   "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS")
_m("gpu.power_instant", "W", G, "none", "gpu", "Board power draw, instantaneous reading.",
   "DCGM_FI_DEV_POWER_USAGE_INSTANT", "DCGM_FI_DEV_BOARD_POWER_RAW_WATTS")
_m("gpu.power_limit", "W", G, "none", "gpu", "Power cap requested for the board.",
   "DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS")
_m("gpu.power_limit_enforced", "W", G, "down", "gpu", "Power cap actually enforced after all limiters.",
   "DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS")
_m("gpu.energy", "J", C, "none", "gpu", "Energy used since the driver loaded.",
   "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", scale=1e-3,
   alias_scales=[("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", 1.0)])

# --- gpu: throttling --------------------------------------------------------------------
_m("gpu.clock_event_reasons", "bitmask", G, "none", "gpu",
   "Bitmask of why clocks are below maximum (idle, power cap, HW/SW thermal, power brake, ...).",
   "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
_m("gpu.clock_events", "count", C, "up", "gpu", "Clock-event transitions seen by dcgm-exporter.",
   "DCGM_EXP_CLOCK_EVENTS_COUNT")
_m("gpu.throttle.power_ns", "ns", C, "up", "gpu", "Time clocks were held down by the power limit.",
   "DCGM_FI_DEV_POWER_VIOLATION")
_m("gpu.throttle.thermal_ns", "ns", C, "up", "gpu", "Time clocks were held down by temperature.",
   "DCGM_FI_DEV_THERMAL_VIOLATION")
_m("gpu.throttle.sync_boost_ns", "ns", C, "up", "gpu", "Time clocks were held to the slowest GPU of a sync-boost group.",
   "DCGM_FI_DEV_SYNC_BOOST_VIOLATION")
_m("gpu.throttle.board_limit_ns", "ns", C, "up", "gpu", "Time clocks were held down by a board limit.",
   "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION")
_m("gpu.throttle.low_util_ns", "ns", C, "none", "gpu", "Time clocks were lowered because the GPU was barely used.",
   "DCGM_FI_DEV_LOW_UTIL_VIOLATION")
_m("gpu.throttle.reliability_ns", "ns", C, "up", "gpu", "Time clocks were held down for reliability reasons.",
   "DCGM_FI_DEV_RELIABILITY_VIOLATION")
_m("gpu.clock_event.sw_power_cap_ns", "ns", C, "up", "gpu", "Time spent under software power capping.",
   "DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP_NS")
_m("gpu.clock_event.sw_thermal_ns", "ns", C, "up", "gpu", "Time spent under software thermal slowdown.",
   "DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN_NS")
_m("gpu.clock_event.hw_thermal_ns", "ns", C, "up", "gpu", "Time spent in hardware thermal slowdown (clocks halved or worse).",
   "DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN_NS")
_m("gpu.clock_event.hw_power_brake_ns", "ns", C, "up", "gpu", "Time spent with the external power brake asserted.",
   "DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN_NS")

# --- gpu: errors, memory health -------------------------------------------------------
_m("gpu.xid", "code", G, "none", "gpu", "Code of the most recent XID reported for the GPU (0 if none).",
   "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR")
_m("gpu.xid_count", "count", C, "up", "gpu", "XIDs reported in the exporter's window.", "DCGM_EXP_XID_ERRORS_COUNT")
_m("gpu.health_status", "code", G, "up", "gpu", "DCGM health verdict for the GPU (higher is worse).",
   "DCGM_EXP_GPU_HEALTH_STATUS")
_m("gpu.recovery_action", "code", G, "up", "gpu",
   "Driver-recommended recovery (0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset).",
   "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", "DCGM_FI_DEV_GPU_RECOVERY_ACTION")
_m("gpu.ecc.sbe_volatile", "count", C, "up", "gpu", "Corrected single-bit ECC errors since the last driver load.",
   "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL")
_m("gpu.ecc.dbe_volatile", "count", C, "up", "gpu", "Uncorrectable double-bit ECC errors since the last driver load.",
   "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
_m("gpu.ecc.sbe_aggregate", "count", C, "up", "gpu", "Single-bit ECC errors over the board's lifetime.",
   "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL")
_m("gpu.ecc.dbe_aggregate", "count", C, "up", "gpu", "Double-bit ECC errors over the board's lifetime.",
   "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL")
_m("gpu.ecc.dram_sbe_volatile", "count", C, "up", "gpu", "Corrected ECC errors in device memory (HBM) since driver load.",
   "DCGM_FI_DEV_ECC_SBE_VOL_DEV")
_m("gpu.ecc.dram_dbe_volatile", "count", C, "up", "gpu", "Uncorrectable ECC errors in device memory (HBM) since driver load.",
   "DCGM_FI_DEV_ECC_DBE_VOL_DEV")
_m("gpu.ecc.sram_sbe_volatile", "count", C, "up", "gpu", "Corrected ECC errors in on-chip SRAM since driver load.",
   "DCGM_FI_DEV_ECC_SBE_VOL_SRM")
_m("gpu.ecc.sram_dbe_volatile", "count", C, "up", "gpu", "Uncorrectable ECC errors in on-chip SRAM since driver load.",
   "DCGM_FI_DEV_ECC_DBE_VOL_SRM")
_m("gpu.ecc.sram_sbe_aggregate", "count", C, "up", "gpu", "Corrected on-chip SRAM ECC errors over the board's lifetime.",
   "DCGM_FI_DEV_ECC_SBE_AGG_SRM")
_m("gpu.ecc.sram_dbe_aggregate", "count", C, "up", "gpu", "Uncorrectable on-chip SRAM ECC errors over the board's lifetime.",
   "DCGM_FI_DEV_ECC_DBE_AGG_SRM")
_m("gpu.ecc.sram_threshold_exceeded", "flag", G, "up", "gpu", "1 once SRAM ECC errors passed the driver's threshold.",
   "DCGM_FI_DEV_THRESHOLD_SRM", "DCGM_FI_DEV_SRAM_EXCEEDED")
_m("gpu.retired_pages.sbe", "count", C, "up", "gpu", "Memory pages retired after repeated single-bit errors (pre-Ampere).",
   "DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL")
_m("gpu.retired_pages.dbe", "count", C, "up", "gpu", "Memory pages retired after a double-bit error (pre-Ampere).",
   "DCGM_FI_DEV_RETIRED_DBE", "DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL")
_m("gpu.retired_pages.pending", "flag", G, "up", "gpu", "1 while a page retirement waits for the next GPU reset.",
   "DCGM_FI_DEV_RETIRED_PENDING", "DCGM_FI_DEV_PAGE_RETIRED_PENDING")
_m("gpu.row_remap.correctable", "count", C, "up", "gpu", "HBM rows replaced by spares because of correctable errors.",
   "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL")
_m("gpu.row_remap.uncorrectable", "count", C, "up", "gpu", "HBM rows replaced by spares because of uncorrectable errors.",
   "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL")
_m("gpu.row_remap.pending", "flag", G, "up", "gpu", "1 while a row remap waits for a GPU reset to take effect.",
   "DCGM_FI_DEV_ROW_REMAP_PENDING")
_m("gpu.row_remap.failed", "flag", G, "up", "gpu", "1 once a row could not be remapped (no spare left); the GPU needs service.",
   "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_FAILED")
_m("gpu.row_remap.banks_avail_low", "count", G, "up", "gpu", "Memory banks with few spare rows left.",
   "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_LOW", "DCGM_FI_DEV_BANK_REMAP_AVAIL_LOW")
_m("gpu.row_remap.banks_avail_none", "count", G, "up", "gpu", "Memory banks with no spare rows left.",
   "DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_NONE", "DCGM_FI_DEV_BANK_REMAP_AVAIL_NONE")
_m("gpu.mem_unrepairable", "flag", G, "up", "gpu", "1 when the driver declares the GPU memory beyond in-field repair.",
   "DCGM_FI_DEV_MEMORY_UNREPAIRABLE_FLAG", "DCGM_FI_DEV_MEMORY_UNREPAIRABLE")
_m("gpu.vgpu_license_status", "code", G, "none", "gpu", "vGPU licence state (irrelevant on bare metal).",
   "DCGM_FI_DEV_VGPU_LICENSE_STATUS")
_m("gpu.fabric_manager_status", "code", G, "none", "gpu", "Fabric Manager state as seen by the GPU.",
   "DCGM_FI_DEV_FABRIC_MANAGER_STATUS")
_m("gpu.fabric_health", "code", G, "up", "gpu", "Fabric health summary (1 healthy, 2 unhealthy, 3 limited capacity).",
   "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY")

# --- gpu: PCIe --------------------------------------------------------------------------
_m("gpu.pcie.replay", "count", C, "up", "gpu", "PCIe packets the GPU link had to resend; rising means a marginal link.",
   "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_PCIE_REPLAY_TOTAL")
_m("gpu.pcie.correctable_errors", "count", C, "up", "gpu", "Correctable PCIe errors on the GPU link.",
   "DCGM_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS", "DCGM_FI_DEV_PCIE_CORRECTABLE_ERROR_TOTAL")
_m("gpu.pcie.link_gen", "count", G, "down", "gpu", "Negotiated PCIe generation; a drop means the link retrained slower.",
   "DCGM_FI_DEV_PCIE_LINK_GEN")
_m("gpu.pcie.link_width", "lanes", G, "down", "gpu", "Negotiated PCIe lane count; fewer lanes means a degraded link.",
   "DCGM_FI_DEV_PCIE_LINK_WIDTH")
_m("gpu.pcie.tx_rate", "bytes/s", G, "none", "gpu", "PCIe bytes sent by the GPU per second, headers included.",
   "DCGM_FI_PROF_PCIE_TX_BYTES")
_m("gpu.pcie.rx_rate", "bytes/s", G, "none", "gpu", "PCIe bytes received by the GPU per second, headers included.",
   "DCGM_FI_PROF_PCIE_RX_BYTES")

# --- nvlink (GPU side) --------------------------------------------------------------------
_m("nvlink.crc_flit_errors", "count", C, "up", "gpu", "Flow-control flits with CRC errors, all links of the GPU.",
   "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_TOTAL")
_m("nvlink.crc_data_errors", "count", C, "up", "gpu", "Data flits with CRC errors, all links of the GPU.",
   "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_TOTAL")
_m("nvlink.replay_errors", "count", C, "up", "gpu", "NVLink retransmissions, all links of the GPU.",
   "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_TOTAL")
_m("nvlink.recovery_errors", "count", C, "up", "gpu", "NVLink link recoveries (retraining), all links of the GPU.",
   "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_TOTAL")
_m("nvlink.dl_crc_errors", "count", C, "up", "gpu", "Data-link-layer CRC errors reported by the newer NVLink counter set.",
   "DCGM_FI_DEV_NVLINK_ERROR_DL_CRC", "DCGM_FI_DEV_NVLINK_CRC_ERROR_TOTAL")
_m("nvlink.dl_recovery_errors", "count", C, "up", "gpu", "Data-link-layer recoveries reported by the newer NVLink counter set.",
   "DCGM_FI_DEV_NVLINK_ERROR_DL_RECOVERY", "DCGM_FI_DEV_NVLINK_RECOVERY_TOTAL")
_m("nvlink.dl_replay_errors", "count", C, "up", "gpu", "Data-link-layer replays reported by the newer NVLink counter set.",
   "DCGM_FI_DEV_NVLINK_ERROR_DL_REPLAY", "DCGM_FI_DEV_NVLINK_REPLAY_TOTAL")
_m("nvlink.last_error", "code", G, "none", "gpu", "Most recent NVLink error information code for the GPU.",
   "DCGM_FI_DEV_GPU_NVLINK_ERRORS", "DCGM_FI_DEV_NVLINK_ERROR")
_m("nvlink.bandwidth", "count", C, "none", "gpu",
   "NVLink traffic counter summed over links; DCGM gives no unit, so compare rates, not absolutes.",
   "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL")
_m("nvlink.bandwidth_l0", "count", C, "none", "gpu",
   "Traffic counter of NVLink lane 0 only (offered in dcgm-exporter's default list); prefer nvlink.bandwidth.",
   "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0")
_m("nvlink.tx_bandwidth", "count", C, "none", "gpu", "NVLink transmit traffic counter summed over links (unitless, like nvlink.bandwidth).",
   "DCGM_FI_DEV_NVLINK_TX_BANDWIDTH_TOTAL", "DCGM_FI_DEV_NVLINK_TX_THROUGHPUT_TOTAL")
_m("nvlink.rx_bandwidth", "count", C, "none", "gpu", "NVLink receive traffic counter summed over links (unitless, like nvlink.bandwidth).",
   "DCGM_FI_DEV_NVLINK_RX_BANDWIDTH_TOTAL", "DCGM_FI_DEV_NVLINK_RX_THROUGHPUT_TOTAL")
_m("nvlink.tx_rate", "bytes/s", G, "none", "gpu", "NVLink bytes sent per second (profiling metric).", "DCGM_FI_PROF_NVLINK_TX_BYTES")
_m("nvlink.rx_rate", "bytes/s", G, "none", "gpu", "NVLink bytes received per second (profiling metric).", "DCGM_FI_PROF_NVLINK_RX_BYTES")
_m("nvlink.tx_bytes", "bytes", C, "none", "gpu", "NVLink bytes sent.",
   "DCGM_FI_DEV_NVLINK_COUNT_TX_BYTES", "DCGM_FI_DEV_NVLINK_TX_BYTES_TOTAL")
_m("nvlink.rx_bytes", "bytes", C, "none", "gpu", "NVLink bytes received.",
   "DCGM_FI_DEV_NVLINK_COUNT_RX_BYTES", "DCGM_FI_DEV_NVLINK_RX_BYTES_TOTAL")
_m("nvlink.rx_errors", "count", C, "up", "gpu", "NVLink packets received with errors.",
   "DCGM_FI_DEV_NVLINK_COUNT_RX_ERRORS", "DCGM_FI_DEV_NVLINK_RX_ERROR_TOTAL")
_m("nvlink.rx_symbol_errors", "count", C, "up", "gpu", "Physical-layer symbol errors on received NVLink traffic.",
   "DCGM_FI_DEV_NVLINK_COUNT_RX_SYMBOL_ERRORS", "DCGM_FI_DEV_NVLINK_RX_SYMBOL_ERROR_TOTAL")
_m("nvlink.symbol_ber", "ratio", G, "up", "gpu", "Raw NVLink symbol bit-error rate.",
   "DCGM_FI_DEV_NVLINK_COUNT_SYMBOL_BER_FLOAT", "DCGM_FI_DEV_NVLINK_SYMBOL_BER_RATIO")
_m("nvlink.effective_ber", "ratio", G, "up", "gpu", "NVLink bit-error rate left after forward error correction.",
   "DCGM_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER_FLOAT", "DCGM_FI_DEV_NVLINK_EFFECTIVE_BER_RATIO")
_m("nvlink.effective_errors", "count", C, "up", "gpu", "NVLink errors not fixed by forward error correction.",
   "DCGM_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS", "DCGM_FI_DEV_NVLINK_EFFECTIVE_ERROR_TOTAL")
_m("nvlink.ecc_errors", "count", C, "up", "gpu", "ECC errors on NVLink data, all links.",
   "DCGM_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_ECC_ERROR_TOTAL")
_m("nvlink.link_integrity_errors", "count", C, "up", "gpu", "Times local physical errors on a link passed the integrity threshold.",
   "DCGM_FI_DEV_NVLINK_COUNT_LOCAL_LINK_INTEGRITY_ERRORS", "DCGM_FI_DEV_NVLINK_INTEGRITY_ERROR_TOTAL")
_m("nvlink.tx_discards", "count", C, "up", "gpu", "NVLink packets dropped on transmit.",
   "DCGM_FI_DEV_NVLINK_COUNT_TX_DISCARDS", "DCGM_FI_DEV_NVLINK_TX_DISCARD_TOTAL")
_m("nvlink.rx_dropped", "count", C, "up", "gpu", "NVLink packets dropped on receive for lack of buffer.",
   "DCGM_FI_DEV_NVLINK_COUNT_RX_BUFFER_OVERRUN_ERRORS", "DCGM_FI_DEV_NVLINK_RX_PACKET_DROPPED_TOTAL")
_m("nvlink.recovery_events", "count", C, "up", "gpu", "Times a link left the up state for recovery, whatever the outcome.",
   "DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS", "DCGM_FI_DEV_NVLINK_RECOVERY_EVENT_TOTAL")
_m("nvlink.recovery_successful", "count", C, "up", "gpu", "Link recoveries that brought the link back up.",
   "DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS", "DCGM_FI_DEV_NVLINK_RECOVERY_SUCCESSFUL_TOTAL")
_m("nvlink.recovery_failed", "count", C, "up", "gpu", "Link recoveries that failed and left the link down.",
   "DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS", "DCGM_FI_DEV_NVLINK_RECOVERY_FAILED_TOTAL")
_m("nvlink.link_down", "count", C, "up", "gpu", "Physical NVLink link-down events.",
   "DCGM_FI_DEV_NVLINK_PPCNT_PHYSICAL_LINK_DOWN_COUNTER", "DCGM_FI_DEV_NVLINK_PPCNT_PHYSICAL_LINK_DOWN_TOTAL")
_m("nvlink.tx_wait", "ticks", C, "up", "gpu", "Ticks the NVLink port had data but no credits to send (congestion).",
   "DCGM_FI_DEV_NVLINK_PPCNT_IBPC_PORT_XMIT_WAIT", "DCGM_FI_DEV_NVLINK_PPCNT_IBPC_TX_WAIT_TOTAL")
_m("nvlink.link_state", "code", G, "none", "gpu", "NVLink state as reported by NVML for a link.",
   "DCGM_FI_DEV_NVLINK_GET_STATE", "DCGM_FI_DEV_NVLINK_LINK_STATUS")
_m("nvlink.p2p_status", "code", G, "none", "gpu", "Peer-to-peer NVLink status reported by dcgm-exporter.",
   "DCGM_EXP_P2P_STATUS", "DCGM_FI_DEV_P2P_NVLINK_STATUS", "DCGM_FI_DEV_NVLINK_P2P_STATUS")

# --- nvswitch -----------------------------------------------------------------------------
_m("nvswitch.temp", "C", G, "up", "nvswitch", "NVSwitch die temperature.",
   "DCGM_FI_DEV_NVSWITCH_TEMPERATURE_CURRENT", "DCGM_FI_DEV_NVSWITCH_TEMP_CELSIUS")
_m("nvswitch.temp_slowdown", "C", G, "none", "nvswitch", "NVSwitch slowdown temperature threshold.",
   "DCGM_FI_DEV_NVSWITCH_TEMPERATURE_LIMIT_SLOWDOWN", "DCGM_FI_DEV_NVSWITCH_TEMP_SLOWDOWN_CELSIUS")
_m("nvswitch.temp_shutdown", "C", G, "none", "nvswitch", "NVSwitch shutdown temperature threshold.",
   "DCGM_FI_DEV_NVSWITCH_TEMPERATURE_LIMIT_SHUTDOWN", "DCGM_FI_DEV_NVSWITCH_TEMP_SHUTDOWN_CELSIUS")
_m("nvswitch.fatal_error", "code", G, "none", "nvswitch", "Last fatal SXid reported by the switch (0 if none).",
   "DCGM_FI_DEV_NVSWITCH_FATAL_ERRORS", "DCGM_FI_DEV_SXID_FATAL_ERROR")
_m("nvswitch.nonfatal_error", "code", G, "none", "nvswitch", "Last non-fatal SXid reported by the switch (0 if none).",
   "DCGM_FI_DEV_NVSWITCH_NON_FATAL_ERRORS", "DCGM_FI_DEV_SXID_NON_FATAL_ERROR")
_m("nvswitch.link_fatal_errors", "count", C, "up", "nvswitch", "Fatal errors on switch NVLink ports.",
   "DCGM_FI_DEV_NVSWITCH_LINK_FATAL_ERRORS")
_m("nvswitch.link_nonfatal_errors", "count", C, "up", "nvswitch", "Non-fatal errors on switch NVLink ports.",
   "DCGM_FI_DEV_NVSWITCH_LINK_NON_FATAL_ERRORS")
_m("nvswitch.link_replay_errors", "count", C, "up", "nvswitch", "Retransmissions on switch NVLink ports.",
   "DCGM_FI_DEV_NVSWITCH_LINK_REPLAY_ERRORS", "DCGM_FI_DEV_NVSWITCH_LINK_REPLAY_ERROR_TOTAL")
_m("nvswitch.link_recovery_errors", "count", C, "up", "nvswitch", "Link recoveries on switch NVLink ports.",
   "DCGM_FI_DEV_NVSWITCH_LINK_RECOVERY_ERRORS", "DCGM_FI_DEV_NVSWITCH_LINK_RECOVERY_ERROR_TOTAL")
_m("nvswitch.link_flit_errors", "count", C, "up", "nvswitch", "Flit errors on switch NVLink ports.",
   "DCGM_FI_DEV_NVSWITCH_LINK_FLIT_ERRORS", "DCGM_FI_DEV_NVSWITCH_LINK_FLIT_ERROR_TOTAL")
_m("nvswitch.link_crc_errors", "count", C, "up", "nvswitch", "Lane CRC errors on switch NVLink ports.",
   "DCGM_FI_DEV_NVSWITCH_LINK_CRC_ERRORS", "DCGM_FI_DEV_NVSWITCH_LINK_CRC_ERROR_TOTAL")
_m("nvswitch.link_ecc_errors", "count", C, "up", "nvswitch", "Lane ECC errors on switch NVLink ports.",
   "DCGM_FI_DEV_NVSWITCH_LINK_ECC_ERRORS", "DCGM_FI_DEV_NVSWITCH_LINK_ECC_ERROR_TOTAL")
_m("nvswitch.link_state", "code", G, "none", "nvswitch", "Switch port link state (-1 unknown, 0 off, 1 safe, 2 active, 3 error).",
   "DCGM_FI_DEV_NVSWITCH_LINK_STATUS")
_m("nvswitch.tx_throughput", "count", C, "none", "nvswitch", "Switch-wide transmit traffic counter.",
   "DCGM_FI_DEV_NVSWITCH_THROUGHPUT_TX")
_m("nvswitch.rx_throughput", "count", C, "none", "nvswitch", "Switch-wide receive traffic counter.",
   "DCGM_FI_DEV_NVSWITCH_THROUGHPUT_RX")
_m("nvswitch.power_vdd", "W", G, "none", "nvswitch", "Power on the switch core (VDD) rail.",
   "DCGM_FI_DEV_NVSWITCH_POWER_VDD", "DCGM_FI_DEV_NVSWITCH_POWER_VDD_WATTS")
_m("nvswitch.power_dvdd", "W", G, "none", "nvswitch", "Power on the switch DVDD rail.",
   "DCGM_FI_DEV_NVSWITCH_POWER_DVDD", "DCGM_FI_DEV_NVSWITCH_POWER_DVDD_WATTS")
_m("nvswitch.power_hvdd", "W", G, "none", "nvswitch", "Power on the switch HVDD rail.",
   "DCGM_FI_DEV_NVSWITCH_POWER_HVDD", "DCGM_FI_DEV_NVSWITCH_POWER_HVDD_WATTS")
_m("nvswitch.voltage", "mV", G, "none", "nvswitch", "Switch supply voltage.", "DCGM_FI_DEV_NVSWITCH_VOLTAGE_MVOLT")
_m("nvswitch.reset_required", "flag", G, "up", "nvswitch", "1 when the switch must be reset before it is usable again.",
   "DCGM_FI_DEV_NVSWITCH_RESET_REQUIRED")

# --- network: NIC physical port (mlx5 ethtool) ---------------------------------------------
_m("net.rx_bytes", "bytes", C, "none", "nic", "Bytes received on the wire, RDMA included.", *_ethtool("rx_bytes_phy"))
_m("net.tx_bytes", "bytes", C, "none", "nic", "Bytes sent on the wire, RDMA included.", *_ethtool("tx_bytes_phy"))
_m("net.rx_packets", "count", C, "none", "nic", "Packets received on the wire.", *_ethtool("rx_packets_phy"))
_m("net.tx_packets", "count", C, "none", "nic", "Packets sent on the wire.", *_ethtool("tx_packets_phy"))
_m("net.rx_bits", "bits", C, "none", "nic", "Bits received on the wire; denominator for bit-error rates.", *_ethtool("rx_bits_phy"))
_m("net.symbol_errors", "count", C, "up", "nic", "Physical coding (symbol) errors on received traffic.", *_ethtool("rx_symbol_err_phy"))
_m("net.fec_corrected", "bits", C, "up", "nic", "Bits repaired by FEC; its rate over net.rx_bits is the pre-FEC BER of the optics.",
   *_ethtool("rx_corrected_bits_phy"))
_m("net.fec_uncorrected", "count", C, "up", "nic", "Symbol errors FEC could not repair; these become lost packets.",
   *_ethtool("rx_pcs_symbol_err_phy"))
_m("net.crc_errors", "count", C, "up", "nic", "Frames received with a bad checksum.", *_ethtool("rx_crc_errors_phy"))
_m("net.link_down", "count", C, "up", "nic", "Times the port's link went down; repeated flaps point at cable or transceiver.",
   *_ethtool("link_down_events_phy"))
_m("net.rx_discards", "count", C, "up", "nic", "Received packets dropped for lack of NIC buffer.", *_ethtool("rx_discards_phy"))
_m("net.tx_discards", "count", C, "up", "nic", "Packets dropped before transmission (link down, pause, blocking).", *_ethtool("tx_discards_phy"))
_m("net.tx_errors", "count", C, "up", "nic", "Transmit errors on the physical port.", *_ethtool("tx_errors_phy"))
_m("net.rx_pause", "count", C, "up", "nic", "Pause frames received: the network is asking us to slow down.", *_ethtool("rx_pause_ctrl_phy"))
_m("net.tx_pause", "count", C, "up", "nic", "Pause frames sent: this NIC cannot keep up with incoming traffic.", *_ethtool("tx_pause_ctrl_phy"))
_m("net.pause_storm_warnings", "count", C, "up", "nic", "Times the NIC had been sending pause for suspiciously long.",
   *_ethtool("tx_pause_storm_warning_events"))
_m("net.pause_storm_errors", "count", C, "up", "nic", "Times the pause-storm watchdog stopped pause transmission.",
   *_ethtool("tx_pause_storm_error_events"))
_m("net.rx_buffer_almost_full", "count", C, "up", "nic", "Times the port receive buffer passed its high-water mark.",
   *_ethtool("rx_buffer_passed_thres_phy"))
_m("net.rx_out_of_buffer", "count", C, "up", "nic", "Ethernet receive drops because no software buffer was posted.",
   *_ethtool("rx_out_of_buffer"))
_m("net.module_high_temp", "count", C, "up", "nic", "Transceiver over-temperature events.", *_ethtool("module_high_temp"))
_m("net.pci_signal_integrity_rx", "count", C, "up", "nic", "PCIe link recoveries seen by the NIC on its receive side.",
   *_ethtool("rx_pci_signal_integrity"))
_m("net.pci_signal_integrity_tx", "count", C, "up", "nic", "PCIe link recoveries seen by the NIC on its transmit side.",
   *_ethtool("tx_pci_signal_integrity"))
_m("net.pci_buffer_overflow", "count", C, "up", "nic", "Packets dropped because PCIe could not drain the NIC fast enough.",
   *_ethtool("outbound_pci_buffer_overflow"))
_m("net.nic_temp", "C", G, "up", "nic", "ConnectX device temperature.",
   "DCGM_FI_DEV_CONNECTX_DEVICE_TEMPERATURE", "DCGM_FI_DEV_CONNECTX_TEMP_CELSIUS")
_m("net.nic_health", "code", G, "up", "nic", "ConnectX health state reported through DCGM.", "DCGM_FI_DEV_CONNECTX_HEALTH")

# --- network: kernel netdev view --------------------------------------------------------------
_m("net.if_rx_bytes", "bytes", C, "none", "nic", "Bytes received by the kernel interface; RDMA traffic bypasses it.",
   "node_network_receive_bytes_total", *_ethtool("rx_bytes"))
_m("net.if_tx_bytes", "bytes", C, "none", "nic", "Bytes sent by the kernel interface; RDMA traffic bypasses it.",
   "node_network_transmit_bytes_total", *_ethtool("tx_bytes"))
_m("net.if_rx_errors", "count", C, "up", "nic", "Receive errors counted by the kernel interface.", "node_network_receive_errs_total")
_m("net.if_tx_errors", "count", C, "up", "nic", "Transmit errors counted by the kernel interface.", "node_network_transmit_errs_total")
_m("net.if_rx_drops", "count", C, "up", "nic", "Received packets the kernel interface dropped.", "node_network_receive_drop_total")
_m("net.if_tx_drops", "count", C, "up", "nic", "Outgoing packets the kernel interface dropped.", "node_network_transmit_drop_total")
_m("net.carrier_changes", "count", C, "up", "nic", "Carrier up/down transitions seen by the kernel.", "node_network_carrier_changes_total")
_m("net.link_up", "flag", G, "down", "nic", "1 while the interface is operationally up.", "node_network_up")
_m("net.link_speed", "bytes/s", G, "down", "nic", "Negotiated interface speed.", "node_network_speed_bytes")
_m("net.mtu", "bytes", G, "none", "nic", "Interface MTU; a mismatch across the fabric causes drops.", "node_network_mtu_bytes")

# --- network: RoCE transport and congestion (RDMA hw_counters) ------------------------------------
_m("net.cnp_sent", "count", C, "up", "nic", "Congestion notification packets we sent after seeing ECN marks.",
   "np_cnp_sent", "node_infiniband_np_cnp_packets_sent_total")
_m("net.cnp_handled", "count", C, "up", "nic", "Congestion notifications we acted on by slowing our senders.",
   "rp_cnp_handled", "node_infiniband_rp_cnp_packets_handled_total")
_m("net.cnp_ignored", "count", C, "up", "nic", "Congestion notifications received but ignored.",
   "rp_cnp_ignored", "node_infiniband_rp_cnp_ignored_packets_received_total")
_m("net.ecn_marked", "count", C, "up", "nic", "RoCE packets received with the ECN congestion mark set.",
   "np_ecn_marked_roce_packets", "node_infiniband_np_ecn_marked_roce_packets_received_total")
_m("net.out_of_sequence", "count", C, "up", "nic", "RoCE packets received out of order, usually after a loss.",
   "out_of_sequence", "node_infiniband_out_of_sequence_packets_received_total")
_m("net.packet_seq_errors", "count", C, "up", "nic", "Sequence-error NAKs received.",
   "packet_seq_err", "node_infiniband_packet_sequence_errors_total")
_m("net.implied_nak_seq_errors", "count", C, "up", "nic", "Sequence errors inferred from responses (implied NAKs).",
   "implied_nak_seq_err", "node_infiniband_implied_nak_seq_errors_total")
_m("net.local_ack_timeouts", "count", C, "up", "nic", "Times our ACK timer expired and we had to retransmit.",
   "local_ack_timeout_err", "node_infiniband_local_ack_timeout_errors_total")
_m("net.rnr_nak_retries", "count", C, "up", "nic", "Receiver-not-ready NAKs received.",
   "rnr_nak_retry_err", "node_infiniband_rnr_nak_retry_packets_received_total")
_m("net.rdma_out_of_buffer", "count", C, "up", "nic", "RDMA receive drops because no receive work request was posted.",
   "out_of_buffer", "node_infiniband_out_of_buffer_drops_total")
_m("net.duplicate_requests", "count", C, "up", "nic", "Duplicate requests received (the peer retransmitted).",
   "duplicate_request", "node_infiniband_duplicate_requests_packets_total")
_m("net.adp_retrans", "count", C, "up", "nic", "Adaptive retransmissions by the RoCE transport.",
   "roce_adp_retrans", "node_infiniband_roce_adp_retransmits_total")
_m("net.adp_retrans_timeouts", "count", C, "up", "nic", "Timeouts during adaptive retransmission.",
   "roce_adp_retrans_to", "node_infiniband_roce_adp_retransmits_timeout_total")
_m("net.req_cqe_errors", "count", C, "up", "nic", "Work completions with error on the requester side.",
   "req_cqe_error", "node_infiniband_req_cqes_errors_total")
_m("net.resp_cqe_errors", "count", C, "up", "nic", "Work completions with error on the responder side.",
   "resp_cqe_error", "node_infiniband_resp_cqes_errors_total")
_m("net.req_remote_access_errors", "count", C, "up", "nic", "Remote access errors seen by the requester.",
   "req_remote_access_errors", "node_infiniband_req_remote_access_errors_total")
_m("net.resp_remote_access_errors", "count", C, "up", "nic", "Remote access errors seen by the responder.",
   "resp_remote_access_errors", "node_infiniband_resp_remote_access_errors_total")
_m("net.req_cqe_flush_errors", "count", C, "up", "nic", "Requester work completions flushed because the queue pair went to error.",
   "req_cqe_flush_error", "node_infiniband_req_cqes_flush_errors_total")
_m("net.resp_cqe_flush_errors", "count", C, "up", "nic", "Responder work completions flushed because the queue pair went to error.",
   "resp_cqe_flush_error", "node_infiniband_resp_cqes_flush_errors_total")
_m("net.req_remote_invalid_requests", "count", C, "up", "nic", "Requests the remote side rejected as invalid.",
   "req_remote_invalid_request", "node_infiniband_req_remote_invalid_request_errors_total")
_m("net.resp_local_length_errors", "count", C, "up", "nic", "Incoming messages longer than the posted receive buffer.",
   "resp_local_length_error", "node_infiniband_resp_local_length_errors_total")
_m("net.slow_restart", "count", C, "up", "nic", "Times RoCE slow-restart was used after repeated timeouts.",
   "roce_slow_restart", "node_infiniband_roce_slow_restart_used_total")
_m("net.slow_restart_cnps", "count", C, "up", "nic", "Congestion notifications sent during RoCE slow-restart.",
   "roce_slow_restart_cnps", "node_infiniband_roce_slow_restart_cnps_total")
_m("net.slow_restart_trans", "count", C, "up", "nic", "Transitions into RoCE slow-restart state.",
   "roce_slow_restart_trans", "node_infiniband_roce_slow_restart_total")
_m("net.icrc_errors", "count", C, "up", "nic", "RoCE packets received with a bad invariant CRC.",
   "rx_icrc_encapsulated", "node_infiniband_rx_icrc_encapsulated_errors_total")

# --- network: IBTA port counters -------------------------------------------------------------
_m("ib.symbol_errors", "count", C, "up", "nic", "Minor coding errors on the physical lanes of the port.",
   "SymbolErrorCounter", "symbol_error", "node_infiniband_symbol_error_total")
_m("ib.link_error_recovery", "count", C, "up", "nic", "Times the link retrained successfully after an error.",
   "LinkErrorRecoveryCounter", "link_error_recovery", "node_infiniband_link_error_recovery_total")
_m("ib.link_downed", "count", C, "up", "nic", "Times the link failed to recover and went down.",
   "LinkDownedCounter", "link_downed", "node_infiniband_link_downed_total")
_m("ib.port_rcv_errors", "count", C, "up", "nic", "Packets received with errors.",
   "PortRcvErrors", "port_rcv_errors", "node_infiniband_port_errors_received_total")
_m("ib.port_rcv_remote_physical_errors", "count", C, "up", "nic", "Packets received already marked bad upstream.",
   "PortRcvRemotePhysicalErrors", "port_rcv_remote_physical_errors",
   "node_infiniband_port_receive_remote_physical_errors_total")
_m("ib.port_rcv_switch_relay_errors", "count", C, "up", "nic", "Packets a switch port could not forward.",
   "PortRcvSwitchRelayErrors", "port_rcv_switch_relay_errors", "node_infiniband_port_receive_switch_relay_errors_total")
_m("ib.port_xmit_discards", "count", C, "up", "nic", "Outbound packets dropped (port down or congested).",
   "PortXmitDiscards", "port_xmit_discards", "node_infiniband_port_discards_transmitted_total")
_m("ib.port_rcv_discards", "count", C, "up", "nic", "Inbound packets dropped.",
   "port_rcv_discards", "node_infiniband_port_discards_received_total")
_m("ib.port_xmit_constraint_errors", "count", C, "up", "nic", "Outbound packets not sent because of partition or raw-packet constraints.",
   "PortXmitConstraintErrors", "port_xmit_constraint_errors", "node_infiniband_port_constraint_errors_transmitted_total")
_m("ib.port_rcv_constraint_errors", "count", C, "up", "nic", "Inbound packets discarded because of partition or raw-packet constraints.",
   "PortRcvConstraintErrors", "port_rcv_constraint_errors", "node_infiniband_port_constraint_errors_received_total")
_m("ib.local_link_integrity_errors", "count", C, "up", "nic", "Times local physical errors passed the integrity threshold.",
   "LocalLinkIntegrityErrors", "local_link_integrity_errors", "node_infiniband_local_link_integrity_errors_total")
_m("ib.excessive_buffer_overrun_errors", "count", C, "up", "nic", "Runs of consecutive receive-buffer overruns (flow-control trouble).",
   "ExcessiveBufferOverrunErrors", "excessive_buffer_overrun_errors",
   "node_infiniband_excessive_buffer_overrun_errors_total")
_m("ib.vl15_dropped", "count", C, "up", "nic", "Subnet-management (VL15) packets dropped.",
   "VL15Dropped", "VL15_dropped", "node_infiniband_vl15_dropped_total")
_m("ib.port_xmit_wait", "ticks", C, "up", "nic", "Ticks with data queued but no credits to send; the main congestion signal.",
   "PortXmitWait", "port_xmit_wait", "node_infiniband_port_transmit_wait_total")
_m("ib.port_xmit_data", "bytes", C, "none", "nic", "Data sent by the port (sysfs/perfquery count 4-byte words, hence scale 4).",
   "PortXmitData", "port_xmit_data", "port_xmit_data_64", scale=4.0,
   alias_scales=[("node_infiniband_port_data_transmitted_bytes_total", 1.0),
                 ("node_infiniband_legacy_data_transmitted_bytes_total", 1.0)])
_m("ib.port_rcv_data", "bytes", C, "none", "nic", "Data received by the port (sysfs/perfquery count 4-byte words, hence scale 4).",
   "PortRcvData", "port_rcv_data", "port_rcv_data_64", scale=4.0,
   alias_scales=[("node_infiniband_port_data_received_bytes_total", 1.0),
                 ("node_infiniband_legacy_data_received_bytes_total", 1.0)])
_m("ib.port_xmit_packets", "count", C, "none", "nic", "Packets sent by the port.",
   "PortXmitPkts", "port_xmit_packets", "port_xmit_packets_64",
   "node_infiniband_port_packets_transmitted_total", "node_infiniband_legacy_packets_transmitted_total")
_m("ib.port_rcv_packets", "count", C, "none", "nic", "Packets received by the port.",
   "PortRcvPkts", "port_rcv_packets", "port_rcv_packets_64",
   "node_infiniband_port_packets_received_total", "node_infiniband_legacy_packets_received_total")
_m("ib.unicast_xmit_packets", "count", C, "none", "nic", "Unicast packets sent.",
   "PortUnicastXmitPkts", "unicast_xmit_packets", "port_unicast_xmit_packets",
   "node_infiniband_unicast_packets_transmitted_total", "node_infiniband_legacy_unicast_packets_transmitted_total")
_m("ib.unicast_rcv_packets", "count", C, "none", "nic", "Unicast packets received.",
   "PortUnicastRcvPkts", "unicast_rcv_packets", "port_unicast_rcv_packets",
   "node_infiniband_unicast_packets_received_total", "node_infiniband_legacy_unicast_packets_received_total")
_m("ib.multicast_xmit_packets", "count", C, "none", "nic", "Multicast packets sent.",
   "PortMulticastXmitPkts", "multicast_xmit_packets", "port_multicast_xmit_packets",
   "node_infiniband_multicast_packets_transmitted_total", "node_infiniband_legacy_multicast_packets_transmitted_total")
_m("ib.multicast_rcv_packets", "count", C, "none", "nic", "Multicast packets received.",
   "PortMulticastRcvPkts", "multicast_rcv_packets", "port_multicast_rcv_packets",
   "node_infiniband_multicast_packets_received_total", "node_infiniband_legacy_multicast_packets_received_total")
_m("ib.port_state", "code", G, "down", "nic", "Logical port state (4 = active).", "node_infiniband_state_id")
_m("ib.phys_state", "code", G, "down", "nic", "Physical port state (5 = link up).", "node_infiniband_physical_state_id")
_m("ib.rate", "bytes/s", G, "down", "nic", "Negotiated port rate; a drop means the link came up narrower or slower.",
   "node_infiniband_rate_bytes_per_second")

# --- storage ------------------------------------------------------------------------------------
_m("storage.read_bytes", "bytes", C, "none", "disk", "Bytes read from the block device.", "node_disk_read_bytes_total")
_m("storage.write_bytes", "bytes", C, "none", "disk", "Bytes written to the block device.", "node_disk_written_bytes_total")
_m("storage.reads", "count", C, "none", "disk", "Read requests completed.", "node_disk_reads_completed_total")
_m("storage.writes", "count", C, "none", "disk", "Write requests completed.", "node_disk_writes_completed_total")
_m("storage.read_time_s", "s", C, "up", "disk", "Time spent on reads; over storage.reads gives read latency.",
   "node_disk_read_time_seconds_total")
_m("storage.write_time_s", "s", C, "up", "disk", "Time spent on writes; over storage.writes gives write latency.",
   "node_disk_write_time_seconds_total")
_m("storage.io_time_s", "s", C, "up", "disk", "Time the device had I/O in flight (its rate is device busy share).",
   "node_disk_io_time_seconds_total")
_m("storage.io_weighted_time_s", "s", C, "up", "disk", "I/O time weighted by queue depth (its rate is average queue length).",
   "node_disk_io_time_weighted_seconds_total")
_m("storage.io_in_progress", "count", G, "up", "disk", "I/O requests currently in flight.", "node_disk_io_now")
_m("storage.fs_avail_bytes", "bytes", G, "down", "disk", "Filesystem space available to unprivileged users.",
   "node_filesystem_avail_bytes")
_m("storage.fs_size_bytes", "bytes", G, "none", "disk", "Filesystem size.", "node_filesystem_size_bytes")
_m("storage.nvme_used_bytes", "bytes", G, "none", "disk", "Space in use on an NVMe namespace.", "node_nvme_namespace_used_bytes")
_m("storage.nvme_capacity_bytes", "bytes", G, "none", "disk", "Capacity of an NVMe namespace.",
   "node_nvme_namespace_capacity_bytes", "node_nvme_namespace_size_bytes")
_m("storage.nvme_media_errors", "count", C, "up", "disk", "Unrecovered data-integrity errors reported by the drive.",
   "smartctl_device_media_errors")
_m("storage.nvme_percent_used", "%", G, "up", "disk", "Drive's own estimate of endurance used.", "smartctl_device_percentage_used")
_m("storage.nvme_critical_warning", "bitmask", G, "up", "disk", "NVMe critical-warning bits (spare low, temperature, read-only, ...).",
   "smartctl_device_critical_warning")
_m("storage.checkpoint_write_throughput", "bytes/s", G, "down", "job", "Write rate achieved by the job's last checkpoint.")
_m("storage.checkpoint_duration_s", "s", G, "up", "job", "Wall time of the job's last checkpoint save.")
_m("storage.fs_op_latency_s", "s", G, "up", "", "Latency of metadata operations on the shared training filesystem, seen from the host.")

# --- power ------------------------------------------------------------------------------------------
_m("power.psu_input_power", "W", G, "none", "psu", "AC power drawn by a power supply.")
_m("power.psu_output_power", "W", G, "none", "psu", "DC power delivered by a power supply.")
_m("power.psu_input_voltage", "V", G, "none", "psu", "Input voltage at a power supply; sags and swells matter, not the level.")
_m("power.psu_status", "flag", G, "down", "psu", "1 while the power supply reports OK, 0 on fault or lost input.")
_m("power.node_input_power", "W", G, "none", "", "Whole-node power reported by the BMC.", "ipmi_dcmi_power_consumption_watts")
_m("power.sensor_power", "W", G, "none", "", "Power reading of a hwmon sensor (PSU, CPU, board); chip/sensor labels say which.",
   "node_hwmon_power_watt")
_m("power.sensor_power_avg", "W", G, "none", "", "Averaged power reading of a hwmon sensor.", "node_hwmon_power_average_watt")
_m("power.sensor_energy", "J", C, "none", "", "Energy accumulated by a hwmon energy sensor.",
   "node_hwmon_energy_joule_total", "node_hwmon_energy_input_joule_total")
_m("power.rapl_package_energy", "J", C, "none", "cpu", "CPU package energy from RAPL.", "node_rapl_package_joules_total")
_m("power.rapl_dram_energy", "J", C, "none", "cpu", "Host DRAM energy from RAPL.", "node_rapl_dram_joules_total")

# --- cooling ------------------------------------------------------------------------------------------
_m("cooling.fan_rpm", "rpm", G, "down", "fan", "Fan speed; a fan slowing or stopping shows as a drop.",
   "node_hwmon_fan_rpm", "ipmi_fan_speed_rpm")
_m("cooling.fan_alarm", "flag", G, "up", "fan", "1 while the fan controller raises an alarm.", "node_hwmon_fan_alarm")
_m("cooling.inlet_temp", "C", G, "up", "", "Air temperature entering the chassis.")
_m("cooling.outlet_temp", "C", G, "up", "", "Air temperature leaving the chassis.")
_m("cooling.coolant_supply_temp", "C", G, "up", "", "Liquid coolant temperature entering the node.")
_m("cooling.coolant_flow", "l/min", G, "down", "", "Liquid coolant flow through the node.")

# --- host ---------------------------------------------------------------------------------------------
_m("host.cpu_util", "%", G, "none", "cpu", "CPU busy share (all modes except idle and iowait).")
_m("host.cpu_seconds", "s", C, "none", "cpu", "CPU time by mode; the rate of non-idle modes is utilisation.",
   "node_cpu_seconds_total")
_m("host.cpu_temp", "C", G, "up", "cpu", "CPU temperature.", "DCGM_FI_DEV_CPU_TEMP_CURRENT", "DCGM_FI_DEV_CPU_TEMP_CELSIUS")
_m("host.cpu_power", "W", G, "none", "cpu", "CPU power draw (Grace-class CPUs via DCGM).",
   "DCGM_FI_DEV_CPU_POWER_UTIL_CURRENT", "DCGM_FI_DEV_CPU_POWER_WATTS")
_m("host.load1", "count", G, "up", "", "Run-queue load average over 1 minute.", "node_load1")
_m("host.load5", "count", G, "up", "", "Run-queue load average over 5 minutes.", "node_load5")
_m("host.load15", "count", G, "up", "", "Run-queue load average over 15 minutes.", "node_load15")
_m("host.mem_total_bytes", "bytes", G, "down", "", "Usable host RAM.", "node_memory_MemTotal_bytes")
_m("host.mem_available_bytes", "bytes", G, "down", "", "Host RAM still available without swapping.", "node_memory_MemAvailable_bytes")
_m("host.mem_hw_corrupted_bytes", "bytes", G, "up", "", "Host RAM the kernel fenced off after hardware errors.",
   "node_memory_HardwareCorrupted_bytes")
_m("host.oom_kills", "count", C, "up", "", "Processes killed by the kernel out-of-memory killer.", "node_vmstat_oom_kill")
_m("host.boot_time", "s", G, "none", "", "Boot time as a Unix timestamp; a change means the node rebooted.", "node_boot_time_seconds")
_m("host.gpu_count", "count", G, "down", "", "GPUs visible to DCGM; a drop means one fell off the bus.",
   "DCGM_FI_DEV_COUNT", "DCGM_FI_SYSTEM_GPU_QUANTITY")
_m("host.sensor_temp", "C", G, "up", "", "Temperature of a hwmon sensor (board, CPU, NIC, ...); chip/sensor labels say which.",
   "node_hwmon_temp_celsius")
_m("host.thermal_zone_temp", "C", G, "up", "", "Temperature of a kernel thermal zone.", "node_thermal_zone_temp")
_m("host.edac_correctable", "count", C, "up", "", "Corrected host-memory errors per memory controller.",
   "node_edac_correctable_errors_total")
_m("host.edac_uncorrectable", "count", C, "up", "", "Uncorrected host-memory errors per memory controller.",
   "node_edac_uncorrectable_errors_total")
_m("host.edac_csrow_correctable", "count", C, "up", "", "Corrected host-memory errors per chip-select row.",
   "node_edac_csrow_correctable_errors_total")
_m("host.edac_csrow_uncorrectable", "count", C, "up", "", "Uncorrected host-memory errors per chip-select row.",
   "node_edac_csrow_uncorrectable_errors_total")
_m("host.edac_channel_correctable", "count", C, "up", "", "Corrected host-memory errors per memory channel.",
   "node_edac_channel_correctable_errors_total")
_m("host.edac_channel_uncorrectable", "count", C, "up", "", "Uncorrected host-memory errors per memory channel.",
   "node_edac_channel_uncorrectable_errors_total")
_m("host.pressure_cpu_waiting_s", "s", C, "up", "", "Time some task waited for CPU (PSI).", "node_pressure_cpu_waiting_seconds_total")
_m("host.pressure_io_waiting_s", "s", C, "up", "", "Time some task waited on I/O (PSI).", "node_pressure_io_waiting_seconds_total")
_m("host.pressure_io_stalled_s", "s", C, "up", "", "Time all non-idle tasks stalled on I/O (PSI).", "node_pressure_io_stalled_seconds_total")
_m("host.pressure_memory_waiting_s", "s", C, "up", "", "Time some task waited on memory (PSI).",
   "node_pressure_memory_waiting_seconds_total")
_m("host.pressure_memory_stalled_s", "s", C, "up", "", "Time all non-idle tasks stalled on memory (PSI).",
   "node_pressure_memory_stalled_seconds_total")
_m("host.pressure_irq_stalled_s", "s", C, "up", "", "Time lost to interrupt handling (PSI).", "node_pressure_irq_stalled_seconds_total")
_m("host.pcie_link_width", "lanes", G, "down", "", "Current lane count of a PCIe device link; below max means degraded.",
   "node_pcidevice_current_link_width")
_m("host.pcie_link_width_max", "lanes", G, "none", "", "Lane count a PCIe device link is capable of.", "node_pcidevice_max_link_width")
_m("host.pcie_link_speed", "T/s", G, "down", "", "Current transfer rate of a PCIe device link.",
   "node_pcidevice_current_link_transfers_per_second")
_m("host.pcie_link_speed_max", "T/s", G, "none", "", "Transfer rate a PCIe device link is capable of.",
   "node_pcidevice_max_link_transfers_per_second")

# --- job --------------------------------------------------------------------------------------------
_m("job.step_time_s", "s", G, "up", "job", "Wall time of the last training step; stragglers and degradations show as rises.")
_m("job.throughput", "tokens/s", G, "down", "job", "Training throughput of the job.")
_m("job.mfu", "ratio", G, "down", "job", "Model FLOPs utilisation reported by the training loop.")
_m("job.last_progress_age_s", "s", G, "up", "job", "Seconds since the job last completed a step; grows during a hang.")
_m("job.nccl_timeouts", "count", C, "up", "job", "NCCL watchdog timeouts reported by the job.")
_m("job.restarts", "count", C, "up", "job", "Times the job restarted from a checkpoint.")
_m("job.dataloader_wait_s", "s", G, "up", "job", "Time per step spent waiting for input data.")


def _build_index(metrics: Iterable[Metric]) -> tuple[dict[str, Metric], dict[str, Metric]]:
    """Check the definitions and build (catalog, name-or-alias index).

    Raises ValueError naming the metric and the problem, so a bad edit to this
    file fails at import rather than at ingestion time.
    """
    catalog: dict[str, Metric] = {}
    index: dict[str, Metric] = {}
    for m in metrics:
        problems = []
        if not _NAME_RE.match(m.name):
            problems.append("name must be lowercase dotted '<prefix>.<snake_name>'")
        if m.layer not in LAYERS:
            problems.append(f"layer {m.layer!r} not in {LAYERS} (prefix unknown?)")
        elif PREFIX_LAYER.get(m.name.split(".", 1)[0]) != m.layer:
            problems.append(f"prefix does not match layer {m.layer!r}")
        if m.kind not in KINDS:
            problems.append(f"kind {m.kind!r} not in {KINDS}")
        if m.bad not in BAD_DIRECTIONS:
            problems.append(f"bad {m.bad!r} not in {BAD_DIRECTIONS}")
        if m.component not in COMPONENT_KINDS:
            problems.append(f"component {m.component!r} not in {COMPONENT_KINDS}")
        if not m.description.strip() or not m.unit:
            problems.append("unit and description are required")
        if problems:
            raise ValueError(f"metric {m.name!r}: " + "; ".join(problems))
        if m.name in catalog:
            raise ValueError(f"metric {m.name!r} defined twice")
        catalog[m.name] = m
        for key in (m.name, *m.all_aliases):
            other = index.get(key)
            if other is not None and other is not m:
                raise ValueError(f"alias {key!r} maps to both {other.name!r} and {m.name!r}")
            if other is m and key != m.name:
                raise ValueError(f"alias {key!r} listed twice on {m.name!r}")
            index[key] = m
    return catalog, index


CATALOG, _INDEX = _build_index(_DEFS)
del _DEFS


def get(name: str) -> Metric:
    """Metric by canonical name or alias; UnknownMetric if neither."""
    metric = _INDEX.get(name)
    if metric is None:
        raise UnknownMetric(f"unknown metric {name!r}: not a canonical name or known alias in telemetry.catalog")
    return metric


def resolve(alias_or_name: str) -> Metric | None:
    """Metric for a canonical name or source alias (exact, case-sensitive), else None."""
    return _INDEX.get(alias_or_name)


def by_layer(layer: str) -> list[Metric]:
    """Metrics of one layer, in definition order; ValueError for an unknown layer."""
    if layer not in LAYERS:
        raise ValueError(f"unknown layer {layer!r}; expected one of {LAYERS}")
    return [m for m in CATALOG.values() if m.layer == layer]


def is_known(name: str) -> bool:
    """True for a canonical metric name (aliases do not count: use resolve)."""
    return name in CATALOG


# --- user entries -------------------------------------------------------------------------
# Custom metrics and aliases added at run time (telemetry.catalog_store keeps them in the
# store). ``extend`` rebinds CATALOG and the index to the code's definitions plus those
# entries, checked by the same rules; readers always see one whole catalog.

_BUILTIN: dict[str, Metric] = dict(CATALOG)
USER_METRICS: frozenset[str] = frozenset()  # names added by users
USER_ALIASES: dict[str, str] = {}  # alias added by users -> canonical name


def build_extended(metrics: Iterable[Metric], aliases: Iterable[tuple[str, str, float]]):
    """(catalog, index) of the code's metrics plus ``metrics`` and ``aliases`` ((alias,
    canonical, scale), ...); ValueError naming the entry that does not fit."""
    merged = dict(_BUILTIN)
    for m in metrics:
        if m.name in _BUILTIN:
            raise ValueError(f"metric {m.name!r} is already in the catalog")
        merged[m.name] = m
    for alias, target, scale in aliases:
        m = merged.get(target)
        if m is None:
            raise ValueError(f"alias {alias!r}: no metric {target!r} in the catalog")
        merged[target] = replace(m, alias_scales=m.alias_scales + ((alias, float(scale)),))
    return _build_index(merged.values())


def extend(metrics: Iterable[Metric], aliases: Iterable[tuple[str, str, float]]) -> None:
    global CATALOG, _INDEX, USER_METRICS, USER_ALIASES
    metrics, aliases = list(metrics), list(aliases)
    catalog, index = build_extended(metrics, aliases)
    CATALOG, _INDEX = catalog, index
    USER_METRICS = frozenset(m.name for m in metrics)
    USER_ALIASES = {a: t for a, t, _ in aliases}
