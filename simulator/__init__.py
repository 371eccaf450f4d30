"""palm-search's standalone discrete-event simulator of large-model training and inference.

Follows PALM (Fang et al., arXiv 2406.03868). Typical use::

    import simulator
    model = simulator.load_model("T-145B")
    hardware = simulator.load_hardware("wafer")
    strategy = simulator.Strategy(tp=8, dp=2, pp=20, schedule="1f1b", recompute="full")
    result = simulator.simulate(model, hardware, strategy)
    throughput = result.samples_per_s  # samples per second

This package imports neither optuna, typer, spaces nor palm_search. Its simulation functions
(:mod:`simulator.api`: numpy, SimPy, the engine; about half of ``import simulator``) load on first
use (PEP 562), so a program that only reads models, machines or strategies starts without them.
"""

from typing import TYPE_CHECKING, Any

from simulator.errors import BudgetExceeded, InputError, PalmError, SimulationError
from simulator.hardware.loader import hardware_from_tables, hardware_presets, load_hardware
from simulator.hardware.spec import Hardware
from simulator.hardware.writer import hardware_tables, hardware_to_toml
from simulator.legality import num_microbatches
from simulator.result import SimulationResult, StageReport
from simulator.strategy import ZERO_STAGES, Strategy, strategy_fields
from simulator.strategy_loader import load_strategy
from simulator.workload.loader import load_model, model_presets
from simulator.workload.spec import ModelSpec

if TYPE_CHECKING:
    from simulator.api import check_memory, estimate_samples_per_s, simulate, simulate_timeline, simulate_with_records

__version__ = "0.1.0"

_API = ("check_memory", "estimate_samples_per_s", "simulate", "simulate_timeline", "simulate_with_records")


def __getattr__(name: str) -> Any:
    """The :mod:`simulator.api` functions, imported on first use (then bound here)."""
    if name in _API:
        from simulator import api

        value = globals()[name] = getattr(api, name)
        return value
    raise AttributeError(f"module 'simulator' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})


__all__ = [
    "BudgetExceeded", "Hardware", "InputError", "ModelSpec", "PalmError", "SimulationError", "SimulationResult",
    "check_memory", "estimate_samples_per_s",
    "StageReport", "Strategy", "hardware_from_tables", "hardware_presets", "hardware_tables",
    "hardware_to_toml", "load_hardware", "load_model", "load_strategy",
    "ZERO_STAGES", "model_presets", "num_microbatches", "strategy_fields", "simulate", "simulate_timeline",
    "simulate_with_records",
]
