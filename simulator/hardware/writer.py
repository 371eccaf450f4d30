"""Write a :class:`~simulator.hardware.spec.Hardware` back as a hardware file.

The inverse of :mod:`simulator.hardware.loader`: every quantity under its SI key (``hop_latency_s``,
``link_bandwidth_bytes_per_s``, ``dram_capacity_bytes``, ``fp16_flop_per_s``; SI units are file
units with factor 1, :data:`simulator.config.UNITS`), so a written file loads back to an equal
record, with the ``_source`` each number was loaded with. A search that proposes machines (hardware
and mapping co-design) writes its answers this way, and a run's ``best.json`` carries its machine.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tomli_w

from simulator.config import SOURCE_SUFFIX, split_unit
from simulator.errors import InputError
from simulator.hardware.layout import IN_KIND_TABLE, SRAM, part_of
from simulator.hardware.spec import Hardware

_UNSOURCED = "written by palm-search: no source recorded for this value"


def _source(sources: dict[str, str], table: str, field_name: str) -> str:
    """The source a quantity was loaded with (whatever unit its file key had)."""
    for key, text in sources.items():
        path, _, file_key = key.rpartition(".")
        if path == table and split_unit(file_key)[1] == field_name:
            return text
    return _UNSOURCED


def _quantities(values: dict[str, Any], table: str, sources: dict[str, str]) -> dict[str, Any]:
    """``values`` under their SI keys, each followed by its ``_source``."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        out[key] = value
        out[key + SOURCE_SUFFIX] = _source(sources, table, key)
    return out


def _fields(record: object, keys: dict[str, str] | None = None) -> dict[str, Any]:
    """The record's fields but ``sources`` and optional ones left at their default, under their
    file keys (``keys``: field -> key; their own names without)."""
    return {(keys or {}).get(f.name, f.name): getattr(record, f.name)
            for f in dataclasses.fields(record)  # type: ignore[arg-type]
            if f.name != "sources" and getattr(record, f.name) != f.default}


def hardware_tables(hardware: Hardware) -> dict[str, Any]:
    """The tables of a hardware file describing ``hardware`` (TOML- and JSON-ready), in the file
    layout of :mod:`simulator.hardware.layout`.

    Raises:
        InputError: the machine lacks a record its kind's table holds (a mesh without DRAM, a
            cluster without HBM or GEMM tiling).
    """
    calibration_sources = {f"calibration.{k}": v for k, v in hardware.calibration.sources.items()}
    compute, kind = hardware.compute, hardware.kind
    peak = {f"{p}_flop_per_s": v for p, v in compute.peak_flop_per_s.items()}
    fidelity = ({"math_fidelity": _quantities(compute.math_fidelity_phases, "device.math_fidelity", hardware.sources)}
                if compute.math_fidelity_phases else {})
    if compute.unpacker is not None:
        fidelity["unpacker"] = _quantities(_fields(compute.unpacker), "device.unpacker", hardware.sources)
    if compute.data_movement is not None:
        fidelity["data_movement"] = _quantities(_fields(compute.data_movement), "device.data_movement",
                                                hardware.sources)
    network = _fields(hardware.network)
    for filed in IN_KIND_TABLE.get(kind, ()):
        record = part_of(hardware, filed)
        if record is None:
            raise InputError(f"hardware: a {kind} file gives its {filed.part[1]} in [{kind}], and"
                             f" {hardware.name!r} has none")
        network.update(_fields(record, filed.keys))
    return {
        "kind": kind,
        "device": {**_quantities(_fields(hardware.memory.sram, SRAM.keys), "device", hardware.sources),
                   "peak": _quantities(peak, "device.peak", hardware.sources), **fidelity},
        kind: _quantities(network, kind, hardware.sources),
        "calibration": _quantities(_fields(hardware.calibration), "calibration", calibration_sources),
    }


def hardware_to_toml(hardware: Hardware) -> str:
    """``hardware`` as the text of a hardware file (loads back to an equal record)."""
    header = f"# {hardware.name}, written by palm-search; quantities in SI units (key suffixes).\n"
    return header + tomli_w.dumps(hardware_tables(hardware))
