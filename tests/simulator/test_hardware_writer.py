"""A machine written as a hardware file loads back to an equal record (presets and variants)."""

from __future__ import annotations

import dataclasses
import json

import pytest

import simulator
from simulator.hardware.loader import hardware_from_tables
from simulator.hardware.writer import hardware_tables, hardware_to_toml


@pytest.mark.parametrize("name", simulator.hardware_presets())
def test_every_preset_round_trips_with_its_sources(name, tmp_path):
    hardware = simulator.load_hardware(name)
    path = tmp_path / "machine.toml"
    path.write_text(hardware_to_toml(hardware), encoding="utf-8")
    back = simulator.load_hardware(path)
    assert dataclasses.replace(back, name=name) == hardware
    assert back.calibration.sources == hardware.calibration.sources
    assert sorted(back.sources.values()) == sorted(hardware.sources.values())


def test_a_variant_round_trips_through_json_as_best_json_carries_it():
    wafer = simulator.load_hardware("wafer")
    variant = dataclasses.replace(wafer, memory=dataclasses.replace(wafer.memory, sram=dataclasses.replace(
                                      wafer.memory.sram, capacity_bytes=7.5e6)),
                                  network=dataclasses.replace(wafer.network, dies_x=3, cores_y=8))
    tables = json.loads(json.dumps(hardware_tables(variant)))
    back = hardware_from_tables(tables, variant.name, "best.json [hardware]")
    assert back == variant and back.num_devices == 3 * 4 * 4 * 8
