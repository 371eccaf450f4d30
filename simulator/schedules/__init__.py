"""Pipeline schedules: the order in which each pipeline stage runs forward and backward passes.

Each schedule is a small class behind :class:`PipelineSchedule`; the engine runs the order as a
SimPy process per stage, so bubbles come out of the dependencies, not from a formula.

* :class:`GPipe` (Huang et al., NeurIPS'19): all forwards, then all backwards.
* :class:`OneFOneB` (PipeDream-Flush; Narayanan et al. SC'21 §2.2.1): ``p - i - 1`` warm-up
  forwards on stage ``i``, then one forward / one backward, then the cool-down backwards.
* :class:`InterleavedOneFOneB` (Narayanan et al. SC'21 §2.2.2): ``v`` model chunks per stage,
  the order of Megatron-LM's ``forward_backward_pipelining_with_interleaving``.
* :class:`ZeroBubbleH1` (Qi et al. ICLR'24 §2.1): 1F1B with the backward split into its input-
  and weight-gradient halves, the weight half deferred into the cool-down.

With uniform stages of forward time ``t_f`` and backward time ``t_b``, GPipe and 1F1B take
``(m + p - 1)(t_f + t_b)`` and leave a bubble fraction ``(p - 1)/(m + p - 1)``; interleaving
divides the bubble by ``v`` (Narayanan et al. SC'21 §2.2).
"""

from __future__ import annotations

from simulator.errors import InputError
from simulator.passes import Pass, PassKind, activation_change

__all__ = ["Pass", "PassKind", "PipelineSchedule", "make_schedule", "SCHEDULE_CLASSES"]
F, B = PassKind.FORWARD, PassKind.BACKWARD


class PipelineSchedule:
    """Base: the per-stage order of passes for ``pp`` stages and ``num_chunks`` chunks."""

    name = "base"
    defers_weight_gradients = False
    """Whether the order runs a backward as its two halves (:attr:`PassKind.BACKWARD_INPUT`
    and :attr:`PassKind.BACKWARD_WEIGHT`), the weight half deferred; else as one
    :attr:`PassKind.BACKWARD`. The closed-form estimate (:meth:`simulator.engine.Engine.estimate`)
    reads it."""

    def __init__(self, pp: int, num_chunks: int = 1, extra_warmup: int = 0) -> None:
        self.pp = pp
        self.num_chunks = num_chunks
        self.extra_warmup = extra_warmup
        """Forwards a 1F1B order runs before its first backward beyond the schedule's own: one
        where the 1F1B phase merges each forward with the next backward (Megatron-Core's
        ``--overlap-moe-expert-parallel-comm``: "we schedule one extra micro-batch forward step
        before the 1f1b stages. This is needed to ensure the forward and backward computations
        are independent", ``pipeline_parallel/schedules.py``; one stage's
        ``combined_1f1b_schedule_for_no_pipelining`` likewise runs one forward first)."""

    def order(self, stage: int, num_microbatches: int) -> list[Pass]:
        """Passes of ``stage`` in execution order (training)."""
        raise NotImplementedError

    def forward_order(self, stage: int, num_microbatches: int) -> list[Pass]:
        """Passes of ``stage`` for inference: the forwards of :meth:`order`, in order."""
        return [p for p in self.order(stage, num_microbatches) if p.kind is PassKind.FORWARD]

    def max_in_flight(self, stage: int, num_microbatches: int) -> list[int]:
        """Microbatches whose activations each chunk of ``stage`` holds when the stage holds the
        most in all (its chunks' shares of the layers being alike, that is its memory peak; the
        chunks' own peaks fall at different times and would overstate it)."""
        live, peak = [0] * self.num_chunks, [0] * self.num_chunks
        for p in self.order(stage, num_microbatches):
            live[p.chunk] += activation_change(p.kind)
            if sum(live) > sum(peak):
                peak = list(live)
        return peak


class GPipe(PipelineSchedule):
    """All forwards, then all backwards (Huang et al. 2019)."""

    name = "gpipe"

    def order(self, stage: int, num_microbatches: int) -> list[Pass]:
        m = range(num_microbatches)
        return [Pass(F, i, 0) for i in m] + [Pass(B, i, 0) for i in m]

    def max_in_flight(self, stage: int, num_microbatches: int) -> list[int]:
        return [num_microbatches]


class OneFOneB(PipelineSchedule):
    """PipeDream-Flush 1F1B (Narayanan et al. SC'21 §2.2.1); stage i holds ``min(p - i, m)``
    (one more with an :attr:`~PipelineSchedule.extra_warmup` forward)."""

    name = "1f1b"

    def order(self, stage: int, num_microbatches: int) -> list[Pass]:
        m = num_microbatches
        warmup = min(self.pp - stage - 1 + self.extra_warmup, m)
        passes = [Pass(F, i, 0) for i in range(warmup)]
        for i in range(m - warmup):
            passes += [Pass(F, warmup + i, 0), Pass(B, i, 0)]
        passes += [Pass(B, i, 0) for i in range(m - warmup, m)]
        return passes

    def max_in_flight(self, stage: int, num_microbatches: int) -> list[int]:
        return [min(self.pp - stage + self.extra_warmup, num_microbatches)]


