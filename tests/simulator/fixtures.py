"""Small machines and synthetic stage costs for closed-form tests."""

from __future__ import annotations

from simulator.costs import MemoryBreakdown, PassCost, StageCost
from simulator.hardware.spec import Calibration, Compute, Dram, GemmTiling, Hardware, Hbm, Memory, Sram
from simulator.network.cluster import Cluster
from simulator.network.mesh import Mesh
from simulator.network.torus import Torus

IDEAL = Calibration(gemm_efficiency=1.0, memory_bound_efficiency=1.0, collective_efficiency=1.0,
                    p2p_efficiency=1.0, kernel_overhead_s=0.0)


def mesh_hardware(*, dies=(2, 2), cores=(2, 2), intra=100e9, inter=50e9, hop=1e-9,
                  dram=200e9, dram_capacity=1e12) -> Hardware:
    """A small ideal mesh machine (all efficiencies 1)."""
    return Hardware(
        name="test-mesh", compute=Compute(peak_flop_per_s={"fp16": 1e12}), calibration=IDEAL,
        memory=Memory(sram=Sram(capacity_bytes=1e6, bandwidth_bytes_per_s=1e12),
                      dram=Dram(bandwidth_bytes_per_s=dram, latency_s=1e-7, capacity_bytes=dram_capacity,
                                dataflow="palm-algorithm-1")),
        network=Mesh(dies_x=dies[0], dies_y=dies[1], cores_x=cores[0], cores_y=cores[1],
                     intra_die_link_bandwidth_bytes_per_s=intra, inter_die_link_bandwidth_bytes_per_s=inter,
                     hop_latency_s=hop, dram_ports_per_die=2),
    )


def cluster_hardware(*, nodes=2, gpus=8, nic_efficiency=1.0) -> Hardware:
    """A small ideal GPU cluster (its NICs reach ``nic_efficiency`` of line rate)."""
    return Hardware(
        name="test-cluster", calibration=IDEAL,
        compute=Compute(peak_flop_per_s={"fp16": 100e12},
                        gemm_tiling=GemmTiling(streaming_multiprocessors=108, gemm_tile_rows=256,
                                               gemm_tile_columns=128)),
        memory=Memory(sram=Sram(capacity_bytes=40e6, bandwidth_bytes_per_s=5e12),
                      hbm=Hbm(bandwidth_bytes_per_s=2e12, capacity_bytes=80e9)),
        network=Cluster(nodes=nodes, gpus_per_node=gpus, intra_node_bandwidth_bytes_per_s=300e9,
                        inter_node_bandwidth_bytes_per_s=25e9, intra_node_latency_s=2e-6,
                        inter_node_latency_s=5e-6, inter_node_efficiency=nic_efficiency),
    )


def uniform_cost(forward_s: float, backward_s: float, send_bytes: float = 0.0, *,
                 weight_gradient_s: float | None = None) -> StageCost:
    """A stage with fixed compute times, no collectives, no DRAM traffic; the backward's
    weight-gradient half takes ``weight_gradient_s`` (default half the backward) and its
    input-gradient half the rest."""
    empty = PassCost(compute_s=0.0, dram_bytes=0.0, tp_collectives=(), segments=1, flops=0.0)
    weight_s = backward_s / 2 if weight_gradient_s is None else weight_gradient_s
    return StageCost(
        units=("layer",),
        forward=PassCost(compute_s=forward_s, dram_bytes=0.0, tp_collectives=(), segments=1, flops=1.0),
        backward=PassCost(compute_s=backward_s, dram_bytes=0.0, tp_collectives=(), segments=1, flops=2.0),
        backward_input=PassCost(compute_s=backward_s - weight_s, dram_bytes=0.0, tp_collectives=(), segments=1,
                                flops=1.0),
        backward_weight=PassCost(compute_s=weight_s, dram_bytes=0.0, tp_collectives=(), segments=1, flops=1.0),
        optimizer_step=empty, activation_send_bytes=send_bytes, gradient_send_bytes=send_bytes,
        dp_collectives=(), parameters=0.0, model_flops_per_microbatch=3.0, hardware_flops_per_microbatch=3.0,
        memory=MemoryBreakdown(weights_bytes=0.0, gradients_bytes=0.0, optimizer_bytes=0.0,
                               activation_bytes_per_microbatch=0.0, sram_resident_bytes=0.0),
    )


def torus_hardware(*, chips=(4, 4, 1), link=50e9, hop=1e-6) -> Hardware:
    """A small ideal torus of chips (TPU-v4-like, all efficiencies 1)."""
    return Hardware(
        name="test-torus", compute=Compute(peak_flop_per_s={"bf16": 275e12}), calibration=IDEAL,
        memory=Memory(sram=Sram(capacity_bytes=128e6, bandwidth_bytes_per_s=1.2e12),
                      hbm=Hbm(bandwidth_bytes_per_s=1.2e12, capacity_bytes=32 * 2**30)),
        network=Torus(chips_x=chips[0], chips_y=chips[1], chips_z=chips[2], link_bandwidth_bytes_per_s=link,
                      hop_latency_s=hop),
    )
