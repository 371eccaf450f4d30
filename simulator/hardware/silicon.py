"""Silicon area and power of a tiled chip, from its parts (hardware and mapping co-design).

A die of a 2D-mesh chip is costed part by part, with coefficients of one process node read from a
technology file (``simulator/hardware/technology/<name>.toml``, every coefficient with its
``_source``), in the manner of PHAZE's area model (Wang et al., ICML'24 §4) and of Accelergy's
component tables (Wu et al., ICCAD'19)::

    area  = die_fixed + cores * (core_fixed + sram_per_core * a_sram + flop_per_s_per_core * a_mac
                                 + core_link_bandwidth * a_router)
            + dram_bandwidth * a_dram_phy + die_to_die_bandwidth * a_d2d
    power = leakage * area + flop_per_s * e_flop + sram_bandwidth * e_sram
            + noc_bandwidth * e_hop + dram_bandwidth * e_dram + die_to_die_bandwidth * e_d2d

Power is at full activity of every part (every matrix engine at its peak, every SRAM, link and
DRAM interface at its bandwidth), the quantity a thermal design power bounds. A mesh
:class:`~simulator.hardware.spec.Hardware` maps onto the parts as: a core's link bandwidth is its
four mesh links (one direction each); a die's die-to-die bandwidth is the inter-die links of its
four edges, one per edge core; the matrix engine is the 16-bit (bf16, else fp16) peak; the NoC's
energy is charged on the die's bisection bandwidth (the links crossing its shorter midline, one
direction), one hop per byte, as the technology file's checked chips are.

The file also lists real chips (``[[check]]``) with their published die area and TDP, so
:func:`check_rows` reports the model's error on them. All quantities are SI inside (m^2, W, J,
bytes, flop/s); the file's units are in its key names and converted once here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from simulator.config import Table, read_toml
from simulator.errors import InputError
from simulator.hardware.spec import Hardware
from simulator.network.mesh import Mesh

TECHNOLOGY_DIR = Path(__file__).parent / "technology"
DEFAULT_TECHNOLOGY = "tsmc-n7"

_AREA_KEYS: dict[str, tuple[str, float]] = {
    "die_fixed_mm2": ("die_fixed_m2", 1e-6),
    "core_fixed_mm2": ("core_fixed_m2", 1e-6),
    "sram_mm2_per_MiB": ("sram_m2_per_byte", 1e-6 / 2**20),
    "matrix_engine_mm2_per_TFLOP_per_s": ("matrix_engine_m2_per_flop_per_s", 1e-6 / 1e12),
    "router_mm2_per_TB_per_s": ("router_m2_per_byte_per_s", 1e-6 / 1e12),
    "dram_phy_mm2_per_TB_per_s": ("dram_phy_m2_per_byte_per_s", 1e-6 / 1e12),
    "die_to_die_mm2_per_TB_per_s": ("die_to_die_m2_per_byte_per_s", 1e-6 / 1e12),
}
"""File key of an area coefficient -> (attribute, factor to SI)."""

_POWER_KEYS: dict[str, tuple[str, float]] = {
    "leakage_W_per_mm2": ("leakage_W_per_m2", 1e6),
    "matrix_engine_pJ_per_flop": ("matrix_engine_J_per_flop", 1e-12),
    "sram_pJ_per_byte": ("sram_J_per_byte", 1e-12),
    "noc_pJ_per_byte_per_hop": ("noc_J_per_byte_per_hop", 1e-12),
    "dram_pJ_per_byte": ("dram_J_per_byte", 1e-12),
    "die_to_die_pJ_per_byte": ("die_to_die_J_per_byte", 1e-12),
}
"""File key of a power coefficient -> (attribute, factor to SI)."""

_CHECK_KEYS: dict[str, tuple[str, float]] = {
    "die_area_mm2": ("die_area_m2", 1e-6),
    "tdp_W": ("tdp_W", 1.0),
    "dies": ("dies", 1.0),
    "cores": ("cores", 1.0),
    "sram_MiB_per_core": ("sram_bytes_per_core", 2**20),
    "bf16_TFLOP_per_s_per_core": ("flop_per_s_per_core", 1e12),
    "core_link_TB_per_s": ("core_link_bytes_per_s", 1e12),
    "dram_TB_per_s": ("dram_bytes_per_s", 1e12),
    "die_to_die_TB_per_s": ("die_to_die_bytes_per_s", 1e12),
    "sram_bandwidth_TB_per_s": ("sram_bandwidth_bytes_per_s", 1e12),
    "noc_TB_per_s": ("noc_bytes_per_s", 1e12),
}
"""File key of a checked chip's figure -> (attribute, factor to SI); chip totals are per die."""


