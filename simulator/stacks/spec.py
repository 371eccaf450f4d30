"""What a training or serving framework changes on the same hardware: the software stack as data.

A :class:`Stack` holds how a framework (Megatron-Core, PyTorch FSDP2, DeepSpeed...) runs the
data-parallel and ZeRO-3 collectives of a plan, what its selective recompute re-runs and what
its element-wise kernels move, and how a serving stack (tt-metal's
tt_transformers, TensorRT-LLM...) stores and multiplies an LLM's weights and KV cache at
inference (:class:`Serving`); the hardware file keeps what the silicon does, the strategy what
the user chose. Its defaults are Megatron-Core's, the behaviour the simulator
had before stacks existed (:data:`MEGATRON_CORE`). Every value a stack file gives cites a
source (:mod:`simulator.stacks.loader`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from simulator.errors import InputError
from simulator.strategy import FORMAT_BYTES, MATH_FIDELITIES

Reshard = Literal["always", "except_last", "never"]
Gather = Literal["layer", "parameter"]
Reduction = Literal["reduce_scatter", "all_reduce"]
RESHARDS: tuple[Reshard, ...] = ("always", "except_last", "never")
GATHERS: tuple[Gather, ...] = ("layer", "parameter")
REDUCTIONS: tuple[Reduction, ...] = ("reduce_scatter", "all_reduce")
Sampling = Literal["device", "host"]
SAMPLINGS: tuple[Sampling, ...] = ("device", "host")
SelectivePolicy = Literal["attention_core", "alternate_matmuls"]
SELECTIVE_POLICIES: tuple[SelectivePolicy, ...] = ("attention_core", "alternate_matmuls")

ELEMENTWISE_CLASSES: tuple[str, ...] = ("norm", "final_norm", "swiglu", "residual", "rope", "cross_entropy")
"""Element-wise operator classes a training stack gives its HBM traffic: ``norm`` (a layer's two
RMSNorms or LayerNorms), ``final_norm`` (the one before the logits), ``swiglu`` (the gated MLP's
SiLU-and-multiply), ``residual`` (a layer's two residual adds), ``rope`` (the rotary embedding of
the queries and keys, an operator only where a stack gives it), ``cross_entropy`` (the loss over
the vocabulary)."""

WEIGHT_CLASSES: tuple[str, ...] = ("attention", "mlp_in", "mlp_out", "logits", "expert_in", "expert_out")
"""Operator classes a serving stack gives a weight format: ``attention`` (QKV, or MLA's down/up
projections, and the output projection), ``mlp_in`` (gate and up, or GELU's first GEMM; shared
experts too), ``mlp_out`` (down), ``logits`` (the LM head), ``expert_in`` / ``expert_out`` (a
Mixture-of-Experts layer's routed experts' gate/up and down)."""

FIDELITY_CLASSES: tuple[str, ...] = (*WEIGHT_CLASSES, "attention_core_decode", "attention_core_prefill")
"""Operator classes a serving stack gives a math fidelity: the weight classes and the attention
core (scores and values, tt-metal's SDPA) in a decode step or a prefill."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Serving:
    """How a serving stack runs an LLM's inference (nothing here applies to training).

    Attributes:
        weight_formats: ``(class, format)`` of every class of :data:`WEIGHT_CLASSES` the stack
            stores in its own format (a precision of :data:`simulator.strategy.FORMAT_BYTES`):
            its weights are held and read in it, and its GEMM runs at that format's peak
            (``fp8_e4m3``: the FP8 peak and FP8 GEMM efficiency). Classes not given keep the
            strategy's precision.
        math_fidelities: ``(class, fidelity)`` of :data:`FIDELITY_CLASSES`: the class's GEMMs
            run at that fidelity's passes (on hardware that lists fidelities).
        kv_cache_format: the format the KV cache is held and read in (None: the strategy's).
        small_m_gemm_tiles: ``(largest rows, tile rows, tile columns)``, increasing: a GEMM of
            at most that many output rows is cut into tiles of that shape (a serving GEMM
            kernel's dispatch by ``M``), replacing the hardware's tile for its quantization.
        sampling: where a decode step picks its next tokens: ``device`` (nothing leaves the
            machine) or ``host``: every step reads the users' logits back to the host
            (:data:`simulator.workload.formats.HOST_LOGIT_BYTES` each) at
            ``host_read_bandwidth_bytes_per_s`` and pays ``host_step_overhead_s`` of host round
            trip, in series with the device (:func:`simulator.workload.formats.host_sampling_s`).
        host_read_bandwidth_bytes_per_s: the stack's measured device-to-host read rate (bytes/s).
        host_step_overhead_s: a decode step's fixed host time outside the device (s): input
            copy, launch, blocking read.
        decode_key_chunk: keys a decode step's attention kernel reads per chunk: it reads the
            context rounded up to whole chunks (0: the context itself).
        decode_gemm_readers_per_dram_port: where a decode step's weighted GEMMs run:
            DRAM-sharded, each on this many cores per DRAM port of each chip, each core reading
            its weights from its own port and computing there, the input multicast to them and
            output kept in SRAM (0: the tensor-parallel group's own dataflow).
        prefill_gemm_grid_x, prefill_gemm_grid_y: the core grid (columns splitting ``N``, rows
            splitting ``M``) the stack runs each weighted GEMM of a prefill on, whole on each
            chip, its operands and output in DRAM (0: the tensor-parallel group's own dataflow).
        decode_data_movement_ops: device operations the stack runs in each decode layer beyond
            the layer's arithmetic (heads split and concatenated, rotary embedding, cache updates,
            reshards between core grids), each a kernel launch moving kilobytes.

    The :class:`Stack`'s ``sources`` cite each value (``weight_formats.mlp_in``...).

    Raises:
        InputError: an unknown class, format or fidelity, or tiles whose row bounds do not increase.
    """

    weight_formats: tuple[tuple[str, str], ...] = ()
    math_fidelities: tuple[tuple[str, str], ...] = ()
    kv_cache_format: str | None = None
    small_m_gemm_tiles: tuple[tuple[int, int, int], ...] = ()
    sampling: Sampling = "device"
    host_read_bandwidth_bytes_per_s: float = 0.0
    host_step_overhead_s: float = 0.0
    decode_key_chunk: int = 0
    decode_data_movement_ops: int = 0
    decode_gemm_readers_per_dram_port: int = 0
    prefill_gemm_grid_x: int = 0
    prefill_gemm_grid_y: int = 0

    def __post_init__(self) -> None:
        checks = (("weight_formats", self.weight_formats, WEIGHT_CLASSES, tuple(FORMAT_BYTES)),
                  ("math_fidelities", self.math_fidelities, FIDELITY_CLASSES, MATH_FIDELITIES))
        for key, pairs, classes, values in checks:
            for kind, value in pairs:
                if kind not in classes or value not in values:
                    raise InputError(f"stack: `{key}` takes classes {list(classes)} and values {list(values)},"
                                     f" got {kind!r} = {value!r}")
        if self.kv_cache_format is not None and self.kv_cache_format not in FORMAT_BYTES:
            raise InputError(f"stack: `kv_cache_format` must be one of {list(FORMAT_BYTES)}, got"
                             f" {self.kv_cache_format!r}")
        if self.sampling not in SAMPLINGS:
            raise InputError(f"stack: `sampling` must be one of {list(SAMPLINGS)}, got {self.sampling!r}")
        if self.sampling == "host" and self.host_read_bandwidth_bytes_per_s <= 0:
            raise InputError("stack: `sampling = \"host\"` needs `host_read_bandwidth_GB_per_s` (the logits' read"
                             " rate)")
        if bool(self.prefill_gemm_grid_x) != bool(self.prefill_gemm_grid_y):
            raise InputError("stack: `prefill_gemm_grid_x` and `prefill_gemm_grid_y` are given together, got"
                             f" {self.prefill_gemm_grid_x} x {self.prefill_gemm_grid_y}")
        bounds = [bound for bound, _, _ in self.small_m_gemm_tiles]
        if bounds != sorted(set(bounds)):
            raise InputError(f"stack: `small_m_gemm_tiles` must list increasing row bounds, got {bounds}")

    @property
    def active(self) -> bool:
        """The stack changes something at inference (any key given)."""
        return bool(self.weight_formats or self.math_fidelities or self.kv_cache_format or self.small_m_gemm_tiles
                    or self.sampling == "host" or bool(self.decode_key_chunk)
                    or bool(self.decode_data_movement_ops) or bool(self.prefill_gemm_grid_x)
                    or bool(self.decode_gemm_readers_per_dram_port))

    def gemm_tile(self, rows: float) -> tuple[int, int] | None:
        """The ``(rows, columns)`` tile of a GEMM of ``rows`` output rows, None past the last bound."""
        return next(((r, c) for bound, r, c in self.small_m_gemm_tiles if rows <= bound), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class Stack:
    """A framework's behaviour on a plan's ZeRO-3 (fully sharded) collectives, its selective
    recompute and its element-wise kernels' traffic.

    Attributes:
        name: the preset or file stem (``megatron-core``).
        overlap_data_parallel: ZeRO-3's gathers are prefetched under the previous unit's
            compute and its gradient reductions run under the next unit's backward; False: every
            one of them runs exposed, the device idle (a host synchronisation before each gather).
            ZeRO 0-2's gradient collectives run at the iteration's end under every stack.
        reshard_after_forward: which units free their gathered parameters after the forward
            pass and gather them again in the backward: ``always``, ``except_last`` (the last
            unit, whose backward comes first, stays gathered: PyTorch FSDP2 as torchtitan wraps
            it), ``never`` (Llama 3's training; torchtitan with pipeline parallelism).
        zero3_gather: one collective call per unit (``layer``: a transformer block, as FSDP wraps
            it) or per parameter tensor (``parameter``: DeepSpeed 0.3's ``all_gather`` per tensor).
        zero3_persistence_threshold: with ``parameter`` gathers, tensors of fewer elements stay
            whole on every device and are never gathered (DeepSpeed's
            ``stage3_param_persistence_threshold``); 0: none persists.
        zero3_gradient_reduction: how a unit's gradients are reduced over the data-parallel
            group: ``reduce_scatter`` (each device keeps its shard) or ``all_reduce`` (the whole
            gradient everywhere, twice the ring traffic).
        collective_call_overhead_s: host time of one ZeRO-3 collective call that the device
            waits for (s): allocation, launch and synchronisation outside NCCL's own time.
        zero3_gather_rank_overhead_s: host time one ZeRO-3 all-gather call spends per rank of
            its group (s), waited for like ``collective_call_overhead_s``: an all-gather into a
            list of one view per rank (DeepSpeed 0.3's ``narrow`` per rank in Python, then
            PyTorch 1.x ``ProcessGroupNCCL::allgather``'s ``copy_`` per rank out of its flat
            buffer); 0: none (one flat output).
        zero3_reduction_format: the format ZeRO-3 reduces gradients in (a precision of
            :data:`simulator.strategy.FORMAT_BYTES`; None: the strategy's): PyTorch FSDP2's
            ``MixedPrecisionPolicy(reduce_dtype=torch.float32)`` reduce-scatters 4-byte gradients.
        selective_recompute: what ``recompute = "selective"`` re-runs in a layer's backward:
            ``attention_core`` (Korthikanti et al., MLSys'23, §4.2.1: the unfused attention core,
            nothing under fused attention) or ``alternate_matmuls`` (torchtitan's per-op policy:
            every second projection GEMM of the layer in execution order and every element-wise
            operator but the layer's output; :func:`simulator.workload.operators.alternate_matmuls`).
        elementwise_bytes_per_element: ``(class, bytes)`` of :data:`ELEMENTWISE_CLASSES`: the HBM
            bytes one forward of that class moves per output element (bytes/element; its backward
            twice as many), replacing the fused kernel's reads and writes (eager PyTorch runs each
            ``torch`` call as its own kernel). ``rope`` adds the rotary embedding as an operator.
        serving: data formats, fidelities and GEMM tiles at inference (:class:`Serving`);
            the default changes nothing.
        sources: ``key -> citation`` of every value the stack file gave.
    """

    name: str = "megatron-core"
    overlap_data_parallel: bool = True
    reshard_after_forward: Reshard = "always"
    zero3_gather: Gather = "layer"
    zero3_persistence_threshold: float = 0.0
    zero3_gradient_reduction: Reduction = "reduce_scatter"
    collective_call_overhead_s: float = 0.0
    zero3_gather_rank_overhead_s: float = 0.0
    zero3_reduction_format: str | None = None
    selective_recompute: SelectivePolicy = "attention_core"
    elementwise_bytes_per_element: tuple[tuple[str, float], ...] = ()
    serving: Serving = Serving()
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.selective_recompute not in SELECTIVE_POLICIES:
            raise InputError(f"stack: `selective_recompute` must be one of {list(SELECTIVE_POLICIES)}, got"
                             f" {self.selective_recompute!r}")
        if self.zero3_reduction_format is not None and self.zero3_reduction_format not in FORMAT_BYTES:
            raise InputError(f"stack: `zero3_reduction_format` must be one of {list(FORMAT_BYTES)}, got"
                             f" {self.zero3_reduction_format!r}")
        for kind, value in self.elementwise_bytes_per_element:
            if kind not in ELEMENTWISE_CLASSES or not value > 0:
                raise InputError(f"stack: `elementwise_bytes_per_element` takes classes {list(ELEMENTWISE_CLASSES)}"
                                 f" and positive bytes, got {kind!r} = {value!r}")

    def elementwise_bytes(self, kind: str) -> float | None:
        """Bytes per output element a forward of element-wise class ``kind`` moves under this
        stack, None where the stack keeps the fused kernel's."""
        return dict(self.elementwise_bytes_per_element).get(kind)


MEGATRON_CORE = Stack()
"""The default stack: Megatron-Core, the behaviour every hardware file's calibration was built with."""
