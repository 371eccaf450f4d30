"""Load a :class:`~simulator.hardware.spec.Hardware` from a TOML preset or file.

File layout (every number has a sibling ``<key>_source`` string citing where it comes from)::

    kind = "mesh"                      # or "cluster"

    [device]                           # one core (mesh) or one GPU (cluster)
    sram_MB = 3.75
    sram_MB_source = "PALM Table VI: 60 MB per die / 16 cores"
    sram_bandwidth_GB_per_s = 543
    sram_bandwidth_GB_per_s_source = "assumption: ..."

    [device.peak]                      # any of fp32 / fp16 / bf16 (TFLOP/s), int8 (TOP/s)
    fp16_TFLOP_per_s = 16
    fp16_TFLOP_per_s_source = "..."

    [device.math_fidelity]             # optional: matrix-engine passes per math fidelity
    HiFi4 = 4                          # (any of LoFi, HiFi2, HiFi3, HiFi4)
    HiFi4_source = "..."

    [device.unpacker]                  # optional: the fields of Unpacker (SRAM -> matrix engine)
    read_bandwidth_GB_per_s = 64
    read_bandwidth_GB_per_s_source = "..."

    [device.data_movement]             # optional: the fields of DataMovement (a core's GEMM blocks)
    dram_read_latency_ns = 384
    dram_read_latency_ns_source = "..."

    [mesh]                             # the fields of Mesh and of the die's DRAM, or [cluster]
    hop_latency_ns = 1                 # those of Cluster, the GPU's HBM and GEMM tiling, each
    hop_latency_ns_source = "..."      # with a unit suffix from simulator.config.UNITS

    [calibration]                      # the fields of Calibration
    gemm_efficiency = 0.87
    gemm_efficiency_source = "..."

A key's SI name (``hop_latency_ns`` -> ``hop_latency_s``) selects the record field it fills
(:mod:`simulator.hardware.layout`: ``[device] sram_MB`` is ``memory.sram.capacity_bytes``,
``[mesh] dram_bandwidth_GB_per_s`` is ``memory.dram.bandwidth_bytes_per_s``), so any unit of the
right dimension may be used.

A file (a preset too) may start from a preset and give only what differs (a variant of a chip)::

    base = "wafer"                     # a preset; its tables are merged under this file's
    [mesh]
    dataflow = "tiled"
    dataflow_source = "..."
"""

from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar, cast

import simulator.network  # noqa: F401 - registers every network kind in NETWORK_KINDS
from simulator.config import SOURCE_SUFFIX, UNITS, Table, parse_toml, read_toml, split_unit
from simulator.errors import InputError
from simulator.hardware.layout import IN_KIND_TABLE, SRAM, Filed
from simulator.hardware.spec import (
    DATAFLOWS,
    DIE_COLLECTIVES,
    DRAM_ACCESSES,
    NETWORK_KINDS,
    Calibration,
    Compute,
    DataMovement,
    Dram,
    GemmTiling,
    Hardware,
    Hbm,
    Memory,
    Network,
    Sram,
    Unpacker,
)
from simulator.strategy import MATH_FIDELITIES, PRECISIONS

D = TypeVar("D")

MAX_DEVICES = 2**18
"""Most devices (cores, GPUs, chips) a hardware file may describe: a 2^18-core mesh's topology
takes about 4 s and 0.5 GB to build; a file asking for more is a typo or a wrong unit."""

_PRESET_DIR = "presets"
_PRESET_DISPLAY = "simulator/hardware/presets/{}.toml"
_UNIT_HINT = {"_bytes_per_s": "GB_per_s", "_flop_per_s": "TFLOP_per_s", "_bytes": "GB", "_s": "us"}
"""SI suffix -> the unit suggested for a missing key (longest suffixes first)."""


def hardware_presets() -> list[str]:
    """Names of the bundled hardware presets, sorted (e.g. ``["a100-cluster", ...]``)."""
    folder = resources.files("simulator.hardware").joinpath(_PRESET_DIR)
    return sorted(p.name.removesuffix(".toml") for p in folder.iterdir() if p.name.endswith(".toml"))


def load_hardware(name_or_path: str | Path) -> Hardware:
    """Load a preset by name (``"wafer"``) or a TOML file by path.

    A string without ``/`` and not ending in ``.toml`` names a preset bundled in
    ``simulator/hardware/presets``; anything else is a path.

    Raises:
        InputError: unknown preset (the message lists the presets), unreadable or invalid file,
            unknown or missing key, wrong type, or a value out of range.
    """
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or "/" in text or text.endswith(".toml"):
        return _build(_with_base(read_toml(name_or_path)), Path(text).stem)
    if text not in hardware_presets():
        raise InputError(f"hardware: unknown preset {text!r} (presets: {hardware_presets()})")
    return _build(_with_base(_preset_table(text)), text)


def _preset_table(name: str) -> Table:
    """The root table of the bundled preset ``name``."""
    resource = resources.files("simulator.hardware").joinpath(_PRESET_DIR, f"{name}.toml")
    return parse_toml(resource.read_text(encoding="utf-8"), _PRESET_DISPLAY.format(name))


