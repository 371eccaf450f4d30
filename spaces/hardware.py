"""What a co-design search may propose for the chip itself: mesh chips around a base hardware file.

A hardware point sets some of a mesh chip's parameters, each from the study file's list of choices
(PHAZE's architectural search space, Wang et al. ICML'24 §4: compute units and their size, on-chip
and off-chip memory), and keeps the base file's values for the rest:

====================================  ==========================================================
dimension (study file key)            what it sets (unit in the key, as in hardware files)
====================================  ==========================================================
``dies``                              dies along x and y, ``"5x4"``
``cores``                             cores per die along x and y, ``"4x4"``
``sram_MB_per_core``                  SRAM of one core
``TFLOP_per_s_per_core``              16-bit matrix-engine peak of one core; every precision's
                                      peak scales with it
``dram_ports_per_die``                DRAM ports per die (1 or 2 on the die's edges)
``dram_bandwidth_GB_per_s``           DRAM bandwidth per die
``intra_die_link_bandwidth_GB_per_s`` one direction of a link between two cores of a die
``inter_die_link_bandwidth_GB_per_s`` one direction of a link crossing a die boundary
====================================  ==========================================================

A core's SRAM bandwidth follows its matrix engine as the base file derives it for a square PE
array (PALM wafer preset: operand vectors of the array's side, ``sqrt`` of its MACs per cycle), so
it scales with the square root of the peak. Every proposal is a :class:`simulator.Hardware` the
simulator accepts (the mesh's own checks run), whose changed values carry the source
"proposed by palm-search codesign", so :func:`simulator.hardware_to_toml` writes it back as a
hardware file.

Imports flow ``palm_search -> spaces -> simulator``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import optuna

from simulator import Hardware, InputError
from simulator.config import plausible_range, split_unit
from simulator.network import mesh as mesh_network

_GRIDS = {"dies": ("dies_x", "dies_y"), "cores": ("cores_x", "cores_y")}
_MESH_QUANTITIES = {
    "dram_ports_per_die": ("dram_ports_per_die", 1.0),
    "dram_bandwidth_GB_per_s": ("dram_bandwidth_bytes_per_s", 1e9),
    "intra_die_link_bandwidth_GB_per_s": ("intra_die_link_bandwidth_bytes_per_s", 1e9),
    "inter_die_link_bandwidth_GB_per_s": ("inter_die_link_bandwidth_bytes_per_s", 1e9),
}
_DRAM_FIELDS = {"dram_bandwidth_bytes_per_s": "bandwidth_bytes_per_s"}
"""The ``[mesh]`` file quantities above that are the DRAM's (``Hardware.memory.dram``) -> its field."""
_SRAM_FIELDS = {"sram_bytes": "capacity_bytes", "sram_bandwidth_bytes_per_s": "bandwidth_bytes_per_s"}
"""The ``[device]`` file quantities a point sets -> the field of ``Hardware.memory.sram``."""
HARDWARE_DIMENSIONS = ("dies", "cores", "sram_MB_per_core", "TFLOP_per_s_per_core", *_MESH_QUANTITIES)
"""The dimensions a hardware space may search (module docstring)."""
HardwareValue = str | int | float
"""A dimension's choice: a grid ``"AxB"`` or a number in the key's unit."""
PARAM_PREFIX = "hw."
"""Prefix of the hardware parameters' names in an Optuna trial (``hw.sram_MB_per_core``)."""
PROPOSED = "proposed by palm-search codesign"
MAX_GRID_SIDE = 1024
"""Most dies or cores along one side of a proposed chip (a wafer of 1024 x 1024 cores already
exceeds any announced one)."""


