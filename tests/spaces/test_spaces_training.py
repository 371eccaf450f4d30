"""Whole strategies from Optuna trials: always valid, never a dynamic categorical space."""

from __future__ import annotations

import ast
from pathlib import Path

import optuna
import pytest

import simulator
import spaces
from simulator.legality import check_plan, partition_units
from simulator.network.topology import topology_of
from simulator.placement import place

optuna.logging.set_verbosity(optuna.logging.WARNING)

CASES = [("T-18B", "wafer", {}), ("T-145B", "wafer", {}), ("ResNet-50", "grayskull", {}),
         ("LLaMA2-7B", "a100-cluster", {"max_tp": 8, "microbatch_choices": [1, 2, 4, 8]})]


def assert_valid(model, hardware, strategy):
    """Every rule a suggested strategy must obey."""
    assert strategy.num_devices == hardware.num_devices
    if model.is_transformer:
        assert model.num_heads % strategy.tp == 0 and model.hidden_size % strategy.tp == 0
    check_plan(model, hardware, strategy)
    placed = place(topology_of(hardware), strategy)
    devices = [d for stage in placed for d in stage.devices]
    assert len(set(devices)) == len(devices) == hardware.num_devices
    if strategy.stage_layers is not None:
        assert sum(strategy.stage_layers) == partition_units(model)


@pytest.mark.parametrize(("model_name", "hardware_name", "options"), CASES)
@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_suggested_strategies_are_valid(model_name, hardware_name, options, sampler):
    model, hardware = simulator.load_model(model_name), simulator.load_hardware(hardware_name)
    chosen = (optuna.samplers.RandomSampler(seed=0) if sampler == "random"
              else optuna.samplers.TPESampler(seed=0, n_startup_trials=10))
    study = optuna.create_study(sampler=chosen)
    for _ in range(50 if sampler == "random" else 25):
        trial = study.ask()
        space = spaces.SearchedSpace(model=model, searched=frozenset(spaces.DIMENSIONS), **options)
        candidate = spaces.suggest_candidate(trial, space, hardware, fixed={})
        assert candidate.hardware is hardware
        strategy = candidate.strategy
        assert_valid(model, hardware, strategy)
        study.tell(trial, float(strategy.tp + strategy.pp))
    assert len({t.params["degrees"] for t in study.trials}) > 1


def test_device_counts_map_onto_part_of_the_grid():
    # 130 = 2 x 5 x 13 cores on the p150: no BERT-base mapping (12 heads, 12 layers, batch 256) uses
    # them all; 128 of them take TP 1-4 x PP 1-8
    model, hardware = simulator.load_model("BERT-base"), simulator.load_hardware("blackhole-p150")
    fixed = {"precision": "bfloat8_b", "mode": "inference", "schedule": "gpipe"}
    assert spaces.candidate_degrees(model, hardware, fixed) == []
    both = spaces.candidate_degrees(model, hardware, fixed, device_counts=[128, 130])
    assert {d.tp for d in both} == {1, 2, 4} and {d.tp * d.pp * d.dp for d in both} == {128}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    space = spaces.SearchedSpace(model=model, searched=frozenset({"degrees", "microbatch_size", "placement"}),
                                 device_counts=(128,))
    for _ in range(20):
        trial = study.ask()
        strategy = spaces.suggest_candidate(trial, space, hardware, fixed=fixed).strategy
        assert strategy.num_devices == 128
        check_plan(model, hardware, strategy)
        devices = [d for stage in place(topology_of(hardware), strategy) for d in stage.devices]
        assert len(set(devices)) == len(devices) == 128
        study.tell(trial, 0.0)


def test_fixed_values_restrict_and_fill():
    model, hardware = simulator.load_model("T-18B"), simulator.load_hardware("wafer")
    fixed = {"tp": 4, "precision": "bf16", "schedule": "gpipe", "global_batch_size": 640}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(20):
        trial = study.ask()
        space = spaces.SearchedSpace(model=model, searched=frozenset({"degrees", "microbatch_size", "placement"}))
        strategy = spaces.suggest_candidate(trial, space, hardware, fixed=fixed).strategy
        assert strategy.tp == 4 and strategy.precision == "bf16" and strategy.schedule == "gpipe"
        assert_valid(model, hardware, strategy)
        assert set(trial.params) <= {"degrees", "placement"} | {p for p in trial.params if p.startswith("micro")}
        study.tell(trial, 0.0)


