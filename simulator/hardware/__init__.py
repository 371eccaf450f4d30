"""Machines: the :class:`Hardware` record carved into :class:`Compute` (peaks, GEMM tiling),
:class:`Memory` (SRAM, DRAM per die or HBM per device) and the network (mesh of tiles and cores,
GPU clusters, tori: the fabric only), its TOML loader and writer, and the silicon cost model (area,
yield, cost per die).

A public module of :mod:`simulator`: code outside the simulator imports these names from here
(or from :mod:`simulator`), never from the submodules.
"""

from simulator.hardware.loader import hardware_from_tables, hardware_presets, load_hardware
from simulator.hardware.silicon import CheckRow, SiliconCost, Technology, check_rows, hardware_cost, load_technology
from simulator.hardware.spec import Calibration, Compute, Dram, GemmTiling, Hardware, Hbm, Memory, Sram
from simulator.hardware.writer import hardware_tables, hardware_to_toml

__all__ = [
    "Calibration", "CheckRow", "Compute", "Dram", "GemmTiling", "Hardware", "Hbm", "Memory", "SiliconCost", "Sram",
    "Technology", "check_rows", "hardware_cost", "hardware_from_tables", "hardware_presets", "hardware_tables",
    "hardware_to_toml", "load_hardware", "load_technology",
]
