"""Feasible first: the plans that fit memory, found before the search proposes any."""

from __future__ import annotations

from itertools import product

import optuna
import pytest

import simulator
import spaces
from spaces import parallelism
from spaces.feasible import feasible_plans, plan_of

optuna.logging.set_verbosity(optuna.logging.WARNING)

MEMORY = frozenset({"degrees", "microbatch_size", "schedule", "recompute", "sequence_parallel", "zero_stage"})


@pytest.mark.parametrize(("model_name", "hardware_name", "sizes"), [("T-145B", "wafer", [1, 2]),
                                                                      ("T-18B", "wafer", [1, 2, 4])])
def test_pruning_keeps_exactly_the_plans_that_fit(model_name, hardware_name, sizes):
    model, hardware = simulator.load_model(model_name), simulator.load_hardware(hardware_name)
    degrees = spaces.candidate_degrees(model, hardware, {}, microbatch_choices=sizes)
    pruned, every = (feasible_plans(model, hardware, degrees, searched=MEMORY, fixed={}, microbatch_choices=sizes,
                                    prune=prune) for prune in (True, False))
    assert pruned.options == every.options and pruned.fitting == every.fitting > 0
    assert pruned.checked < every.checked == every.plans


@pytest.mark.parametrize(("model_name", "hardware_name", "devices"), [("Qwen3-30B-A3B", "h100-cluster", 8),
                                                                        ("T-18B", "wafer", 320)])
def test_the_prescreen_keeps_exactly_the_plans_a_simulation_finds_feasible(model_name, hardware_name, devices):
    # every plan of the space simulated (its memory is checked before the engine runs, whatever
    # the network): the pruned pre-screen must keep those that fit and no other. On 8 H100s,
    # Qwen3-30B-A3B at TP 1 / PP 4 / DP 2 with 4 chunks fits under ZeRO-2 but not ZeRO-3, whose
    # gathered units outweigh its shards there
    model, hardware = simulator.load_model(model_name), simulator.load_hardware(hardware_name)
    sizes = [1, 2]
    degrees = spaces.candidate_degrees(model, hardware, {}, microbatch_choices=sizes, device_counts=[devices])
    plans = feasible_plans(model, hardware, degrees, searched=MEMORY, fixed={}, microbatch_choices=sizes)
    verdicts = {plan_of(strategy): _simulated_reason(model, hardware, strategy)
                for strategy in _every_strategy(model, degrees, sizes)}
    assert len(verdicts) == plans.plans
    assert set(_plans(plans)) == {plan for plan, reason in verdicts.items() if reason == ""}
    assert 0 < plans.fitting < plans.plans and plans.checked < plans.plans


def _every_strategy(model, degrees, sizes):
    """Every plan of the space, unpruned, from the space's own enumerations."""
    for d in degrees:
        for size in parallelism.enumerate_microbatch_sizes(model, d, choices=sizes):
            for schedule in parallelism.enumerate_schedules(model, d, size):
                for recompute, sequence_parallel, zero in product(
                        parallelism.enumerate_recompute(), parallelism.enumerate_sequence_parallel(model, d),
                        parallelism.enumerate_zero_stages(d)):
                    yield simulator.Strategy.from_dict({
                        **d._asdict(), "microbatch_size": size, "schedule": schedule.schedule,
                        "num_chunks": schedule.num_chunks, "recompute": recompute,
                        "sequence_parallel": sequence_parallel, "zero_stage": zero})


def _simulated_reason(model, hardware, strategy) -> str | None:
    """Why the simulation finds ``strategy`` infeasible (``""``: feasible; None: illegal), and
    :func:`simulator.check_memory` must give the same reason."""
    try:
        result = simulator.simulate(model, hardware, strategy, network="estimate")
    except simulator.InputError:
        return None
    assert simulator.check_memory(model, hardware, strategy) == result.reason
    return result.reason


def test_every_proposal_of_a_sampler_fits_memory():
    model, hardware = simulator.load_model("T-145B"), simulator.load_hardware("wafer")
    sizes = [1, 2]
    degrees = spaces.candidate_degrees(model, hardware, {}, microbatch_choices=sizes)
    plans = feasible_plans(model, hardware, degrees, searched=MEMORY, fixed={}, microbatch_choices=sizes)
    space = spaces.SearchedSpace(model=model, searched=MEMORY | {"placement"}, microbatch_choices=sizes, plans=plans)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(60):
        trial = study.ask()
        strategy = spaces.suggest_candidate(trial, space, hardware, fixed={}).strategy
        assert simulator.check_memory(model, hardware, strategy) == ""
        seen.add(plan_of(strategy))
        study.tell(trial, 0.0)
    assert len(seen) > 10


