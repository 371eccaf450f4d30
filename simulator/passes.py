"""Pass kinds: the closed set of work a pipeline stage runs, and one entry of a stage's order.

A schedule (:mod:`simulator.schedules`) emits :class:`Pass` entries; the engine
(:mod:`simulator.engine`) costs each by its :class:`PassKind` (:meth:`StageCost.pass_cost
<simulator.costs.StageCost.pass_cost>`) and the trace and timeline label and colour it by kind.
Splitting the backward into its input-gradient (B) and weight-gradient (W) halves follows Qi et al.,
"Zero Bubble Pipeline Parallelism", ICLR'24 (arXiv 2401.10241) §2.
"""

from __future__ import annotations

import enum
from typing import NamedTuple


class PassKind(enum.Enum):
    """What a pass computes. The value is its one-letter label in traces and timelines."""

    FORWARD = "F"
    """The forward pass of one microbatch."""
    BACKWARD = "B"
    """The full backward of one microbatch: input and weight gradients together, recompute
    first (what GPipe and 1F1B run)."""
    BACKWARD_INPUT = "Bi"
    """The input-gradient half of a backward (Qi et al.'s B), recompute first: what the previous
    stage waits for."""
    BACKWARD_WEIGHT = "W"
    """The weight-gradient half of a backward (Qi et al.'s W): after its microbatch's
    :attr:`BACKWARD_INPUT` on the same stage, nothing waits for it but the gradient update."""
    RECOMPUTE = "R"
    """The re-run forward operators at the start of a backward (a part of a backward pass's
    time in traces and timelines, not scheduled on its own)."""
    OPTIMIZER_UPDATE = "U"
    """The stage's data-parallel collectives and optimizer step at the end of an iteration."""
    # Inference steps (PREFILL, DECODE) would join here; inference runs FORWARD passes today.

    @property
    def is_backward(self) -> bool:
        """A pass that waits for the next stage's gradient and sends one to the previous stage."""
        return self in (PassKind.BACKWARD, PassKind.BACKWARD_INPUT)

    @property
    def label(self) -> str:
        """Readable name, for traces and legends."""
        return PASS_LABELS[self]


PASS_LABELS = {
    PassKind.FORWARD: "forward",
    PassKind.BACKWARD: "backward",
    PassKind.BACKWARD_INPUT: "input-gradient backward",
    PassKind.BACKWARD_WEIGHT: "weight-gradient backward",
    PassKind.RECOMPUTE: "recompute",
    PassKind.OPTIMIZER_UPDATE: "gradient update",
}


class Pass(NamedTuple):
    """One entry of a stage's order: its ``kind``, ``microbatch`` and model ``chunk``."""

    kind: PassKind
    microbatch: int
    chunk: int


def activation_change(kind: PassKind) -> int:
    """Microbatches whose activations a pass of ``kind`` adds to (+1) or frees from (-1) its
    stage. A microbatch stays in flight until its weight gradient is computed: its full backward,
    or its :attr:`PassKind.BACKWARD_WEIGHT`, which needs the inputs of the weighted operators
    (counted here as the whole microbatch's activations, an upper bound)."""
    match kind:
        case PassKind.FORWARD:
            return 1
        case PassKind.BACKWARD | PassKind.BACKWARD_WEIGHT:
            return -1
        case PassKind.BACKWARD_INPUT | PassKind.RECOMPUTE | PassKind.OPTIMIZER_UPDATE:
            return 0