def _with_base(root: Table) -> Table:
    """``root`` merged over the preset its ``base`` key names (unchanged without one): each of
    its tables replaces the preset's keys one by one, so a variant states only what differs.

    Raises:
        InputError: ``base`` is not a preset name.
    """
    if not root.has("base"):
        return root
    base = _with_base(_preset_table(root.take_string("base", tuple(hardware_presets())))).data  # its own base too
    return Table(file=root.file, path="", data=_merged(base, {k: v for k, v in root.data.items() if k != "base"}))


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over``'s keys over ``base``'s, table by table."""
    merged = dict(base)
    for key, value in over.items():
        both = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = _merged(merged[key], value) if both else value
    return merged


def hardware_from_tables(tables: dict[str, Any], name: str, display: str) -> Hardware:
    """A :class:`Hardware` from the parsed tables of a hardware file (as
    :func:`simulator.hardware.writer.hardware_tables` writes them); ``display`` names them in errors.

    Raises:
        InputError: as :func:`load_hardware`.
    """
    return _build(Table(file=display, path="", data=dict(tables)), name)


def _build(root: Table, name: str) -> Hardware:
    """Read the root table of a hardware file (layout in the module docstring).

    Raises:
        InputError: unknown or missing key, wrong type, or value out of range.
    """
    sources: dict[str, str] = {}
    problems: list[InputError] = []
    kind = root.take_string("kind", tuple(NETWORK_KINDS))
    device = root.take_table("device")
    precisions = {f"{p}_flop_per_s": "float" for p in PRECISIONS}
    peak = _read_quantities(device.take_table("peak"), precisions, sources, problems, required=False)
    if not peak:
        problems.append(device.error("table 'peak' needs one of fp32/fp16/bf16_TFLOP_per_s, int8_TOP_per_s"))
    fidelity = (_read_quantities(device.take_table("math_fidelity"), dict.fromkeys(MATH_FIDELITIES, "int"),
                                 sources, problems, required=False) if device.has("math_fidelity") else {})
    unpacker = (_read_dataclass(device.take_table("unpacker"), Unpacker, sources, problems)
                if device.has("unpacker") else None)
    movement = (_read_dataclass(device.take_table("data_movement"), DataMovement, sources, problems)
                if device.has("data_movement") else None)
    [sram] = _read_records(device, (SRAM,), sources, problems,
                           subtables=("peak", "math_fidelity", "unpacker", "data_movement")) or [None]
    network_table = root.take_table(kind)
    filed = (_as_is(NETWORK_KINDS[kind], ("", "network")), *IN_KIND_TABLE.get(kind, ()))
    records = _read_records(network_table, filed, sources, problems)
    calibration = _read_dataclass(root.take_table("calibration"), Calibration, sources, problems)
    try:
        root.finish(known=("kind", "base", "device", kind, "calibration"))
    except InputError as error:
        problems.append(error)
    _raise_all(root.file, problems)
    assert isinstance(sram, Sram) and records is not None and calibration is not None
    parts = {f.part: record for f, record in zip(filed, records, strict=True)}  # the network first
    network = records[0]
    assert isinstance(network, Network)
    if network.num_devices > MAX_DEVICES:
        raise network_table.error(f"{network.num_devices:,} devices, more than the {MAX_DEVICES:,} a machine may have"
                                  " (its topology would take minutes; model a larger machine with coarser devices)")
    calibration = dataclasses.replace(calibration, sources={
        split_unit(key.removeprefix("calibration."))[1]: text
        for key, text in sources.items() if key.startswith("calibration.")})
    compute = Compute(peak_flop_per_s={key.removesuffix("_flop_per_s"): v for key, v in peak.items()},
                      math_fidelity_phases={key: int(v) for key, v in fidelity.items()},
                      gemm_tiling=_part(parts, "gemm_tiling", GemmTiling), unpacker=unpacker,
                      data_movement=movement)
    memory = Memory(sram=sram, dram=_part(parts, "dram", Dram),
                    hbm=_part(parts, "hbm", Hbm))
    return Hardware(name=name, compute=compute, memory=memory, network=network, calibration=calibration,
                    sources=sources)


def _part(parts: dict[tuple[str, str], object], attribute: str, cls: type[D]) -> D | None:
    """The record read for ``attribute`` of its part (None where the file's kind holds none)."""
    record = next((r for (_, name), r in parts.items() if name == attribute), None)
    assert record is None or isinstance(record, cls)
    return record


def _as_is(cls: type, part: tuple[str, str]) -> Filed:
    """``cls`` filed under its own field names (``sources`` aside)."""
    return Filed(cls, part, {f.name: f.name for f in dataclasses.fields(cls) if f.name != "sources"})


def _read_dataclass(table: Table, cls: type[D], sources: dict[str, str], problems: list[InputError]) -> D | None:
    """Build ``cls`` from a table holding exactly its fields, each with a unit and a source; None
    (the table's problems added to ``problems``) when they do not make one."""
    records = _read_records(table, (_as_is(cls, ("", "")),), sources, problems)
    return None if records is None else cast(D, records[0])


def _read_records(table: Table, filed: tuple[Filed, ...], sources: dict[str, str], problems: list[InputError],
                  subtables: tuple[str, ...] = ()) -> list[object] | None:
    """Build each record of ``filed`` from a table holding exactly their fields under their file
    keys (:mod:`simulator.hardware.layout`), each with a unit and a source; None (the table's
    problems added to ``problems``) when they do not make them."""
    wanted = {entry.keys[f.name]: str(f.type) for entry in filed for f in dataclasses.fields(entry.record)
              if f.name in entry.keys}
    optional = {entry.keys[f.name] for entry in filed for f in dataclasses.fields(entry.record)
                if f.name in entry.keys
                and (f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING)}
    before = len(problems)
    values = _read_quantities(table, wanted, sources, problems, optional=optional, subtables=subtables)
    if len(problems) > before:
        return None
    try:
        return [entry.record(**{name: values[key] for name, key in entry.keys.items() if key in values})
                for entry in filed]
    except InputError as error:
        problems.append(table.error(str(error).split(": ", 1)[-1]))
        return None


def _raise_all(file: str, problems: list[InputError]) -> None:
    """Raise one :class:`InputError` stating every problem of ``file`` (one line: a file's
    problems are fixed in one edit, not one per run).

    Raises:
        InputError: ``file: N problems: [table] ...; [table] ...`` (or the one problem as is).
    """
    if len(problems) == 1:
        raise problems[0]
    if problems:
        parts = [str(p).removeprefix(file).lstrip(": ") for p in problems]
        raise InputError(f"{file}: {len(problems)} problems: " + "; ".join(parts))


CHOICES: dict[str, tuple[str, ...]] = {"Dataflow": DATAFLOWS, "DramAccess": DRAM_ACCESSES,
                                       "DieCollectives": DIE_COLLECTIVES}
"""Annotation of a string field -> the values a file may give it."""

POINTS = "tuple[tuple[int, int], ...]"
"""Annotation of a field holding grid positions (``[[x, y], ...]`` in a file)."""


def _read_quantities(table: Table, wanted: dict[str, str], sources: dict[str, str], problems: list[InputError],
                     *, required: bool = True, subtables: tuple[str, ...] = (),
                     optional: set[str] | None = None) -> dict[str, Any]:
    """Read the quantities whose SI names are in ``wanted`` (name -> ``"int"``/``"float"``, a
    :data:`CHOICES` annotation or :data:`POINTS`); every unknown, missing (when ``required``,
    unless ``optional``) or repeated key, wrong type or range goes into ``problems``.

    Each key's citation goes into ``sources`` under ``"<table path>.<key>"``.
    """
    values: dict[str, Any] = {}
    seen: set[str] = set()
    for key in table.keys():
        stem, si_name, _ = split_unit(key)
        if key.endswith(SOURCE_SUFFIX) or key in subtables or si_name not in wanted:
            continue
        try:
            values[si_name] = _read_value(table, key, wanted[si_name], si_name in seen)
        except InputError as error:
            problems.append(error)
        try:
            sources[f"{table.path}.{key}"] = table.take_source(key)
        except InputError as error:
            problems.append(error)
        seen.add(si_name)
    missing = [name for name in wanted if name not in seen and name not in (optional or set())]
    if required:
        problems += [table.error(f"missing key '{_hint(name)}'") for name in missing]
    known = [key for name in wanted for key in _file_keys(name)] + list(subtables)
    try:
        table.finish(known=known + [key + SOURCE_SUFFIX for key in known])
    except InputError as error:
        problems.append(error)
    return values


def _file_keys(si_name: str) -> list[str]:
    """Every key a file may give the quantity ``si_name`` by (``hop_latency_s``: ``hop_latency_ns``,
    ``hop_latency_us``, ``hop_latency_s``), for suggestions."""
    stem, si_suffix = next(((si_name.removesuffix(si), si) for _, (si, _) in
                            sorted(UNITS.items(), key=lambda item: -len(item[1][0])) if si_name.endswith(si)),
                           (si_name, ""))
    return [stem + unit for unit, (si, _) in UNITS.items() if si == si_suffix] if si_suffix else [si_name]


def _read_value(table: Table, key: str, annotation: str, repeated: bool) -> Any:
    """The value of ``key`` as its field's ``annotation`` asks.

    Raises:
        InputError: a quantity given twice (``repeated``), wrong type or range.
    """
    if repeated:
        raise table.error(f"key '{key}' repeats quantity '{split_unit(key)[0]}' given in another unit")
    if annotation in CHOICES:
        return table.take_string(key, CHOICES[annotation])
    if annotation == POINTS:
        return table.take_points(key)
    return table.take_quantity(key, integer=annotation in ("int", "int | None"))[1]


def _hint(si_name: str) -> str:
    """A file key for a missing SI field: ``hop_latency_s`` -> ``hop_latency_us``."""
    for si_suffix, unit in _UNIT_HINT.items():
        if si_name.endswith(si_suffix):
            return f"{si_name.removesuffix(si_suffix)}_{unit}"
    return si_name