@dataclass(frozen=True, slots=True)
class Technology:
    """Area and energy coefficients of one process node (see the module docstring's formulas).

    Attributes:
        name: the technology file's name.
        die_fixed_m2 .. die_to_die_m2_per_byte_per_s: area per die, per core, per byte of SRAM,
            per flop/s of matrix engine, per byte/s of a core's links, of DRAM interface and of
            die-to-die links (m^2, m^2/byte, m^2/(flop/s), m^2/(byte/s)).
        leakage_W_per_m2 .. die_to_die_J_per_byte: static power per area (W/m^2) and energy per
            flop, per byte of SRAM access, per byte per NoC hop, per byte of DRAM and of
            die-to-die transfer (J).
        checks: real chips with their published area and TDP (:class:`Die`).
        sources: the ``_source`` of every coefficient, by file key.
    """

    name: str
    die_fixed_m2: float
    core_fixed_m2: float
    sram_m2_per_byte: float
    matrix_engine_m2_per_flop_per_s: float
    router_m2_per_byte_per_s: float
    dram_phy_m2_per_byte_per_s: float
    die_to_die_m2_per_byte_per_s: float
    leakage_W_per_m2: float
    matrix_engine_J_per_flop: float
    sram_J_per_byte: float
    noc_J_per_byte_per_hop: float
    dram_J_per_byte: float
    die_to_die_J_per_byte: float
    checks: tuple[Die, ...] = ()
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Die:
    """One die described by the parts the model costs (SI units; bandwidths one direction).

    Attributes:
        name: the chip's name.
        dies: identical dies of the chip (a wafer's reticles); area and power are per die.
        cores: cores (tiles, SMs, IPU tiles) of one die.
        sram_bytes_per_core: on-chip SRAM of one core.
        flop_per_s_per_core: 16-bit dense matrix-engine peak of one core.
        core_link_bytes_per_s: bandwidth of a core's mesh links, summed over them.
        dram_bytes_per_s: the die's DRAM interface bandwidth.
        die_to_die_bytes_per_s: bandwidth of the links crossing the die's edges, summed.
        sram_bandwidth_bytes_per_s: SRAM bandwidth of the die (all cores).
        noc_bytes_per_s: bandwidth of the die's network charged one hop per byte at full activity
            (its bisection bandwidth, one direction).
        die_area_m2, tdp_W: published die area and thermal design power (checked chips only).
        used_to_derive: the technology file's coefficient keys this chip's own figures gave (its
            check of those is not independent).
    """

    name: str
    dies: int = 1
    cores: int
    sram_bytes_per_core: float
    flop_per_s_per_core: float
    core_link_bytes_per_s: float
    dram_bytes_per_s: float
    die_to_die_bytes_per_s: float
    sram_bandwidth_bytes_per_s: float
    noc_bytes_per_s: float
    die_area_m2: float = 0.0
    tdp_W: float = 0.0
    used_to_derive: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SiliconCost:
    """Area and full-activity power of a chip, with each part's share.

    Attributes:
        area_m2: the whole chip (all dies).
        power_W: the whole chip at full activity.
        area_parts_m2: per part (``sram``, ``matrix_engine``, ``router``, ``core_fixed``,
            ``die_fixed``, ``dram_phy``, ``die_to_die``), whole chip.
        power_parts_W: per part (``leakage``, ``matrix_engine``, ``sram``, ``noc``, ``dram``,
            ``die_to_die``), whole chip.
    """

    area_m2: float
    power_W: float
    area_parts_m2: dict[str, float]
    power_parts_W: dict[str, float]


