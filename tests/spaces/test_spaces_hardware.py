"""The hardware space of co-design (spaces.hardware): every point is a machine the simulator
accepts and writes back as a hardware file."""

from __future__ import annotations

import math
import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import InputError, hardware_from_tables, hardware_to_toml, load_hardware
from spaces.hardware import PROPOSED, HardwareSpace, build_hardware, enumerate_hardware

BASE = load_hardware("wafer")
CHOICES = {"dies": ("5x4", "2x2"), "cores": ("4x4", "3x5"), "sram_MB_per_core": (2.5, 3.75),
           "TFLOP_per_s_per_core": (8, 16, 32), "dram_ports_per_die": (1, 2),
           "dram_bandwidth_GB_per_s": (256, 512), "intra_die_link_bandwidth_GB_per_s": (512, 1024),
           "inter_die_link_bandwidth_GB_per_s": (128, 256)}
SPACE = HardwareSpace(BASE, CHOICES)
POINTS = enumerate_hardware(SPACE)


def test_the_space_enumerates_every_combination_once():
    assert len(POINTS) == SPACE.size == math.prod(len(v) for v in CHOICES.values())
    assert len({tuple(p.items()) for p in POINTS}) == len(POINTS)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(POINTS))
def test_every_point_is_a_machine_that_writes_back_as_a_hardware_file(params):
    hardware = build_hardware(SPACE, params)
    assert hardware_from_tables(tomllib.loads(hardware_to_toml(hardware)), hardware.name, "t") == hardware
    mesh = hardware.network
    assert (mesh.dies_x, mesh.dies_y) == tuple(int(v) for v in params["hw.dies"].split("x"))
    assert hardware.memory.sram.capacity_bytes == params["hw.sram_MB_per_core"] * 1e6
    assert hardware.memory.dram.bandwidth_bytes_per_s == params["hw.dram_bandwidth_GB_per_s"] * 1e9


def test_the_matrix_engine_scales_every_precision_and_the_sram_bandwidth_by_its_square_root():
    hardware = build_hardware(SPACE, {"hw.TFLOP_per_s_per_core": 32})
    assert hardware.compute.peak_flop_per_s == {p: 2 * v for p, v in BASE.compute.peak_flop_per_s.items()}
    sram_bandwidth = BASE.memory.sram.bandwidth_bytes_per_s
    assert hardware.memory.sram.bandwidth_bytes_per_s == pytest.approx(sram_bandwidth * math.sqrt(2))


def test_a_changed_value_cites_the_search_and_the_others_keep_their_source():
    text = hardware_to_toml(build_hardware(SPACE, {"hw.sram_MB_per_core": 2.5}))
    tables = tomllib.loads(text)
    assert tables["device"]["sram_bytes_source"] == PROPOSED
    assert tables["mesh"]["dies_x_source"] == BASE.sources["mesh.dies_x"]


@pytest.mark.parametrize(("choices", "message"), [
    ({"cores": ("4by4",)}, "AxB"), ({"sram_MB_per_core": (0,)}, "positive"), ({"dram_ports_per_die": (3,)}, "1 or 2"),
    ({"hbm": (1,)}, "unknown dimension 'hbm'"), ({"sram_MB_per_core": ()}, "at least one"),
])
def test_bad_choices_are_refused_with_the_dimension(choices, message):
    with pytest.raises(InputError, match=message):
        HardwareSpace(BASE, choices)


def test_a_gpu_cluster_is_not_a_base_for_mesh_chips():
    with pytest.raises(InputError, match="mesh"):
        HardwareSpace(load_hardware("a100-cluster"), {"sram_MB_per_core": (1,)})
