"""XID catalog: what each NVIDIA Xid code means and what to do about it.

Used to label ``events`` rows from ``NVRM: Xid`` kernel lines and the
``gpu.xid`` metric, to group interruptions by cause, and to show a reviewer a
one-line meaning and suggested action. Facts follow NVIDIA's Xid catalog
(Ampere and newer); the wording is ours.

``category`` is the subsystem most likely at fault: memory, bus, nvlink,
software, thermal, power, other. ``severity``: critical = the GPU needs a reset,
reboot or service; error = the running job is lost; warning = worth watching,
often a precursor; info = informational or sympathetic to another Xid.
"""

from __future__ import annotations

from dataclasses import dataclass

CATEGORIES = ("memory", "bus", "nvlink", "software", "thermal", "power", "other")
SEVERITIES = ("critical", "error", "warning", "info")


@dataclass(frozen=True)
class Xid:
    code: int
    mnemonic: str
    meaning: str
    category: str
    severity: str
    action: str


# Short actions reused across rows.
_RESTART = "Restart the job; look for a pattern across nodes before blaming hardware."
_RESET = "Drain the node and reset the GPU; escalate if it returns."
_REBOOT = "Drain and reboot the node; RMA the GPU if it recurs."
_SUPPORT = "Drain the node and open a hardware case with the vendor."
_IGNORE = "No action by itself; check for other Xids around it."
_NVL5 = "Follow the NVLink5 error workflow: check link/cable state, reset the GPU, escalate if it recurs."
_ENGINE = "Restart the job; escalate if the engine errors recur."

