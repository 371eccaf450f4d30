"""A serving stack's data formats, math fidelities and GEMM tiles on a unit's operators.

At inference a serving stack stores each class of weights in a format of its own (tt-metal's
tt_transformers: the MLP's gate and up in ``bfloat4_b``, the rest in ``bfloat8_b``; TensorRT-LLM:
FP8), runs each class's GEMMs at a math fidelity of its own, holds the KV cache in its own
format and picks its GEMM kernel's tile by the product's rows
(:class:`simulator.stacks.spec.Serving`). :func:`serve` rewrites the operators of
:mod:`simulator.workload.operators`, built at the strategy's one precision, accordingly: the
bytes of the weights held and read, the peak of the GEMM, the bytes of the cached keys and
values a decode step reads, and the tile. Training, and a stack without serving keys, keep the
operators as they are.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from simulator.errors import InputError
from simulator.hardware.spec import Hardware
from simulator.network.mesh import Mesh
from simulator.stacks.spec import Serving, Stack
from simulator.strategy import FORMAT_BYTES, WORKING_PRECISION, Strategy
from simulator.workload.operators import Operator, key_length, kv_cache_bytes
from simulator.workload.roofline import format_peak_flop_per_s
from simulator.workload.spec import ModelSpec

OPERATOR_CLASSES: dict[str, str] = {
    **dict.fromkeys(("qkv", "attention_projection", "q_down", "q_up", "q_proj", "kv_down", "kv_up"), "attention"),
    **dict.fromkeys(("mlp_gate", "mlp_up", "mlp_in", "shared_expert_gate", "shared_expert_up"), "mlp_in"),
    **dict.fromkeys(("mlp_out", "shared_expert_out"), "mlp_out"),
    "logits": "logits", "expert_gate": "expert_in", "expert_up": "expert_in", "expert_out": "expert_out"}
"""The class (:data:`simulator.stacks.spec.WEIGHT_CLASSES`) of each weighted GEMM of
:mod:`simulator.workload.operators` by name; the router, a classification head and convolutions
have none (they keep the strategy's precision)."""

CORE_OPERATORS = ("fused_attention", "attention_scores", "attention_values")
"""The attention core's products, which read the cached keys (scores) and values (values)."""

HOST_LOGIT_BYTES = 2
"""Bytes of one logit read back to the host: tt-metal untilizes the LM head's output to bfloat16
before the read (tenstorrent/tt-metal ``models/tt_transformers/tt/model.py``, version of mid-2025:
``ttnn.untilize(tt_logits, use_multicore=True)``, then ``ttnn.to_torch``; ``untilize`` takes
bfloat16)."""

FP8 = "fp8_e4m3"
"""The one-byte FP8 format, whose GEMMs run at the hardware's ``fp8`` peak and FP8 efficiency."""


def operator_class(op: Operator, strategy: Strategy) -> str | None:
    """The serving class of ``op``: its weight class, ``attention_core_decode`` /
    ``attention_core_prefill`` for the attention core's products, None for the rest."""
    if op.name in CORE_OPERATORS:
        return "attention_core_decode" if strategy.decoding else "attention_core_prefill"
    return OPERATOR_CLASSES.get(op.name)


def serve(ops: tuple[Operator, ...], model: ModelSpec, hardware: Hardware, strategy: Strategy,
          stack: Stack, window: int = 0) -> tuple[Operator, ...]:
    """``ops`` as ``stack``'s serving part runs them (the module's docstring); unchanged in
    training or without serving keys. ``window``: the tokens the layer's attention is windowed
    to (0: none), whose cache a decode step reads.

    Raises:
        InputError: a format or fidelity the hardware has no peak for (naming the stack, the
            class and the value).
    """
    serving = stack.serving
    if strategy.training or not serving.active:
        return ops
    return tuple(_served(op, model, hardware, strategy, stack, window) for op in ops)


def _served(op: Operator, model: ModelSpec, hardware: Hardware, strategy: Strategy, stack: Stack,
            window: int) -> Operator:
    serving, kind = stack.serving, operator_class(op, strategy)
    changes: dict[str, Any] = {}
    weight_format = dict(serving.weight_formats).get(kind or "") if op.weight_bytes else None
    if weight_format:
        ratio = FORMAT_BYTES[weight_format] / strategy.bytes_per_element
        changes.update(weight_bytes=op.weight_bytes * ratio, table_bytes=op.table_bytes * ratio,
                       b_bytes_per_element=FORMAT_BYTES[weight_format])
        if weight_format == FP8:
            _need_fp8(hardware, stack, kind)
            changes["fp8"] = True
    fidelity = dict(serving.math_fidelities).get(kind or "")
    fidelity = fidelity if fidelity in hardware.compute.math_fidelity_phases else None
    if op.kind != "memory" and weight_format != FP8 and (fidelity or weight_format):
        precision = weight_format or WORKING_PRECISION.get(strategy.precision, strategy.precision)
        try:
            changes["peak_flop_per_s"] = format_peak_flop_per_s(hardware, precision, fidelity)
        except InputError as error:
            raise InputError(f"stack {stack.name!r}: class {kind!r}: {error}") from None
    if (serving.kv_cache_format or serving.decode_key_chunk) and strategy.decoding and op.name in CORE_OPERATORS:
        changes.update(_kv_read(op, model, strategy, serving, window))
    tile = serving.gemm_tile(op.rows) if op.kind == "gemm" else None
    if tile:
        changes["tile"] = tile
    if op.kind == "gemm" and op.weight_bytes:
        changes.update(_stack_grid(hardware, strategy, serving))
    return replace(op, **changes) if changes else op


def _stack_grid(hardware: Hardware, strategy: Strategy, serving: Serving) -> dict[str, Any]:
    """The grid a weighted GEMM runs on under the stack, where it gives one: a prefill's on its
    grid, operands in DRAM; a decode step's DRAM-sharded on its readers per DRAM port of the chip
    (tt-metal: "There are 12 DRAM readers, each reads a shard from its own DRAM bank. The compute
    kernels are placed on the same coordinate as the DRAM reader", ``tech_reports/
    Saturating_DRAM_bandwidth`` @0c3eb94a), its input and output in SRAM."""
    network = hardware.network
    if strategy.decoding and serving.decode_gemm_readers_per_dram_port and isinstance(network, Mesh):
        return {"grid": (serving.decode_gemm_readers_per_dram_port * network.dram_ports_per_die, 1),
                "grid_in_dram": (False, True, False)}
    if not strategy.decoding and serving.prefill_gemm_grid_x:
        return {"grid": (serving.prefill_gemm_grid_x, serving.prefill_gemm_grid_y)}
    return {}


def _need_fp8(hardware: Hardware, stack: Stack, kind: str | None) -> None:
    if "fp8" not in hardware.compute.peak_flop_per_s or not hardware.calibration.fp8_gemm_efficiency:
        raise InputError(f"stack {stack.name!r}: class {kind!r}: weight format {FP8!r} needs an fp8 peak and"
                         f" fp8_gemm_efficiency, hardware {hardware.name!r} has none")


def _kv_read(op: Operator, model: ModelSpec, strategy: Strategy, serving: Serving,
             window: int) -> dict[str, float]:
    """The input bytes of an attention-core product of a decode step with its cached keys
    (scores) and values (values), or both (fused), in the KV-cache format, and that format's
    bytes per element as its second operand's; with a key chunk, the context rounded up to whole
    chunks is read and multiplied (tt-metal's SDPA decode: "number of chunks in K, where
    k_num_chunks*Sk_chunk_t = PSt", the padded length; tenstorrent/tt-metal
    ``sdpa_decode/device/kernels/dataflow/writer_decode_all.cpp``, 2024), its flops with it."""
    element = FORMAT_BYTES[serving.kv_cache_format or strategy.precision]
    context = key_length(model, strategy, window)
    chunk = serving.decode_key_chunk or context
    padded = math.ceil(context / chunk) * chunk / context
    cached = kv_cache_bytes(model, strategy, window=window)
    keys = cached if model.uses_latent_attention else cached / 2.0
    read = {"fused_attention": cached, "attention_scores": keys, "attention_values": cached - keys}[op.name]
    return {"input_bytes": op.input_bytes + read * (padded * element / strategy.bytes_per_element - 1.0),
            "b_bytes_per_element": element, "flops": op.flops * padded}


def host_sampling_s(model: ModelSpec, strategy: Strategy, stack: Stack) -> float:
    """Host time a decode step of one microbatch adds in series with the device where the stack
    samples on the host (:attr:`simulator.stacks.spec.Serving.sampling`): its users' logits read
    back, ``b V`` of :data:`HOST_LOGIT_BYTES` each at the stack's measured read rate, plus the
    step's fixed host round trip (s); 0 otherwise, and for a prefill or in training.

    The logits are whole on the device read (tt-metal gathers them over the tensor-parallel
    chips before reading one device's copy), so ``tp`` does not divide them."""
    serving = stack.serving
    if not strategy.decoding or serving.sampling != "host":
        return 0.0
    logits_bytes = strategy.microbatch_size * model.vocab_size * HOST_LOGIT_BYTES
    return logits_bytes / serving.host_read_bandwidth_bytes_per_s + serving.host_step_overhead_s


def data_movement(strategy: Strategy, stack: Stack) -> tuple[Operator, ...]:
    """The serving stack's data-movement operations of one decode layer
    (:attr:`simulator.stacks.spec.Serving.decode_data_movement_ops`), as one operator launching
    that many kernels; their kilobytes within the cores' SRAM are not counted. None in a
    prefill, in training, or where the stack gives none."""
    count = stack.serving.decode_data_movement_ops
    if not strategy.decoding or not count:
        return ()
    return (Operator(name="data_movement", kind="memory", flops=0.0, weight_bytes=0.0, input_bytes=0.0,
                     output_bytes=0.0, l1_only=True, launches=count),)