@dataclass(frozen=True, slots=True)
class HardwareSpace:
    """Mesh chips around ``base``: each searched dimension takes one of its ``choices``.

    Attributes:
        base: the mesh machine whose values the unsearched dimensions keep.
        choices: dimension (:data:`HARDWARE_DIMENSIONS`) -> its choices, in the study file's
            order (grids as ``"AxB"`` strings, the others numbers in the key's unit).

    Raises:
        InputError: ``base`` is not a mesh, an unknown dimension, an empty list, a grid not written
            ``AxB`` of positive integers, a number not positive, or a count not an integer.
    """

    base: Hardware
    choices: dict[str, tuple[HardwareValue, ...]]

    def __post_init__(self) -> None:
        if not isinstance(self.base.network, mesh_network.Mesh):
            raise InputError(f"hardware space: the base machine must be a mesh, {self.base.name!r} is a"
                             f" {self.base.kind}")
        for name, values in self.choices.items():
            _check_dimension(name, values)

    @property
    def size(self) -> int:
        """Hardware points in the space."""
        return math.prod(len(v) for v in self.choices.values())


_SI = {"sram_MB_per_core": ("sram_bytes", 1e6), "TFLOP_per_s_per_core": ("peak_flop_per_s", 1e12),
       **_MESH_QUANTITIES}
"""Each numeric dimension's SI quantity and factor, for the plausible ranges hardware files obey."""


