"""The hardware record carved by what it is: the network holds only the fabric, memory and compute
facts live in their own records, and every hardware file still loads and writes back."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from fixtures import cluster_hardware, mesh_hardware

from simulator.errors import InputError
from simulator.hardware import hardware_from_tables, hardware_presets, hardware_tables, load_hardware
from simulator.hardware.spec import NETWORK_KINDS, Dram, GemmTiling, Hbm, Memory, Network, Sram
from simulator.network.mesh import Mesh

STUDY_FILES = sorted((Path(__file__).parents[2] / "studies" / "hardware").glob("*.toml"))
MACHINES = [*hardware_presets(), *(str(p) for p in STUDY_FILES)]

MEMORY_OR_COMPUTE = ("sram", "hbm", "capacity", "dram_bandwidth", "dram_latency", "dram_access", "dataflow",
                     "peak", "flop", "fidelity", "gemm", "streaming_multiprocessors")
"""Fragments of a field name that state a memory or compute fact (a mesh's ``dram_ports_per_die``
and ``dram_port_cores`` say where the fabric reaches DRAM, not what the DRAM is)."""

MOVED_METHODS = ("sram_dataflow", "device_memory_bytes", "operand_bandwidth_bytes_per_s", "memory_pool_bytes",
                 "gemm_efficiency")
"""What the network record offered before the carving and now belongs to memory or compute."""


def test_study_hardware_files_are_found():
    assert len(STUDY_FILES) >= 2


@pytest.mark.parametrize("kind", sorted(NETWORK_KINDS))
def test_every_network_kind_holds_only_the_fabric(kind):
    record = NETWORK_KINDS[kind]
    names = [f.name for f in dataclasses.fields(record)]  # type: ignore[arg-type]
    assert names and not [n for n in names if any(part in n for part in MEMORY_OR_COMPUTE)]
    assert not [m for m in MOVED_METHODS if hasattr(record, m)]


@pytest.mark.parametrize("name", MACHINES)
def test_every_machine_file_loads_into_carved_records_and_writes_back(name):
    hardware = load_hardware(name)
    network, memory, compute = hardware.network, hardware.memory, hardware.compute
    assert isinstance(network, Network) and not {f.name for f in dataclasses.fields(network)} & {
        f.name for record in (Sram, Dram, Hbm, GemmTiling) for f in dataclasses.fields(record)}
    on_mesh = isinstance(network, Mesh)
    assert (memory.dram is not None, memory.hbm is not None) == (on_mesh, not on_mesh)
    assert (compute.gemm_tiling is not None) == (hardware.kind == "cluster")
    assert memory.sram_dataflow() == (memory.dram.dataflow if on_mesh else None)
    assert hardware_from_tables(hardware_tables(hardware), hardware.name, "written") == hardware


def test_a_cores_memory_is_its_share_of_the_dies_dram_and_a_gpus_its_hbm():
    wafer, h100 = load_hardware("wafer"), load_hardware("h100-cluster")
    assert wafer.device_memory_bytes() == pytest.approx(256e9 / 16)  # PALM Table VI: 256 GB per die of 16 cores
    assert wafer.memory_pool_bytes(32) is None  # nearest access: each core its share
    assert wafer.memory.operand_bandwidth_bytes_per_s == wafer.memory.sram.bandwidth_bytes_per_s
    assert h100.device_memory_bytes() == 80e9 and h100.memory_pool_bytes(8) is None
    assert h100.memory.operand_bandwidth_bytes_per_s == 3350e9


@pytest.mark.parametrize("devices", [1, 4, 5, 8, 9, 16])
def test_interleaved_dram_pools_the_capacity_of_every_die_the_devices_touch(devices):
    hardware = mesh_hardware(dies=(2, 2), cores=(2, 2), dram_capacity=1e9)
    dram = dataclasses.replace(hardware.memory.dram, access="interleaved")
    pooled = dataclasses.replace(hardware, memory=dataclasses.replace(hardware.memory, dram=dram))
    assert pooled.memory_pool_bytes(devices) == math.ceil(devices / 4) * 1e9
    assert pooled.device_memory_bytes() == 1e9 / 4


def test_gemm_tiling_is_compute_and_a_mesh_has_none():
    assert mesh_hardware().compute.gemm_efficiency(100, 100) == 1.0
    compute = cluster_hardware().compute
    assert compute.gemm_efficiency(100, 100) == pytest.approx(100 * 100 / (108 * 256 * 128))


@pytest.mark.parametrize(("dram", "hbm"), [(False, False), (True, True)])
def test_memory_needs_exactly_one_off_chip_level(dram, hbm):
    sram = Sram(capacity_bytes=1e6, bandwidth_bytes_per_s=1e12)
    levels = {"dram": Dram(bandwidth_bytes_per_s=1e11, latency_s=1e-7, capacity_bytes=1e9, dataflow="tiled")
              if dram else None, "hbm": Hbm(bandwidth_bytes_per_s=1e12, capacity_bytes=1e10) if hbm else None}
    with pytest.raises(InputError, match="one off-chip level"):
        Memory(sram=sram, **levels)