def die_cost(technology: Technology, die: Die) -> SiliconCost:
    """Area and power of ``die`` x ``die.dies`` under ``technology`` (module docstring)."""
    t = technology
    area = {
        "die_fixed": t.die_fixed_m2,
        "core_fixed": die.cores * t.core_fixed_m2,
        "sram": die.cores * die.sram_bytes_per_core * t.sram_m2_per_byte,
        "matrix_engine": die.cores * die.flop_per_s_per_core * t.matrix_engine_m2_per_flop_per_s,
        "router": die.cores * die.core_link_bytes_per_s * t.router_m2_per_byte_per_s,
        "dram_phy": die.dram_bytes_per_s * t.dram_phy_m2_per_byte_per_s,
        "die_to_die": die.die_to_die_bytes_per_s * t.die_to_die_m2_per_byte_per_s,
    }
    die_area = sum(area.values())
    power = {
        "leakage": die_area * t.leakage_W_per_m2,
        "matrix_engine": die.cores * die.flop_per_s_per_core * t.matrix_engine_J_per_flop,
        "sram": die.sram_bandwidth_bytes_per_s * t.sram_J_per_byte,
        "noc": die.noc_bytes_per_s * t.noc_J_per_byte_per_hop,
        "dram": die.dram_bytes_per_s * t.dram_J_per_byte,
        "die_to_die": die.die_to_die_bytes_per_s * t.die_to_die_J_per_byte,
    }
    return SiliconCost(area_m2=die_area * die.dies, power_W=sum(power.values()) * die.dies,
                       area_parts_m2={k: v * die.dies for k, v in area.items()},
                       power_parts_W={k: v * die.dies for k, v in power.items()})


def mesh_die(hardware: Hardware) -> Die:
    """A mesh machine's die as the model's parts (module docstring).

    Raises:
        InputError: not a mesh, or no 16-bit (bf16 or fp16) peak.
    """
    mesh, dram = hardware.network, hardware.memory.dram
    if not isinstance(mesh, Mesh) or dram is None:
        raise InputError(f"silicon: area and power are modelled for mesh chips; {hardware.name!r} is a {hardware.kind}")
    peak = hardware.compute.peak_flop_per_s.get("bf16") or hardware.compute.peak_flop_per_s.get("fp16")
    if not peak:
        raise InputError(f"silicon: {hardware.name!r} gives no bf16 or fp16 peak to cost its matrix engines")
    cores, sram = mesh.cores_x * mesh.cores_y, hardware.memory.sram
    return Die(name=hardware.name, dies=mesh.grid_dies_x * mesh.grid_dies_y, cores=cores,
               sram_bytes_per_core=sram.capacity_bytes, flop_per_s_per_core=peak,
               core_link_bytes_per_s=4 * mesh.intra_die_link_bandwidth_bytes_per_s,
               dram_bytes_per_s=dram.bandwidth_bytes_per_s,
               die_to_die_bytes_per_s=2 * (mesh.cores_x + mesh.cores_y) * mesh.inter_die_link_bandwidth_bytes_per_s,
               sram_bandwidth_bytes_per_s=cores * sram.bandwidth_bytes_per_s,
               noc_bytes_per_s=min(mesh.cores_x, mesh.cores_y) * mesh.intra_die_link_bandwidth_bytes_per_s)


def hardware_cost(hardware: Hardware, technology: Technology) -> SiliconCost:
    """Area and full-activity power of a mesh machine (all its dies).

    Raises:
        InputError: see :func:`mesh_die`.
    """
    return die_cost(technology, mesh_die(hardware))


@dataclass(frozen=True, slots=True)
class CheckRow:
    """The model against one real chip: predicted and published area (m^2) and TDP (W)."""

    name: str
    predicted_area_m2: float
    published_area_m2: float
    predicted_power_W: float
    published_tdp_W: float
    used_to_derive: tuple[str, ...] = ()

    @property
    def independent_area(self) -> bool:
        """No area coefficient was derived from this chip."""
        return not any(key in _AREA_KEYS for key in self.used_to_derive)

    @property
    def independent_power(self) -> bool:
        """No coefficient was derived from this chip (power depends on the area too)."""
        return not self.used_to_derive

    @property
    def area_error(self) -> float:
        """(predicted - published) / published area."""
        return self.predicted_area_m2 / self.published_area_m2 - 1

    @property
    def power_error(self) -> float:
        """(predicted - published) / published TDP."""
        return self.predicted_power_W / self.published_tdp_W - 1