def test_fixed_fields_are_part_of_every_plan():
    model, hardware = simulator.load_model("T-145B"), simulator.load_hardware("wafer")
    fixed = {"recompute": "full", "zero_stage": 1}
    degrees = spaces.candidate_degrees(model, hardware, fixed, microbatch_choices=[1])
    searched = frozenset({"degrees", "microbatch_size", "sequence_parallel"})
    plans = feasible_plans(model, hardware, degrees, searched=searched, fixed=fixed, microbatch_choices=[1])
    assert plans.allowed("8x20x2", 1, "1f1b") == ("full",)  # PALM's baseline fits with these
    assert all(plan[3:] in {("full", sp, 1) for sp in (False, True)} for plan in _plans(plans))


def _plans(plans):
    """The whole plans (six fields) of the tree."""
    return [(*prefix, value) for prefix, values in plans.options.items() if len(prefix) == 5 for value in values]


def test_the_prescreen_checks_memory_under_the_stack_the_plans_run_under():
    # 16 users of Llama 3.1 8B decoding at a context of 4096 on an n150: 12.2 GiB with every weight
    # in bfloat8_b, 11.2 GiB fit with tt-transformers' bfloat4_b MLP weights (the stack's formats)
    model, hardware = simulator.load_model("Llama-3.1-8B"), simulator.load_hardware("wormhole-n150")
    fixed = dict(mode="inference", precision="bfloat8_b", prompt_length=128, decode_context_length=4096,
                 global_batch_size=16, microbatch_size=16)
    degrees = [parallelism.ParallelDegrees(tp=64, pp=1, dp=1, attention_split="users")]
    default, served = (feasible_plans(model, hardware, degrees, searched=frozenset({"degrees"}), fixed=fixed,
                                      microbatch_choices=[16], stack=stack)
                       for stack in (simulator.MEGATRON_CORE, simulator.load_stack("tt-transformers-performance")))
    assert default.fitting == 0 < served.fitting


def test_a_serving_plan_fits_only_if_its_batch_s_prefill_fits_too():
    # 128 users of Llama 3.1 8B at TP 16 / PP 4 on an n150: the decode step fits at microbatch 64
    # and 128, the prefill of the batch's 128-token prompts only at 64 (13.26 GiB at 128 against
    # the card's 11.18); each serving trial simulates both, so the pre-screen keeps only 64
    model, hardware = simulator.load_model("Llama-3.1-8B"), simulator.load_hardware("wormhole-n150")
    fixed = dict(mode="inference", precision="bfloat8_b", prompt_length=128, decode_context_length=129,
                 global_batch_size=128, attention_split="users")
    degrees = [parallelism.ParallelDegrees(tp=16, pp=4, dp=1, attention_split="users")]
    for size in (64, 128):
        decode = simulator.Strategy(tp=16, pp=4, microbatch_size=size, **fixed)
        assert simulator.check_memory(model, hardware, decode) == ""
    prefill = simulator.Strategy(tp=16, pp=4, microbatch_size=128, **{**fixed, "decode_context_length": 0})
    assert "13.26 GiB" in simulator.check_memory(model, hardware, prefill)
    plans = feasible_plans(model, hardware, degrees, searched=frozenset({"degrees", "microbatch_size"}), fixed=fixed,
                           microbatch_choices=[64, 128])
    assert sorted({plan[1] for plan in _plans(plans)}) == [64]


def test_the_sets_of_degrees_trees_join_into_the_tree_of_all_their_plans():
    # each set of degrees builds the tree of its own plans (on a worker); joined, they are the
    # tree of every fitting plan, the degrees in the same order (labels such as 1x1x8 and
    # 1x1x8e8, one a prefix of the other, among them)
    from spaces.feasible import _tree, degree_plans, plans_tree

    model, hardware = simulator.load_model("Qwen3-30B-A3B"), simulator.load_hardware("h100-cluster")
    degrees = spaces.candidate_degrees(model, hardware, {}, microbatch_choices=[1, 2], device_counts=[8])
    parts = [degree_plans(model, hardware, d, searched=MEMORY, fixed={}, microbatch_choices=[1, 2]) for d in degrees]
    joined = plans_tree(parts).options
    whole = _tree([plan for part in parts for plan in part.fitting])
    assert joined == whole and list(joined[()]) == list(whole[()])
    assert any(a != b and b.startswith(a) for a in whole[()] for b in whole[()])
