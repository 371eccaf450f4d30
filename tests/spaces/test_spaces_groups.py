"""Comm-group layouts: four fixed pairs, each a valid Strategy."""

from __future__ import annotations

import optuna

import simulator
from spaces import groups


def test_four_distinct_pairs_that_construct():
    choices = groups.enumerate_group_layouts()
    assert [c.label for c in choices] == ["compact/tp-major", "compact/dp-major", "strided/tp-major",
                                          "strided/dp-major"]
    for choice in choices:
        assert groups.GroupChoice.parse(choice.label) == choice
        simulator.Strategy(tp=4, dp=2, **choice.fields())


def test_suggest_covers_the_pairs():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(30):
        trial = study.ask()
        seen.add(groups.suggest_group_layout(trial))
        study.tell(trial, 0.0)
    assert seen == set(groups.enumerate_group_layouts())
