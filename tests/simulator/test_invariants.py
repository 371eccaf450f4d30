"""Invariants every result holds, over random legal strategies in both modes, on every kind of
machine and under every network model: no impossible number is ever reported.

- every time is >= 0, and a feasible run takes time;
- the bubble fraction is in [0, 1];
- HFU >= MFU (hardware flops are the model's plus the recomputed forward's);
- under the networks that share resources, no resource carries more than its bandwidth allows;
- an extrapolation simulates fewer microbatches than the batch has (else the batch runs in full);
- throughput is the stated batch over its time, and that time is at least what the batch's own
  work allows: every stage does all of its compute, and the first microbatch passes through the
  compute of every stage in turn (so a batch of one is a latency, not a stream).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from simulator import NETWORKS, InputError, Strategy, load_hardware, load_model, simulate
from spaces import enumerate_degrees, enumerate_microbatch_sizes

MACHINES = {name: load_hardware(name) for name in ("wafer", "wormhole-n150", "a100-cluster", "tpu-v4-cube")}
MODELS = {name: load_model(name) for name in ("T-1.7B", "BERT-base", "LLaMA2-7B")}
RELATIVE = 1e-9
SHARED = ("sharing", "contention")
"""The networks that make transfers share or wait for a resource (``analytical`` lets them
overlap freely, so its utilisation is demand over capacity and may exceed 1)."""


@st.composite
def cases(draw):
    """(model, machine, legal strategy): degrees from :func:`spaces.enumerate_degrees` on 1-16
    devices, a batch of 1-64 samples."""
    model = MODELS[draw(st.sampled_from(sorted(MODELS)))]
    hardware = MACHINES[draw(st.sampled_from(sorted(MACHINES)))]
    batch = draw(st.sampled_from([1, 2, 8, 64]))
    devices = draw(st.sampled_from([1, 2, 4, 8, 16]))
    degrees = enumerate_degrees(model, hardware, devices=devices, global_batch_size=batch)
    assume(degrees)
    d = draw(st.sampled_from(degrees))
    sizes = enumerate_microbatch_sizes(model, d, global_batch_size=batch)
    assume(sizes)
    mode = draw(st.sampled_from(["training", "inference"]))
    strategy = Strategy(tp=d.tp, pp=d.pp, dp=d.dp, cp=d.cp, microbatch_size=draw(st.sampled_from(sizes)),
                        global_batch_size=batch, mode=mode,
                        schedule=draw(st.sampled_from(["gpipe", "1f1b"])),
                        recompute=draw(st.sampled_from(["none", "selective", "full"])) if mode == "training"
                        else "none",
                        placement=draw(st.sampled_from(["line", "s-shape"])),
                        precision="bf16" if "bf16" in hardware.compute.peak_flop_per_s else "fp16")
    return model, hardware, strategy


def _check(result, batch: int, network: str) -> None:
    assert result.iteration_time_s > 0 and result.samples_per_s > 0
    times = [getattr(s, f.name) for s in result.stages for f in dataclasses.fields(s) if f.name.endswith("_s")]
    assert all(t >= 0 for t in times), times
    assert 0 <= result.bubble_fraction <= 1
    assert result.model_flops_utilisation <= result.hardware_flops_utilisation * (1 + RELATIVE)
    if result.extrapolated:
        assert result.simulated_microbatches < result.num_microbatches
    assert result.samples_per_s * result.iteration_time_s == pytest.approx(batch, rel=RELATIVE)
    m = result.num_microbatches
    first_microbatch = sum(s.compute_s for s in result.stages) / m
    busiest = max(s.compute_s for s in result.stages)
    assert result.iteration_time_s >= max(first_microbatch, busiest) * (1 - RELATIVE)
    assert all(u.max_utilisation >= 0 for u in result.resources)
    if network in SHARED:  # a resource never carries more than its bandwidth over the run
        assert all(u.max_utilisation <= 1 + 1e-6 for u in result.resources), result.resources


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(case=cases(), network=st.sampled_from(tuple(NETWORKS)))
def test_every_result_holds_the_invariants(case, network):
    model, hardware, strategy = case
    try:
        result = simulate(model, hardware, strategy, network=network)
    except InputError:
        assume(False)  # a plan the machine cannot run (its precision, its shape): said, not simulated
        return
    event("feasible" if result.feasible else "over memory")
    if result.feasible:
        _check(result, strategy.global_batch_size, network)


@pytest.mark.parametrize("pp", [1, 2, 4, 8])
def test_one_sequence_is_no_faster_on_more_pipeline_stages(pp):
    # the case: LLaMA2-7B, a batch of one, on H100s; more stages only add transfers
    model, hardware = load_model("LLaMA2-7B"), load_hardware("h100-cluster")
    one = simulate(model, hardware, Strategy(global_batch_size=1, mode="inference"))
    deep = simulate(model, hardware, Strategy(pp=pp, global_batch_size=1, mode="inference"))
    assert not deep.extrapolated and deep.simulated_microbatches == 1
    assert deep.samples_per_s <= one.samples_per_s * (1 + RELATIVE)