def _check_dimension(name: str, values: tuple[object, ...]) -> None:
    if name not in HARDWARE_DIMENSIONS:
        raise InputError(f"hardware space: unknown dimension {name!r} (known: {list(HARDWARE_DIMENSIONS)})")
    if not values:
        raise InputError(f"hardware space: `{name}` needs at least one choice")
    for value in values:
        if name in _GRIDS:
            if max(grid_of(f"hardware space: `{name}`", value)) > MAX_GRID_SIDE:
                raise InputError(f"hardware space: `{name}` choices must be at most {MAX_GRID_SIDE} along a side,"
                                 f" got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise InputError(f"hardware space: `{name}` choices must be positive numbers, got {value!r}")
        elif name == "dram_ports_per_die" and value not in (1, 2):
            raise InputError(f"hardware space: `dram_ports_per_die` choices must be 1 or 2 (ports on the"
                             f" die's west and east edges), got {value!r}")
        else:
            quantity, factor = _SI[name]
            low, high, why = plausible_range(quantity)
            if not low <= value * factor <= high:
                raise InputError(f"hardware space: `{name}` choices must lie in [{low / factor:g}, {high / factor:g}]"
                                 f" ({why}), got {value!r}")


def grid_of(what: str, label: object) -> tuple[int, int]:
    """``"5x4"`` -> ``(5, 4)``; ``what`` names the value in the error.

    Raises:
        InputError: not two positive integers joined by ``x``.
    """
    parts = label.lower().split("x") if isinstance(label, str) else []
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise InputError(f"{what}: expected two positive integers as AxB (e.g. 4x4), got {label!r}")
    return int(parts[0]), int(parts[1])


def enumerate_hardware(space: HardwareSpace) -> list[dict[str, HardwareValue]]:
    """Every hardware point of ``space`` as its parameters (:data:`PARAM_PREFIX` names), in the
    order of the study file's lists (the last dimension fastest)."""
    names = list(space.choices)
    return [{PARAM_PREFIX + n: v for n, v in zip(names, values, strict=True)}
            for values in itertools.product(*(space.choices[n] for n in names))]


def suggest_hardware(trial: optuna.Trial, space: HardwareSpace) -> dict[str, HardwareValue]:
    """A hardware point drawn from ``trial`` (one categorical per searched dimension)."""
    # suggest_categorical returns one of the choices given, so a HardwareValue
    return {PARAM_PREFIX + n: cast(HardwareValue, trial.suggest_categorical(PARAM_PREFIX + n, list(v)))
            for n, v in space.choices.items()}


def hardware_label(params: Mapping[str, object]) -> str:
    """A short name of a hardware point, e.g. ``sram_MB_per_core=3.75,TFLOP_per_s_per_core=16``."""
    return ",".join(f"{k.removeprefix(PARAM_PREFIX)}={v}" for k, v in params.items())


def build_hardware(space: HardwareSpace, params: Mapping[str, HardwareValue]) -> Hardware:
    """The machine of a hardware point: ``space.base`` with the point's values.

    Raises:
        InputError: a parameter outside the space, or a machine the mesh's checks refuse.
    """
    values = {k.removeprefix(PARAM_PREFIX): v for k, v in params.items()}
    unknown = sorted(set(values) - set(space.choices))
    if unknown:
        raise InputError(f"hardware space: {unknown[0]!r} is not a searched dimension")
    base = space.base
    mesh, dram = base.network, base.memory.dram
    assert isinstance(mesh, mesh_network.Mesh) and dram is not None  # HardwareSpace checks its base is a mesh
    network: dict[str, float | int | tuple[tuple[int, int], ...]] = {}
    for name, value in values.items():
        if name in _GRIDS:
            network.update(zip(_GRIDS[name], grid_of(f"hardware space: `{name}`", value), strict=True))
        elif name in _MESH_QUANTITIES:
            key, factor = _MESH_QUANTITIES[name]
            network[key] = int(value) if key == "dram_ports_per_die" else float(value) * factor
    device: dict[str, float] = {}
    peak = base.compute.peak_flop_per_s
    if "sram_MB_per_core" in values:
        device["sram_bytes"] = float(values["sram_MB_per_core"]) * 1e6
    if "TFLOP_per_s_per_core" in values:
        ratio = float(values["TFLOP_per_s_per_core"]) * 1e12 / _matrix_peak(base)
        peak = {p: v * ratio for p, v in peak.items()}
        device["sram_bandwidth_bytes_per_s"] = base.memory.sram.bandwidth_bytes_per_s * math.sqrt(ratio)
    if network.get("dram_ports_per_die", mesh.dram_ports_per_die) != mesh.dram_ports_per_die:
        network["dram_port_cores"] = ()  # the base's named port cores are for its own port count
    changed = {f"mesh.{k}" for k in network} | {f"device.{k}" for k in device}
    if peak is not base.compute.peak_flop_per_s:
        changed |= {f"device.peak.{p}_flop_per_s" for p in peak}
    kept = {k: v for k, v in base.sources.items() if _si_key(k) not in changed}
    name = f"{base.name}[{hardware_label(params)}]" if params else base.name
    dram_changes = {_DRAM_FIELDS[k]: network.pop(k) for k in list(network) if k in _DRAM_FIELDS}
    memory = dataclasses.replace(
        base.memory, sram=dataclasses.replace(base.memory.sram, **{_SRAM_FIELDS[k]: v for k, v in device.items()}),
        dram=dataclasses.replace(dram, **dram_changes))  # type: ignore[arg-type]
    # mypy checks a **dict's value type against every field of the dataclass; the keys here are
    # fields named at run time (from _GRIDS, _MESH_QUANTITIES and the device values above), each
    # given its field's type, which a dict keyed by str cannot express
    proposed = dataclasses.replace(mesh, **network)  # type: ignore[arg-type]
    return dataclasses.replace(base, name=name, network=proposed, memory=memory,
                               compute=dataclasses.replace(base.compute, peak_flop_per_s=peak),
                               sources={**kept, **dict.fromkeys(sorted(changed), PROPOSED)})


def _si_key(source_key: str) -> str:
    """``mesh.dram_bandwidth_GB_per_s`` -> ``mesh.dram_bandwidth_bytes_per_s`` (a source's key
    under its quantity's SI name)."""
    table, _, key = source_key.rpartition(".")
    return f"{table}.{split_unit(key)[1]}"


def _matrix_peak(hardware: Hardware) -> float:
    """The 16-bit matrix-engine peak (flop/s) that ``TFLOP_per_s_per_core`` replaces.

    Raises:
        InputError: the machine gives neither a bf16 nor an fp16 peak.
    """
    peak = hardware.compute.peak_flop_per_s.get("bf16") or hardware.compute.peak_flop_per_s.get("fp16")
    if not peak:
        raise InputError(f"hardware space: {hardware.name!r} has no bf16 or fp16 peak to scale")
    return peak
