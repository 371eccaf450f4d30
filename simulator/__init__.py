"""palm-search's standalone discrete-event simulator of large-model training and inference.

Follows PALM (Fang et al., arXiv 2406.03868). Typical use::

    import simulator
    model = simulator.load_model("T-145B")
    hardware = simulator.load_hardware("wafer")
    strategy = simulator.Strategy(tp=8, dp=2, pp=20, schedule="1f1b", recompute="full")
    result = simulator.simulate(model, hardware, strategy)
    throughput = result.samples_per_s  # samples per second

This package imports neither optuna, typer, spaces nor palm_search. Its simulation functions
(:mod:`simulator.api`: numpy, SimPy, the engine; about half of ``import simulator``; and
:func:`grid_gemm` with its :class:`BlockTuning`) load on first use (PEP 562), so a program that
only reads models, machines or strategies starts without them.

The public surface, what code outside the simulator (``spaces``, ``palm_search``) imports:

* ``simulator`` itself (``__all__`` below): loading and simulating, the :class:`Strategy` record
  and its vocabularies (``RECOMPUTES``, ``PLACEMENTS``...), the network models (``NETWORKS``),
  software stacks (:class:`Stack`, :func:`load_stack`), results, errors.
* :mod:`simulator.hardware`: machines, their loader and writer, the silicon cost model.
* :mod:`simulator.workload`: models, their loader, stage costs and FLOPs per iteration.
* :mod:`simulator.network`: a machine's topology (:func:`~simulator.network.topology_of`).
* :mod:`simulator.legality`: the rules a strategy must keep (divisors, microbatches, interleaving).
* :mod:`simulator.config`: the TOML conventions every input file follows (units in keys, ranges).
* :mod:`simulator.trace`: a timeline's stage slices and its Chrome trace (imports numpy).

Every other module (and the submodules of the packages above) is internal: it may change
without notice, and nothing outside the simulator imports it.
"""

from typing import TYPE_CHECKING, Any

from simulator.errors import BudgetExceeded, InputError, PalmError, SimulationError
from simulator.hardware.loader import hardware_from_tables, hardware_presets, load_hardware
from simulator.hardware.spec import Hardware
from simulator.hardware.writer import hardware_tables, hardware_to_toml
from simulator.legality import num_microbatches
from simulator.network.names import DEFAULT_NETWORK, NETWORKS
from simulator.passes import PassKind
from simulator.result import SCHEMA_VERSION, ResourceUsage, SimulationResult, StageReport
from simulator.stacks import MEGATRON_CORE, Stack, load_stack, stack_presets
from simulator.strategy import (
    ATTENTION_SPLITS,
    GROUP_LAYOUTS,
    GROUP_ORDERS,
    MODES,
    PLACEMENTS,
    PRECISIONS,
    RECOMPUTES,
    TRANSFER_STRATEGIES,
    WAFER_STAGES,
    ZERO_STAGES,
    Strategy,
    StrategyFlag,
    is_inference,
    search_dimensions,
    strategy_fields,
    strategy_flags,
)
from simulator.strategy_loader import load_strategy, read_best, read_json_document
from simulator.workload.loader import load_model, model_presets
from simulator.workload.spec import ModelSpec

if TYPE_CHECKING:
    from simulator.api import check_memory, estimate_samples_per_s, simulate, simulate_timeline, simulate_with_records
    from simulator.estimates import estimate_many, estimate_product
    from simulator.workload.gemm_pipeline import BlockTuning
    from simulator.workload.grid_gemm import grid_gemm

__version__ = "0.1.0"

_API = {"check_memory": "simulator.api", "estimate_samples_per_s": "simulator.api", "simulate": "simulator.api",
        "estimate_many": "simulator.estimates", "estimate_product": "simulator.estimates",
        "simulate_timeline": "simulator.api", "simulate_with_records": "simulator.api",
        "grid_gemm": "simulator.workload.grid_gemm", "BlockTuning": "simulator.workload.gemm_pipeline"}
"""The functions loaded on first use, with their module."""


def __getattr__(name: str) -> Any:
    """The :data:`_API` functions, imported on first use (then bound here)."""
    if name in _API:
        from importlib import import_module

        value = globals()[name] = getattr(import_module(_API[name]), name)
        return value
    raise AttributeError(f"module 'simulator' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})


__all__ = [
    "BudgetExceeded", "Hardware", "InputError", "ModelSpec", "PalmError", "SimulationError", "ResourceUsage",
    "SimulationResult",
    "check_memory", "estimate_many", "estimate_product", "estimate_samples_per_s", "grid_gemm", "BlockTuning",
    "StageReport", "Strategy", "hardware_from_tables", "hardware_presets", "hardware_tables",
    "hardware_to_toml", "load_hardware", "load_model", "load_strategy",
    "model_presets", "num_microbatches", "read_best", "read_json_document", "simulate", "simulate_timeline",
    "simulate_with_records",
    "DEFAULT_NETWORK", "NETWORKS", "MODES", "is_inference", "search_dimensions", "strategy_fields", "strategy_flags",
    "StrategyFlag", "ATTENTION_SPLITS",
    "GROUP_LAYOUTS", "GROUP_ORDERS", "PLACEMENTS", "PRECISIONS", "RECOMPUTES",
    "SCHEMA_VERSION", "TRANSFER_STRATEGIES", "WAFER_STAGES", "ZERO_STAGES", "PassKind", "MEGATRON_CORE", "Stack",
    "load_stack", "stack_presets",
]
