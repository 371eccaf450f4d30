"""Area and power of a chip from its parts (simulator.hardware.silicon): closed forms, the file's
checks, and the published chips the technology file is checked against."""

from __future__ import annotations

import dataclasses
import math

import pytest

from simulator import InputError, load_hardware
from simulator.hardware.silicon import (
    DEFAULT_TECHNOLOGY,
    TECHNOLOGY_DIR,
    Die,
    Technology,
    check_rows,
    die_cost,
    hardware_cost,
    load_technology,
    mesh_die,
)

UNIT = Technology(name="unit", die_fixed_m2=1.0, core_fixed_m2=2.0, sram_m2_per_byte=3.0,
                  matrix_engine_m2_per_flop_per_s=4.0, router_m2_per_byte_per_s=5.0,
                  dram_phy_m2_per_byte_per_s=6.0, die_to_die_m2_per_byte_per_s=7.0, leakage_W_per_m2=0.5,
                  matrix_engine_J_per_flop=2.0, sram_J_per_byte=3.0, noc_J_per_byte_per_hop=4.0,
                  dram_J_per_byte=5.0, die_to_die_J_per_byte=6.0)
DIE = Die(name="d", dies=3, cores=2, sram_bytes_per_core=1.0, flop_per_s_per_core=1.0, core_link_bytes_per_s=1.0,
          dram_bytes_per_s=1.0, die_to_die_bytes_per_s=1.0, sram_bandwidth_bytes_per_s=1.0, noc_bytes_per_s=1.0)


def test_die_cost_is_the_sum_of_its_parts_times_the_dies():
    cost = die_cost(UNIT, DIE)
    die_area = 1 + 2 * (2 + 3 + 4 + 5) + 6 + 7
    assert cost.area_m2 == pytest.approx(3 * die_area)
    assert cost.power_W == pytest.approx(3 * (0.5 * die_area + 2 * 2 + 3 + 4 + 5 + 6))
    assert sum(cost.area_parts_m2.values()) == pytest.approx(cost.area_m2)
    assert sum(cost.power_parts_W.values()) == pytest.approx(cost.power_W)


def test_more_sram_per_core_costs_its_area_on_every_core():
    more = die_cost(UNIT, dataclasses.replace(DIE, sram_bytes_per_core=2.0))
    assert more.area_m2 - die_cost(UNIT, DIE).area_m2 == pytest.approx(3 * 2 * 1.0 * 3.0)


def test_the_wafer_maps_onto_its_parts():
    wafer = load_hardware("wafer")
    die = mesh_die(wafer)
    assert (die.dies, die.cores) == (20, 16)
    assert die.sram_bytes_per_core == 3.75e6
    assert die.flop_per_s_per_core == 16e12
    assert die.core_link_bytes_per_s == 4 * 1024e9
    assert die.die_to_die_bytes_per_s == 16 * 256e9   # one link per edge core, four edges of 4
    assert die.dram_bytes_per_s == 256e9
    assert die.noc_bytes_per_s == 4 * 1024e9       # the 4 x 4 die's bisection


def test_a_gpu_cluster_is_refused_with_a_reason():
    with pytest.raises(InputError, match="mesh"):
        mesh_die(load_hardware("a100-cluster"))


def test_a_coefficient_without_its_source_names_the_file_and_key(tmp_path):
    source = (TECHNOLOGY_DIR / f"{DEFAULT_TECHNOLOGY}.toml").read_text()
    broken = tmp_path / "t.toml"
    broken.write_text("\n".join(line for line in source.splitlines()
                                if not line.startswith("sram_mm2_per_MiB_source")))
    with pytest.raises(InputError, match=r"t\.toml \[area\].*sram_mm2_per_MiB_source"):
        load_technology(str(broken))


def test_an_unknown_technology_lists_the_known_ones():
    with pytest.raises(InputError, match="tsmc-n7"):
        load_technology("no-such-node")


def test_the_area_model_is_within_20_percent_of_the_published_die_areas():
    """Issue target: the area model within 20% of at least three real chips' published die areas."""
    rows = check_rows(load_technology())
    independent = [row for row in rows if row.independent_area]
    assert len(independent) >= 3
    for row in independent:
        assert abs(row.area_error) <= 0.20, (row.name, row.area_error)
    assert all(math.isfinite(row.power_error) for row in rows)


def test_the_base_wafer_has_a_finite_positive_cost():
    cost = hardware_cost(load_hardware("wafer"), load_technology())
    assert cost.area_m2 > 0 and cost.power_W > 0
