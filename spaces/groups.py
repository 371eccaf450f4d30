"""Layout of communication groups inside a pipeline stage (PALM §V-B, Fig. 8, comm1 vs comm2).

``group_layout`` puts each TP group on neighbouring devices (``compact``) or on every ``dp``-th
device (``strided``); ``group_order`` walks the stage x first (``tp-major``) or y first
(``dp-major``); see :mod:`simulator.placement`. With ``tp == 1`` or ``dp == 1`` some pairs lead to
the same groups; the list stays fixed anyway (Optuna 5 needs fixed choices) and a result cache keyed
by the decoded strategy absorbs the repeats.
"""

from __future__ import annotations

from typing import NamedTuple

import optuna

from simulator import GROUP_LAYOUTS, GROUP_ORDERS


class GroupChoice(NamedTuple):
    """A (``group_layout``, ``group_order``) pair."""

    group_layout: str
    group_order: str

    @property
    def label(self) -> str:
        """``"compact/tp-major"`` etc., the categorical value Optuna stores."""
        return f"{self.group_layout}/{self.group_order}"

    @classmethod
    def parse(cls, label: str) -> GroupChoice:
        """Inverse of :attr:`label`."""
        layout, _, order = label.partition("/")
        return cls(layout, order)

    def fields(self) -> dict[str, str]:
        """``Strategy`` fields of this choice."""
        return {"group_layout": self.group_layout, "group_order": self.group_order}


def enumerate_group_layouts() -> tuple[GroupChoice, ...]:
    """compact/strided x tp-major/dp-major, layout varying slowest."""
    return tuple(GroupChoice(layout, order) for layout in GROUP_LAYOUTS for order in GROUP_ORDERS)


def suggest_group_layout(trial: optuna.trial.Trial) -> GroupChoice:
    """Categorical ``groups`` over the four labels of :func:`enumerate_group_layouts`."""
    labels = [choice.label for choice in enumerate_group_layouts()]
    return GroupChoice.parse(trial.suggest_categorical("groups", labels))
