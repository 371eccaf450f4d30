"""Where each record of a :class:`~simulator.hardware.spec.Hardware` sits in a hardware file.

Files keep the layout they had before the records were carved by what they are (compute, memory,
network): ``[device]`` holds the SRAM (and ``[device.peak]``, ``[device.math_fidelity]`` the
compute), and the kind's table (``[mesh]``, ``[cluster]``, ``[torus]``) holds the fabric together
with the off-chip memory and a GPU's GEMM tiling. This module maps each record's fields to their
file keys (SI names: ``dram_bandwidth_bytes_per_s`` is given as ``dram_bandwidth_GB_per_s``...),
for the loader and the writer alike.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from simulator.hardware.spec import Dram, GemmTiling, Hbm, Sram


@dataclass(frozen=True, slots=True)
class Filed:
    """A record whose fields a file gives in a table under other names.

    Attributes:
        record: the record's class.
        part: where the record sits in :class:`~simulator.hardware.spec.Hardware`, as
            ``(part, attribute)``: ``("memory", "dram")`` is ``hardware.memory.dram``.
        keys: record field -> the SI name of its file key.
    """

    record: type
    part: tuple[str, str]
    keys: dict[str, str]


def _prefixed(record: type, part: tuple[str, str], prefix: str, bare: tuple[str, ...] = ()) -> Filed:
    """``record`` filed with every field but ``bare`` under ``prefix`` + its name."""
    return Filed(record, part, {f.name: f.name if f.name in bare else prefix + f.name
                                for f in dataclasses.fields(record)})


SRAM = Filed(Sram, ("memory", "sram"), {"capacity_bytes": "sram_bytes",
                                        "bandwidth_bytes_per_s": "sram_bandwidth_bytes_per_s"})
"""The SRAM, filed in ``[device]``."""

_HBM = _prefixed(Hbm, ("memory", "hbm"), "hbm_")

IN_KIND_TABLE: dict[str, tuple[Filed, ...]] = {
    "mesh": (_prefixed(Dram, ("memory", "dram"), "dram_", bare=("dataflow",)),),
    "cluster": (_HBM, _prefixed(GemmTiling, ("compute", "gemm_tiling"), "")),
    "torus": (_HBM,),
}
"""Kind -> the memory and compute records its table holds besides the network record."""


def part_of(hardware: object, filed: Filed) -> object:
    """The record ``filed`` describes in ``hardware`` (None where the machine has none)."""
    part, attribute = filed.part
    return getattr(getattr(hardware, part), attribute)
