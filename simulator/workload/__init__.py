"""Workloads: the :class:`ModelSpec` record and its loader, and a model's stages as costs (FLOPs
and bytes per operator) with its FLOPs per iteration.

A public module of :mod:`simulator`: code outside the simulator imports these names from here
(or from :mod:`simulator`), never from the submodules. The stage functions load on first use
(PEP 562): :mod:`simulator.workload.stages` imports :mod:`simulator.legality`, which imports
this package.
"""

from typing import TYPE_CHECKING, Any

from simulator.workload.loader import load_model, model_presets
from simulator.workload.parameters import ParameterCount, parameter_count
from simulator.workload.spec import ModelSpec

if TYPE_CHECKING:
    from simulator.workload.stages import build_stage_costs, model_flops_per_iteration

_STAGES = ("build_stage_costs", "model_flops_per_iteration")


def __getattr__(name: str) -> Any:
    """The :mod:`simulator.workload.stages` functions, imported on first use (then bound here)."""
    if name in _STAGES:
        from simulator.workload import stages

        value = globals()[name] = getattr(stages, name)
        return value
    raise AttributeError(f"module 'simulator.workload' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_STAGES})


__all__ = ["ModelSpec", "ParameterCount", "build_stage_costs", "load_model", "model_flops_per_iteration",
           "model_presets", "parameter_count"]
