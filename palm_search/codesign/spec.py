"""A co-design study: which chips to consider, for which models, scored how.

Co-design study files are TOML (see ``studies/codesign-wafer-sram-compute.toml``)::

    [codesign]
    name = "wafer-sram-compute"         # default: "codesign-<models>-<hardware>"
    models = ["T-18B", "T-145B"]        # each gets its own best mapping on the shared chip
    hardware = "hardware/wafer-tiled.toml"   # the base chip (a mesh), relative to the study file
    technology = "tsmc-n7"              # area and power coefficients (simulator.hardware.silicon)
    objective = "throughput"            # throughput | throughput_per_area | throughput_per_power |
                                        # pareto_area | pareto_power (front of throughput vs area / power)
    area_budget_mm2 = 0                 # chips over it are infeasible; 0: the base chip's area
    power_budget_W = 0                  # 0: the base chip's full-activity power
    trials = 12                         # chips refined with simulations after the screen
    refine = 3                          # best-estimated mappings simulated per model on each
    screen_chips = 0                    # 0: screen every chip; else a sampler (TPE, NSGA-II for a
                                        # front) proposes this many (needed above 2,000 chips)
    seed = 0                            # the sampler's seed
    network = "sharing"                 # the refining simulations' network model

    [hardware_space]                    # spaces.hardware: each dimension a list of choices
    sram_MB_per_core = [2.5, 3.75, 5.0]
    TFLOP_per_s_per_core = [12, 16, 20]

    [search]                            # the mapping space, as in optimize's study files
    dimensions = ["degrees", "microbatch_size", "recompute", "sequence_parallel", "zero_stage"]
    microbatch_sizes = [1, 2, 4]

    [fixed]                             # Strategy fields not searched
    placement = "s-shape"

Scores follow PHAZE (Wang et al., ICML'24 §5): a chip's throughput is the mean over the models of
each model's best samples/s on it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from palm_search.search.study import StudySpec, beside, positive_integers, strategy_fields
from simulator import DEFAULT_NETWORK, NETWORKS, InputError, load_hardware, load_model
from simulator.config import Table, read_toml
from simulator.hardware import load_technology
from spaces import DIMENSIONS
from spaces.hardware import HardwareSpace

OBJECTIVES = ("throughput", "throughput_per_area", "throughput_per_power", "pareto_area", "pareto_power")
DEFAULT_SEARCHED = ("degrees", "microbatch_size", "recompute", "sequence_parallel", "zero_stage")
"""Mapping dimensions searched on each chip by default: PHAZE's (parallel degrees, microbatch
size, recompute vs stash), sequence parallelism and ZeRO, with the placement fixed (``s-shape``)."""
DEFAULT_FIXED = {"placement": "s-shape", "optimizer": "adam", "precision": "fp16"}
DEFAULT_TRIALS = 12
DEFAULT_REFINE = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class CodesignSpec:
    """Everything a co-design search needs (keys in the module docstring)."""

    models: tuple[str, ...]
    hardware: str
    hardware_choices: dict = field(default_factory=dict)
    name: str = ""
    technology: str = "tsmc-n7"
    objective: str = "throughput"
    area_budget_m2: float = 0.0
    power_budget_W: float = 0.0
    trials: int = DEFAULT_TRIALS
    refine: int = DEFAULT_REFINE
    screen_chips: int = 0
    seed: int = 0
    network: str = DEFAULT_NETWORK
    searched: tuple[str, ...] = DEFAULT_SEARCHED
    microbatch_sizes: tuple[int, ...] = (1, 2, 4, 8)
    fixed: dict = field(default_factory=lambda: dict(DEFAULT_FIXED))

    def __post_init__(self) -> None:
        if not self.models:
            raise InputError("codesign: give at least one model")
        if self.objective not in OBJECTIVES:
            raise InputError(f"codesign: `objective` must be one of {list(OBJECTIVES)}, got {self.objective!r}")
        if self.network not in NETWORKS:
            raise InputError(f"codesign: `network` must be one of {list(NETWORKS)}, got {self.network!r}")
        if self.screen_chips < 0 or not 0 <= self.seed < 2**32:
            raise InputError(f"codesign: `screen_chips` must be >= 0 and `seed` in [0, 2**32), got"
                             f" {self.screen_chips} and {self.seed}")
        for key in ("trials", "refine"):
            if getattr(self, key) < 1:
                raise InputError(f"codesign: `{key}` must be >= 1, got {getattr(self, key)}")
        if not self.name:
            stems = "-".join(Path(m).stem if Path(m).is_file() else m for m in self.models)
            object.__setattr__(self, "name", f"codesign-{stems}-{Path(self.hardware).stem}".lower())

    @property
    def directions(self) -> list[str]:
        """Optuna directions: throughput (or its ratio) up; area or power down on a front."""
        return ["maximize", "minimize"] if self.objective.startswith("pareto") else ["maximize"]

    def mapping_spec(self, model: str) -> StudySpec:
        """The mapping space searched for ``model`` on each chip (an ``optimize`` study's spec)."""
        return StudySpec(model=model, hardware=self.hardware, searched=self.searched,
                         microbatch_sizes=self.microbatch_sizes, fixed=dict(self.fixed))

    def replace(self, **changes) -> CodesignSpec:
        """A copy with the given (not None) changes; a default name follows changed models."""
        changes = {k: v for k, v in changes.items() if v is not None}
        if "models" in changes and self.name == CodesignSpec(models=self.models, hardware=self.hardware).name:
            changes.setdefault("name", "")
        return dataclasses.replace(self, **changes)


def load_codesign(path: str | Path) -> CodesignSpec:
    """Read a co-design study file.

    Raises:
        InputError: unreadable file, unknown or missing key, bad value (one line naming the file,
            table, key and value).
    """
    root = read_toml(path)
    values = _codesign_values(root.take_table("codesign"))
    values.update(models=tuple(beside(path, m) for m in values["models"]), hardware=beside(path, values["hardware"]))
    values["hardware_choices"] = _choices(root.take_table("hardware_space"))
    if root.has("search"):
        search = root.take_table("search")
        if search.has("dimensions"):
            values["searched"] = tuple(search.take_strings("dimensions"))
        if search.has("microbatch_sizes"):
            values["microbatch_sizes"] = positive_integers(search, "microbatch_sizes")
        search.finish(["dimensions", "microbatch_sizes"])
    if root.has("fixed"):
        values["fixed"] = {**DEFAULT_FIXED, **strategy_fields(root.take_table("fixed"))}
    root.finish(["codesign", "hardware_space", "search", "fixed"])
    try:
        spec = CodesignSpec(**values)
        HardwareSpace(load_hardware(spec.hardware), dict(spec.hardware_choices))
        check_references(spec)
    except InputError as error:
        raise InputError(f"{path}: {error}") from None
    return spec


def check_references(spec: CodesignSpec) -> None:
    """The models, technology and mapping dimensions the study names exist.

    Raises:
        InputError: naming the first that does not.
    """
    for model in spec.models:
        load_model(model)
    load_technology(spec.technology)
    unknown = [d for d in spec.searched if d not in DIMENSIONS]
    if unknown:
        raise InputError(f"[search] `dimensions` has {unknown[0]!r}, not one of {list(DIMENSIONS)}")


_STRINGS = ("name", "hardware", "technology", "objective", "network")
_INTEGERS = ("trials", "refine", "screen_chips", "seed")


def _codesign_values(table: Table) -> dict:
    values: dict = {"models": tuple(table.take_strings("models"))}
    for key in _STRINGS:
        if table.has(key):
            values[key] = table.take_string(key, OBJECTIVES if key == "objective" else None)
    for key in _INTEGERS:
        if table.has(key):
            values[key] = int(table.take_number(key, integer=True, minimum=0,
                                                inclusive=key in ("screen_chips", "seed")))
    if table.has("area_budget_mm2"):
        values["area_budget_m2"] = float(table.take_number("area_budget_mm2", inclusive=True)) * 1e-6
    if table.has("power_budget_W"):
        values["power_budget_W"] = float(table.take_number("power_budget_W", inclusive=True))
    if "hardware" not in values:
        raise table.error("missing key 'hardware' (the base chip)")
    table.finish(["models", *_STRINGS, *_INTEGERS, "area_budget_mm2", "power_budget_W"])
    return values


def _choices(table: Table) -> dict:
    """The hardware space's lists (checked when the space is built, with the file's name)."""
    choices = {}
    for key in table.keys():
        value = table.data[key]
        if not isinstance(value, list) or not value:
            raise table.error(f"key '{key}' must be a non-empty list of choices, got {value!r}")
        choices[key] = tuple(value)
    return choices