def check_rows(technology: Technology) -> list[CheckRow]:
    """The model's area and power against each real chip of the technology file."""
    rows = []
    for chip in technology.checks:
        cost = die_cost(technology, chip)
        rows.append(CheckRow(chip.name, cost.area_m2, chip.die_area_m2 * chip.dies, cost.power_W,
                             chip.tdp_W, chip.used_to_derive))
    return rows


@cache
def load_technology(name_or_path: str = DEFAULT_TECHNOLOGY) -> Technology:
    """A technology file by name (``tsmc-n7``: :data:`TECHNOLOGY_DIR`) or path.

    Raises:
        InputError: no such file, a missing or unknown key, a coefficient without a source, or a
            negative value (one line naming the file and key).
    """
    path = Path(name_or_path)
    if not path.suffix:
        path = TECHNOLOGY_DIR / f"{name_or_path}.toml"
        if not path.is_file():
            known = sorted(p.stem for p in TECHNOLOGY_DIR.glob("*.toml"))
            raise InputError(f"silicon: no technology {name_or_path!r} (known: {known}; or give a file path)")
    elif not path.is_file():
        raise InputError(f"silicon: technology file {str(path)!r} does not exist")
    root = read_toml(path)
    name = root.take_string("name")
    sources = {"name": root.take_source("name")}
    values = {**_take(root.take_table("area"), _AREA_KEYS, sources),
              **_take(root.take_table("power"), _POWER_KEYS, sources)}
    checks = tuple(_check(root, i, entry, sources) for i, entry in enumerate(root.data.pop("check", [])))
    root.finish(["name", "area", "power", "check"])
    return Technology(name=name, checks=checks, sources=sources, **values)


def _take(table: Table, keys: dict[str, tuple[str, float]], sources: dict[str, str]) -> dict[str, float]:
    values = {}
    for key, (attribute, factor) in keys.items():
        values[attribute] = float(table.take_number(key, minimum=0.0, inclusive=True)) * factor
        sources[f"{table.path}.{key}"] = table.take_source(key)
    table.finish(list(keys) + [k + "_source" for k in keys])
    return values


def _check(root: Table, index: int, entry: object, sources: dict[str, str]) -> Die:
    if not isinstance(entry, dict):
        raise root.error(f"[[check]] {index + 1} must be a table")
    table = Table(file=root.file, path=f"check[{index}]", data=entry)
    name = table.take_string("name")
    process = table.take_string("process") if table.has("process") else ""
    if table.has("process"):
        sources[f"{table.path}.process"] = table.take_source("process")
    derived = tuple(table.take_strings("used_to_derive")) if table.has("used_to_derive") else ()
    unknown = [k for k in derived if k not in _AREA_KEYS and k not in _POWER_KEYS]
    if unknown:
        raise table.error(f"key 'used_to_derive' names {unknown[0]!r}, not a coefficient of [area] or [power]")
    if derived:
        sources[f"{table.path}.used_to_derive"] = table.take_source("used_to_derive")
    values: dict[str, float] = {}
    for key, (attribute, factor) in _CHECK_KEYS.items():
        if key == "dies" and not table.has(key):
            continue
        values[attribute] = float(table.take_number(key, minimum=0.0, inclusive=True)) * factor
        sources[f"{table.path}.{key}"] = table.take_source(key)
    table.finish(["name", "process", "process_source", "used_to_derive", "used_to_derive_source", *_CHECK_KEYS,
                  *(k + "_source" for k in _CHECK_KEYS)])
    dies, cores = int(values.pop("dies", 1)), int(values.pop("cores"))
    return Die(name=f"{name} ({process})" if process else name, used_to_derive=derived, dies=dies, cores=cores,
               **values)
