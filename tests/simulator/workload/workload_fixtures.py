"""Models and machines for the workload tests (built in Python, no loaders)."""

from __future__ import annotations

from simulator.hardware.spec import Calibration, Compute, Dram, GemmTiling, Hardware, Hbm, Memory, Sram
from simulator.network.cluster import Cluster
from simulator.network.mesh import Mesh
from simulator.workload.spec import ModelSpec

CALIBRATION = Calibration(gemm_efficiency=0.8, memory_bound_efficiency=0.7, collective_efficiency=0.9,
                          p2p_efficiency=0.9, kernel_overhead_s=2e-6)


def wafer() -> Hardware:
    """A wafer-like mesh: 5x4 dies of 4x4 cores, 16 TFLOP/s fp16 and 3.75 MB SRAM per core."""
    return Hardware(
        name="wafer-test", compute=Compute(peak_flop_per_s={"fp16": 16e12, "fp32": 4e12, "int8": 32e12}),
        memory=Memory(sram=Sram(capacity_bytes=3.75e6, bandwidth_bytes_per_s=1e12),
                      dram=Dram(bandwidth_bytes_per_s=1e12, latency_s=1e-7, capacity_bytes=64 * 2**30,
                                dataflow="palm-algorithm-1")),
        calibration=CALIBRATION,
        network=Mesh(dies_x=5, dies_y=4, cores_x=4, cores_y=4, intra_die_link_bandwidth_bytes_per_s=1e11,
                     inter_die_link_bandwidth_bytes_per_s=5e10, hop_latency_s=1e-8, dram_ports_per_die=2),
    )


def a100_cluster(nodes: int = 4) -> Hardware:
    """DGX-A100-like nodes: 312 TFLOP/s fp16, 2039 GB/s HBM, 80 GiB per GPU."""
    return Hardware(
        name="a100-test", calibration=CALIBRATION,
        compute=Compute(peak_flop_per_s={"fp16": 312e12, "bf16": 312e12, "fp32": 19.5e12},
                        gemm_tiling=GemmTiling(streaming_multiprocessors=108, gemm_tile_rows=256,
                                               gemm_tile_columns=128)),
        memory=Memory(sram=Sram(capacity_bytes=40e6, bandwidth_bytes_per_s=19e12),
                      hbm=Hbm(bandwidth_bytes_per_s=2039e9, capacity_bytes=80 * 2**30)),
        network=Cluster(nodes=nodes, gpus_per_node=8, intra_node_bandwidth_bytes_per_s=300e9,
                        inter_node_bandwidth_bytes_per_s=25e9, intra_node_latency_s=2e-6,
                        inter_node_latency_s=5e-6, inter_node_efficiency=1.0),
    )


def gpt(*, layers: int = 80, hidden: int = 12288, heads: int = 96, sequence: int = 2048,
        vocab: int = 51200, batch: int = 2304, architecture: str = "gpt") -> ModelSpec:
    """A GPT (default: Megatron's T-145B, Narayanan et al. SC'21 Table 1)."""
    ffn = 4 * hidden if architecture != "llama" else 8 * hidden // 3 // 64 * 64
    return ModelSpec(name=f"{architecture}-{layers}x{hidden}", architecture=architecture, num_layers=layers,
                     hidden_size=hidden, num_heads=heads, ffn_hidden_size=ffn, sequence_length=sequence,
                     vocab_size=vocab, global_batch_size=batch)


def resnet50(batch: int = 256) -> ModelSpec:
    """ResNet-50 on 224x224 images, 1000 classes."""
    return ModelSpec(name="resnet50", architecture="resnet50", num_layers=50, hidden_size=0, num_heads=0,
                     ffn_hidden_size=0, sequence_length=1, vocab_size=1000, global_batch_size=batch,
                     image_size=224)
