"""Categorical suggestions whose valid choices depend on earlier ones, without dynamic spaces.

Optuna 5 rejects a categorical parameter whose choices change between trials ("CategoricalDistribution
does not support dynamic value space", raised by ``optuna.distributions.check_distribution_compatibility``).
Two encodings keep every parameter name bound to one fixed list of choices:

* the name carries the earlier values the choices depend on (``microbatch_size|dp=2``);
* the name carries the valid subset itself when it is smaller than the full list
  (``schedule|only=gpipe,1f1b``): the same subset always gets the same name.
"""

from __future__ import annotations

from collections.abc import Sequence

import optuna

from simulator import InputError

Choice = None | bool | int | float | str


def conditional_name(name: str, **conditions: object) -> str:
    """``name|k=v,k=v`` for the given conditions (sorted by key), or ``name`` without any."""
    if not conditions:
        return name
    return name + "|" + ",".join(f"{key}={conditions[key]}" for key in sorted(conditions))


def subset_name(name: str, universe: Sequence[Choice], valid: Sequence[Choice]) -> str:
    """A parameter name that is a function of the valid subset of ``universe``.

    ``name`` when every choice is valid; otherwise ``name|only=...`` or ``name|without=...``,
    whichever is shorter.
    """
    if list(valid) == list(universe):
        return name
    missing = [c for c in universe if c not in valid]
    only = f"{name}|only={','.join(map(str, valid))}"
    without = f"{name}|without={','.join(map(str, missing))}"
    return only if len(only) <= len(without) else without


def suggest_among(trial: optuna.trial.Trial, name: str, universe: Sequence[Choice],
                  valid: Sequence[Choice]) -> Choice:
    """Suggest one of ``valid`` (kept in ``universe`` order) under :func:`subset_name`.

    Raises:
        InputError: ``valid`` is empty: no point of the space has the earlier choices (e.g. no
            microbatch size of a data-parallel degree fits memory), which a walk of the space skips.
    """
    ordered = [c for c in universe if c in valid]
    if not ordered:
        raise InputError(f"{name}: no valid choice among {list(universe)}")
    return trial.suggest_categorical(subset_name(name, universe, ordered), ordered)