def test_nothing_searched_gives_the_fixed_strategy():
    model, hardware = simulator.load_model("T-145B"), simulator.load_hardware("wafer")
    fixed = {"tp": 8, "pp": 20, "dp": 2, "recompute": "full"}
    trial = optuna.create_study().ask()
    space = spaces.SearchedSpace(model=model, searched=frozenset())
    strategy = spaces.suggest_candidate(trial, space, hardware, fixed=fixed).strategy
    assert strategy == simulator.Strategy(**fixed)
    assert trial.params == {}


@pytest.mark.parametrize(("fixed", "searched", "message"), [
    ({}, {"nonsense"}, "unknown dimension"),
    ({"tpp": 2}, set(), "unknown fixed field"),
    ({"schedule": "gpipe"}, {"schedule"}, "both fixed and searched"),
    ({"tp": 3}, {"degrees"}, "no legal"),
])
def test_bad_search_requests_are_input_errors(fixed, searched, message):
    model, hardware = simulator.load_model("T-18B"), simulator.load_hardware("wafer")
    with pytest.raises(simulator.InputError, match=message):
        space = spaces.SearchedSpace(model=model, searched=frozenset(searched))
        spaces.suggest_candidate(optuna.create_study().ask(), space, hardware, fixed=fixed)


def test_spaces_never_imports_palm_search():
    for path in Path(spaces.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] == "palm_search" for n in names), path


def test_placement_key_keeps_the_placement_dimensions_only():
    from spaces import placement_key

    point = {"degrees": "8x20x2", "microbatch_size|dp=2": 1, "schedule|only=1f1b": "1f1b", "groups": "compact/tp-major",
             "placement": "line"}
    assert placement_key(point) == placement_key({**point, "microbatch_size|dp=2": 4})
    assert placement_key(point) != placement_key({**point, "placement": "s-shape"})
    assert placement_key(point) != placement_key({**point, "degrees": "8x10x4"})
    # ZeRO decides the shard groups the placement builds (hybrid sharding: `place` reads it)
    assert placement_key({**point, "zero_stage": 1}) != placement_key({**point, "zero_stage": 3})


def test_the_dimensions_are_the_strategy_fields_metadata():
    # every field a dimension decides is a Strategy field, each in one dimension, and the ones no
    # dimension decides are what a study fixes or sets itself (mode, precision, the stack's...)
    from spaces.training import DIMENSIONS, PLACEMENT_DIMENSIONS

    decided = [name for names in DIMENSIONS.values() for name in names]
    assert len(decided) == len(set(decided)) and set(decided) < set(simulator.strategy_fields())
    assert {"degrees", "placement", "groups", "transfer_strategy"} <= set(PLACEMENT_DIMENSIONS)
    assert not {"microbatch_size", "schedule", "recompute", "partition"} & set(PLACEMENT_DIMENSIONS)


def test_hybrid_sharding_is_offered_with_zero3_within_a_gpu_node_and_where_it_fits():
    h100, wafer = simulator.load_hardware("h100-cluster"), simulator.load_hardware("wafer")
    node = spaces.node_shard_group_size
    assert node(spaces.ParallelDegrees(1, 1, 64), h100) == 8  # the 8 GPUs of a node
    assert node(spaces.ParallelDegrees(2, 1, 64), h100) == 4  # a TP pair per shard rank
    assert node(spaces.ParallelDegrees(8, 1, 16), h100) is None  # one DP rank per node
    assert node(spaces.ParallelDegrees(1, 1, 8), h100) is None  # the node is the whole DP group
    assert node(spaces.ParallelDegrees(1, 1, 4, 4), h100) == 8  # CP ranks hold the same weights too
    assert node(spaces.ParallelDegrees(1, 2, 8), wafer) is None  # meshes stream weights anyway
    model = simulator.load_model("LLaMA2-7B")
    space = spaces.SearchedSpace(model=model, searched=frozenset({"zero_stage"}))
    fixed = {"tp": 1, "dp": 1024, "global_batch_size": 1024}
    chosen = {}
    for zero, group in ((3, "node"), (3, "all"), (2, None)):
        params = {"zero_stage": zero, **({"shard_group": group} if group else {})}
        strategy = spaces.suggest_candidate(optuna.trial.FixedTrial(params), space, h100, fixed=fixed).strategy
        chosen[zero, group] = strategy.shard_group_size
    assert chosen == {(3, "node"): 8, (3, "all"): None, (2, None): None}
