"""Machines: the :class:`Hardware` record (mesh of tiles and cores, links, DRAM ports, GPU
clusters), its TOML loader and writer, and the silicon cost model (area, yield, cost per die).

A public module of :mod:`simulator`: code outside the simulator imports these names from here
(or from :mod:`simulator`), never from the submodules.
"""

from simulator.hardware.loader import hardware_from_tables, hardware_presets, load_hardware
from simulator.hardware.silicon import CheckRow, SiliconCost, Technology, check_rows, hardware_cost, load_technology
from simulator.hardware.spec import Hardware
from simulator.hardware.writer import hardware_tables, hardware_to_toml

__all__ = [
    "CheckRow", "Hardware", "SiliconCost", "Technology", "check_rows", "hardware_cost", "hardware_from_tables",
    "hardware_presets", "hardware_tables", "hardware_to_toml", "load_hardware", "load_technology",
]