_ROWS: list[tuple[int, str, str, str, str, str]] = [
    (8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped making progress on a channel.", "software", "error", _RESTART),
    (11, "ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "Push buffer stream was invalid or corrupted.", "software", "error", _RESTART),
    (13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics/compute engine exception, e.g. illegal address or instruction in a kernel.",
     "software", "error", "Restart the job; if it repeats on the same GPU with healthy code, run diagnostics on it."),
    (25, "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "Push buffer stream was invalid or illegal.", "software", "error", _RESTART),
    (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault (MMU fault), usually a bad access by the application.",
     "software", "error", "Restart the job; suspect the application unless it follows the GPU."),
    (32, "ROBUST_CHANNEL_PBDMA_ERROR", "Push buffer stream was invalid or corrupted (PBDMA).", "software", "error", _RESTART),
    (37, "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "Driver firmware hit an unimplemented method.", "software", "info", _IGNORE),
    (38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "Driver firmware watchdog timed out.", "software", "warning", _SUPPORT),
    (39, "ROBUST_CHANNEL_CE0_ERROR", "Copy engine 0 exception.", "other", "error", _ENGINE),
    (40, "ROBUST_CHANNEL_CE1_ERROR", "Copy engine 1 exception.", "other", "error", _ENGINE),
    (41, "ROBUST_CHANNEL_CE2_ERROR", "Copy engine 2 exception.", "other", "error", _ENGINE),
    (43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing a channel; usually the job's own fault.",
     "software", "warning", _IGNORE),
    (44, "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "Engine fault while switching contexts.", "software", "warning", _SUPPORT),
    (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Channels torn down because of an earlier error (often follows a DBE or a killed job).",
     "software", "info", "Look for the Xid that caused it; alone and repeated, restart Fabric Manager."),
    (46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing (timeout).", "software", "critical", _RESET),
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Uncorrectable double-bit ECC error in GPU memory.", "memory", "critical",
     "Drain the node and reset the GPU so the row is remapped; RMA if remapping fails or DBEs repeat."),
    (54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING", "Board is running without its auxiliary power connected.", "power", "critical",
     "Check power cabling and seating."),
    (60, "ROBUST_CHANNEL_SEC2_ERROR", "Video/security processor exception.", "software", "error", _RESTART),
    (61, "PMU_BREAKPOINT", "Internal micro-controller breakpoint or warning (named in the older table; unused on Ampere and newer).", "other", "warning", _SUPPORT),
    (62, "PMU_HALT_ERROR", "Internal micro-controller halted.", "other", "critical", _RESET),
    (63, "INFOROM_DRAM_RETIREMENT_EVENT", "A memory row remap or page retirement was recorded.", "memory", "warning",
     "No action now; a reset applies the remap. Watch the remap counters for a trend."),
    (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "Recording a memory row remap or page retirement failed.", "memory", "critical", _SUPPORT),
    (66, "ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "Driver made an illegal register access.", "software", "warning", _IGNORE),
    (67, "ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "Driver made an illegal access.", "software", "warning", _SUPPORT),
    (68, "ROBUST_CHANNEL_NVDEC0_ERROR", "Video decoder 0 exception.", "other", "error", _ENGINE),
    (69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics engine class error.", "software", "error", _RESTART),
    (70, "ROBUST_CHANNEL_CE3_ERROR", "Copy engine 3 error.", "other", "error", _ENGINE),
    (71, "ROBUST_CHANNEL_CE4_ERROR", "Copy engine 4 error.", "other", "error", _ENGINE),
    (72, "ROBUST_CHANNEL_CE5_ERROR", "Copy engine 5 error.", "other", "error", _ENGINE),
    (74, "NVLINK_ERROR", "NVLink error detected by the GPU.", "nvlink", "critical",
     "Check NVLink counters and Fabric Manager; reset the GPU; escalate if the link keeps failing."),
    (75, "ROBUST_CHANNEL_CE6_ERROR", "Copy engine 6 error.", "other", "error", _ENGINE),
    (76, "ROBUST_CHANNEL_CE7_ERROR", "Copy engine 7 error.", "other", "error", _ENGINE),
    (77, "ROBUST_CHANNEL_CE8_ERROR", "Copy engine 8 error.", "other", "error", _ENGINE),
    (78, "VGPU_START_ERROR", "vGPU failed to start.", "software", "error", "Update driver and firmware."),
    (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU stopped responding on PCIe and is gone from the bus.", "bus",
     "critical", _REBOOT),
    (80, "PBDMA_PUSHBUFFER_CRC_MISMATCH", "Data sent to the GPU arrived corrupted.", "bus", "error", _RESTART),
    (82, "ROBUST_CHANNEL_NVJPG0_ERROR", "JPEG engine 0 error.", "other", "error", _ENGINE),
    (83, "ROBUST_CHANNEL_NVDEC1_ERROR", "Video decoder 1 error.", "other", "error", _ENGINE),
    (84, "ROBUST_CHANNEL_NVDEC2_ERROR", "Video decoder 2 error.", "other", "error", _ENGINE),
    (85, "ROBUST_CHANNEL_CE9_ERROR", "Copy engine 9 error.", "other", "error", _ENGINE),
    (86, "ROBUST_CHANNEL_OFA0_ERROR", "Optical-flow engine 0 exception.", "other", "error", _ENGINE),
    (88, "ROBUST_CHANNEL_NVDEC3_ERROR", "Video decoder 3 error.", "other", "error", _ENGINE),
    (89, "ROBUST_CHANNEL_NVDEC4_ERROR", "Video decoder 4 error.", "other", "error", _ENGINE),
    (92, "EXCESSIVE_SBE_INTERRUPTS", "Single-bit ECC errors are arriving at a high rate.", "memory", "warning",
     "Watch the GPU; a rising SBE rate often comes before DBEs or remaps."),
    (93, "INFOROM_ERASE_LIMIT_EXCEEDED", "InfoROM wear passed its provisioned limit (non-fatal).", "other", "warning", _SUPPORT),
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Memory error contained to the affected application.", "memory", "error",
     "Restart the job; the GPU can keep serving; reset it to apply the remap."),
    (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Memory error that could not be contained; all work on the GPU is suspect.",
     "memory", "critical", _RESET),
    (96, "ROBUST_CHANNEL_NVDEC5_ERROR", "Video decoder 5 error.", "other", "error", _ENGINE),
    (97, "ROBUST_CHANNEL_NVDEC6_ERROR", "Video decoder 6 error.", "other", "error", _ENGINE),
    (98, "ROBUST_CHANNEL_NVDEC7_ERROR", "Video decoder 7 error.", "other", "error", _ENGINE),
    (99, "ROBUST_CHANNEL_NVJPG1_ERROR", "JPEG engine 1 error.", "other", "error", _ENGINE),
    (100, "ROBUST_CHANNEL_NVJPG2_ERROR", "JPEG engine 2 error.", "other", "error", _ENGINE),
    (101, "ROBUST_CHANNEL_NVJPG3_ERROR", "JPEG engine 3 error.", "other", "error", _ENGINE),
    (102, "ROBUST_CHANNEL_NVJPG4_ERROR", "JPEG engine 4 error.", "other", "error", _ENGINE),
    (103, "ROBUST_CHANNEL_NVJPG5_ERROR", "JPEG engine 5 error.", "other", "error", _ENGINE),
    (104, "ROBUST_CHANNEL_NVJPG6_ERROR", "JPEG engine 6 error.", "other", "error", _ENGINE),
    (105, "ROBUST_CHANNEL_NVJPG7_ERROR", "JPEG engine 7 error.", "other", "error", _ENGINE),
    (106, "SMBPBI_TEST_MESSAGE", "Test message sent through the out-of-band management interface.", "other", "info", _IGNORE),
    (107, "SMBPBI_TEST_MESSAGE_SILENT", "Silent out-of-band management test message.", "other", "info", _IGNORE),
    (109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context switch timed out.", "software", "critical", _RESET),
    (110, "SEC_FAULT_ERROR", "Security fault in the GPU.", "other", "critical", _RESET),
    (119, "GSP_RPC_TIMEOUT", "Driver timed out waiting for the GPU System Processor (GSP) to answer.", "other", "critical", _RESET),
    (120, "GSP_ERROR", "GPU System Processor (GSP) reported an error.", "other", "critical", _RESET),
    (121, "C2C_ERROR", "Chip-to-chip (CPU-GPU) link error.", "bus", "warning", _SUPPORT),
    (126, "ROBUST_CHANNEL_CE10_ERROR", "Copy engine 10 error.", "other", "error", _ENGINE),
    (127, "ROBUST_CHANNEL_CE11_ERROR", "Copy engine 11 error.", "other", "error", _ENGINE),
    (128, "ROBUST_CHANNEL_CE12_ERROR", "Copy engine 12 error.", "other", "error", _ENGINE),
    (129, "ROBUST_CHANNEL_CE13_ERROR", "Copy engine 13 error.", "other", "error", _ENGINE),
    (130, "ROBUST_CHANNEL_CE14_ERROR", "Copy engine 14 error.", "other", "error", _ENGINE),
    (131, "ROBUST_CHANNEL_CE15_ERROR", "Copy engine 15 error.", "other", "error", _ENGINE),
    (132, "ROBUST_CHANNEL_CE16_ERROR", "Copy engine 16 error.", "other", "error", _ENGINE),
    (133, "ROBUST_CHANNEL_CE17_ERROR", "Copy engine 17 error.", "other", "error", _ENGINE),
    (134, "ROBUST_CHANNEL_CE18_ERROR", "Copy engine 18 error.", "other", "error", _ENGINE),
    (135, "ROBUST_CHANNEL_CE19_ERROR", "Copy engine 19 error.", "other", "error", _ENGINE),
    (136, "ALI_TRAINING_FAIL", "NVLink link training failed.", "nvlink", "critical",
     "Reset the GPU; investigate link signal integrity (cables, trays) if it repeats."),
    (137, "NVLINK_PRIV_ERR", "NVLink privilege (FLA) error, usually caused by the application.", "nvlink", "warning",
     "Check the application; follow NVIDIA's Xid 137 flow if it repeats."),
    (139, "ROBUST_CHANNEL_OFA1_ERROR", "Optical-flow engine 1 error.", "other", "error", _ENGINE),
    (140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC error that the hardware could not recover.", "memory", "critical", _RESET),
    (141, "ROBUST_CHANNEL_FAST_PATH_ERROR", "CUDA fast-path error.", "software", "warning", _SUPPORT),
    (142, "ROBUST_CHANNEL_NVENC3_ERROR", "Video encoder 3 error.", "other", "error", _SUPPORT),
    (143, "GPU_INIT_ERROR", "GPU failed to initialise.", "other", "critical", _RESET),
    (144, "NVLINK_SAW_ERROR", "NVLink5 error in the SAW unit.", "nvlink", "critical", _NVL5),
    (145, "NVLINK_RLW_ERROR", "NVLink5 error in the RLW unit.", "nvlink", "critical", _NVL5),
    (146, "NVLINK_TLW_ERROR", "NVLink5 error in the TLW unit.", "nvlink", "critical", _NVL5),
    (147, "NVLINK_TREX_ERROR", "NVLink5 error in the TREX unit.", "nvlink", "critical", _NVL5),
    (148, "NVLINK_NVLPW_CTRL_ERROR", "NVLink5 error in the NVLPW control unit.", "nvlink", "critical", _NVL5),
    (149, "NVLINK_NETIR_ERROR", "NVLink5 error in the NETIR unit.", "nvlink", "critical", _NVL5),
    (150, "NVLINK_MSE_ERROR", "NVLink5 error in the MSE unit.", "nvlink", "critical", _NVL5),
    (151, "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "Confidential-computing key rotation failed.", "software", "error", "Restart the VM."),
    (152, "ROBUST_CHANNEL_DLA_SMMU_ERROR", "Deep-learning accelerator SMMU error.", "other", "warning", _SUPPORT),
    (153, "ROBUST_CHANNEL_DLA_TIMEOUT", "Deep-learning accelerator timed out.", "other", "warning", _SUPPORT),
    (154, "GPU_RECOVERY_ACTION_CHANGED", "Driver changed its recommended recovery action for the GPU (see gpu.recovery_action).",
     "other", "info", "Do what the new recovery action says (reset, reboot, drain)."),
    (155, "NVLINK_SW_DEFINED_ERROR", "Software-defined NVLink error.", "nvlink", "critical",
     "Reset the GPU; investigate software and user configuration."),
    (156, "RESOURCE_RETIREMENT_EVENT", "A GPU resource was retired.", "memory", "warning", "Reset the GPU to apply the retirement."),
    (157, "RESOURCE_RETIREMENT_FAILURE", "Retiring a GPU resource failed.", "memory", "critical", _SUPPORT),
    (158, "GPU_FATAL_TIMEOUT", "GPU hit a fatal timeout.", "other", "critical", _RESET),
    (159, "ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "CHI (coherent interconnect) non-data error.", "bus", "error",
     "Check unified-memory use; usually reported alongside another error."),
    (160, "CHANNEL_RETIREMENT_EVENT", "A channel was retired.", "software", "warning", "Investigate the software that owned the channel."),
    (161, "CHANNEL_RETIREMENT_FAILURE", "Retiring a channel failed.", "software", "error", "Investigate the software that owned the channel."),
    (162, "PSHC_REENGAGED", "Power-smoothing circuitry is available again.", "power", "info", _IGNORE),
    (163, "PSHC_DISENGAGED", "Power-smoothing circuitry was disengaged.", "power", "warning",
     "Expect larger power swings on this GPU; check why it disengaged."),
    (164, "PSHC_LOW_LIFETIME", "Power-smoothing circuitry is near the end of its lifetime.", "power", "warning",
     "Plan service for the board."),
    (165, "PSHC_ZERO_LIFETIME", "Power-smoothing circuitry lifetime is used up.", "power", "error", _SUPPORT),
    (166, "NVLINK_SECURE_CRYPTO_ERR", "Encrypted NVLink traffic arrived before the link was set up for encryption.",
     "nvlink", "error", _SUPPORT),
    (167, "PCIE_FATAL_TIMEOUT", "Fatal PCIe timeout.", "bus", "critical", _REBOOT),
    (168, "REDUCED_GPU_MEMORY_CAPACITY", "Errors in the write-protected memory region reduced usable memory.", "memory",
     "critical", _SUPPORT),
    (169, "SEC2_HALT_ERROR", "Security micro-controller halted.", "other", "critical", _RESET),
    (170, "NVLINK_SECURE_OTHER", "Unexpected NVLink interrupt in confidential-computing mode.", "nvlink", "error", _SUPPORT),
    (171, "UNCORRECTABLE_DRAM_ERROR", "Detail for Xid 48: the uncorrectable error was in DRAM (HBM).", "memory", "critical",
     "Handle as Xid 48."),
    (172, "UNCORRECTABLE_SRAM_ERROR", "Detail for Xid 48: the uncorrectable error was in on-chip SRAM.", "memory", "critical",
     "Handle as Xid 48; repeated SRAM errors mean the GPU should be replaced."),
]

# Codes NVIDIA's catalog lists as unused; seeing one means something unexpected.
UNUSED_CODES = frozenset(
    {1, 2, 3, 4, 5, 6, 7, 9, 10, 12, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 26, 27, 28, 29, 30, 33, 34, 35, 36,
     42, 47, 49, 50, 51, 52, 53, 55, 56, 57, 58, 59, 65, 73, 81, 87, 90, 91, 108, 111, 112, 113, 114, 115, 116, 117,
     118, 122, 123, 124, 125, 138}
)


def _build() -> dict[int, Xid]:
    table: dict[int, Xid] = {}
    for code, mnemonic, meaning, category, severity, action in _ROWS:
        if code in table:
            raise ValueError(f"Xid {code} defined twice")
        if category not in CATEGORIES or severity not in SEVERITIES:
            raise ValueError(f"Xid {code}: bad category {category!r} or severity {severity!r}")
        table[code] = Xid(code, mnemonic, meaning, category, severity, action)
    for code in sorted(UNUSED_CODES):
        if code in table:
            raise ValueError(f"Xid {code} is both defined and marked unused")
        table[code] = Xid(code, "UNUSED", f"Xid {code} is marked unused by NVIDIA; seeing it is unexpected.",
                          "other", "warning", _SUPPORT)
    return dict(sorted(table.items()))


XIDS: dict[int, Xid] = _build()


def describe(code: int) -> Xid:
    """Catalog entry for `code`; an 'Unknown XID n' entry for codes not in the catalog."""
    known = XIDS.get(code)
    if known is not None:
        return known
    return Xid(code, "UNKNOWN", f"Unknown XID {code}: not in the catalog this version of Precursor knows.",
               "other", "warning", "Look the code up in NVIDIA's current Xid catalog for this driver.")
