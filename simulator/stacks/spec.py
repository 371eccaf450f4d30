"""What a training framework changes on the same hardware: the software stack as data.

A :class:`Stack` holds how a framework (Megatron-Core, PyTorch FSDP2, DeepSpeed...) runs the
data-parallel and ZeRO-3 collectives of a plan; the hardware file keeps what the silicon does,
the strategy what the user chose. Its defaults are Megatron-Core's, the behaviour the simulator
had before stacks existed (:data:`MEGATRON_CORE`). Every value a stack file gives cites a
source (:mod:`simulator.stacks.loader`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Reshard = Literal["always", "except_last", "never"]
Gather = Literal["layer", "parameter"]
Reduction = Literal["reduce_scatter", "all_reduce"]
RESHARDS: tuple[Reshard, ...] = ("always", "except_last", "never")
GATHERS: tuple[Gather, ...] = ("layer", "parameter")
REDUCTIONS: tuple[Reduction, ...] = ("reduce_scatter", "all_reduce")


@dataclass(frozen=True, slots=True, kw_only=True)
class Stack:
    """A framework's behaviour on a plan's ZeRO-3 (fully sharded) collectives.

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
        sources: ``key -> citation`` of every value the stack file gave.
    """

    name: str = "megatron-core"
    overlap_data_parallel: bool = True
    reshard_after_forward: Reshard = "always"
    zero3_gather: Gather = "layer"
    zero3_persistence_threshold: float = 0.0
    zero3_gradient_reduction: Reduction = "reduce_scatter"
    collective_call_overhead_s: float = 0.0
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)


MEGATRON_CORE = Stack()
"""The default stack: Megatron-Core, the behaviour every hardware file's calibration was built with."""