class InterleavedOneFOneB(PipelineSchedule):
    """Interleaved 1F1B with ``v`` chunks per stage, as Megatron-LM orders it.

    Virtual microbatch ``k`` (0 <= k < m v) of stage ``i`` is chunk ``(k // p) % v`` of
    microbatch ``(k // (p v)) p + k % p`` for forwards; backwards walk chunks in reverse.
    Warm-up: ``(p - i - 1) * 2 + (v - 1) * p`` forwards, capped at ``m v``.
    """

    name = "interleaved-1f1b"

    def _virtual(self, k: int, forward: bool) -> tuple[int, int]:
        p, v = self.pp, self.num_chunks
        chunk = (k // p) % v
        microbatch = (k // (p * v)) * p + k % p
        return microbatch, chunk if forward else v - 1 - chunk

    def order(self, stage: int, num_microbatches: int) -> list[Pass]:
        p, v = self.pp, self.num_chunks
        total = num_microbatches * v
        warmup = min((p - stage - 1) * 2 + (v - 1) * p + self.extra_warmup, total)
        passes = [Pass(F, *self._virtual(k, True)) for k in range(warmup)]
        for k in range(total - warmup):
            passes.append(Pass(F, *self._virtual(warmup + k, True)))
            passes.append(Pass(B, *self._virtual(k, False)))
        passes += [Pass(B, *self._virtual(k, False)) for k in range(total - warmup, total)]
        return passes

    def max_in_flight(self, stage: int, num_microbatches: int) -> list[int]:
        """:meth:`PipelineSchedule.max_in_flight` without walking the order: the stage holds the
        most right after the first forward past its warm-up (each backward after it follows a
        forward), so the chunks of its first ``warmup + 1`` forwards (all of them, when the
        warm-up is every forward)."""
        p, v = self.pp, self.num_chunks
        total = num_microbatches * v
        held = min((p - stage - 1) * 2 + (v - 1) * p + self.extra_warmup + 1, total)
        peak = [0] * v
        for k in range(held):
            peak[(k // p) % v] += 1
        return peak


class ZeroBubbleH1(PipelineSchedule):
    """ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR'24 §2.1): 1F1B with each
    backward split into its input-gradient half B, which the previous stage waits for, and its
    weight-gradient half W, which nothing waits for. Stage ``i`` runs 1F1B's ``p - i - 1``
    warm-up forwards and its order of forwards and B passes, and runs ``W`` of microbatch
    ``k - i`` right after ``B`` of microbatch ``k``: the later a stage, the more W passes it
    defers, and the rest fill the cool-down, so every stage holds ``min(p, m)`` microbatches
    whose weight gradients are pending (the first stage's 1F1B peak, Qi et al. §2.1).

    With uniform stages, ``m >= p`` and ``t_w <= min(t_f, t_b)`` it takes
    ``m (t_f + t_b + t_w) + (p - 1)(t_f + t_b - t_w)``: a bubble of ``(p - 1)(t_f + t_b - t_w)``
    against 1F1B's ``(p - 1)(t_f + t_b + t_w)``, a third of it when the three are equal, as
    Qi et al. §2.1 (Figure 3) state; the expression for unequal ``t_f, t_b, t_w`` and its
    condition were checked on the dependency graph (``tests/simulator/test_zero_bubble.py``).
    With unequal stages ZB-H1 can be slower than 1F1B: a stage with long W passes ends on the
    ``i`` it deferred.
    """

    name = "zb-h1"
    defers_weight_gradients = True

    def order(self, stage: int, num_microbatches: int) -> list[Pass]:
        m = num_microbatches
        warmup = min(self.pp - stage - 1, m)
        passes = [Pass(F, i, 0) for i in range(warmup)]
        for k in range(m):
            if k < m - warmup:
                passes.append(Pass(F, warmup + k, 0))
            passes.append(Pass(PassKind.BACKWARD_INPUT, k, 0))
            if k >= stage:
                passes.append(Pass(PassKind.BACKWARD_WEIGHT, k - stage, 0))
        return passes + [Pass(PassKind.BACKWARD_WEIGHT, k, 0) for k in range(max(m - stage, 0), m)]

    def max_in_flight(self, stage: int, num_microbatches: int) -> list[int]:
        return [min(self.pp, num_microbatches)]


SCHEDULE_CLASSES = {cls.name: cls for cls in (GPipe, OneFOneB, InterleavedOneFOneB, ZeroBubbleH1)}


def make_schedule(name: str, pp: int, num_chunks: int = 1, extra_warmup: int = 0) -> PipelineSchedule:
    """The schedule named ``name`` for ``pp`` stages.

    Raises:
        InputError: unknown name.
    """
    if name not in SCHEDULE_CLASSES:
        raise InputError(f"strategy: `schedule` must be one of {sorted(SCHEDULE_CLASSES)}, got {name!r}")
    return SCHEDULE_CLASSES[name](pp, num_chunks, extra_warmup)
