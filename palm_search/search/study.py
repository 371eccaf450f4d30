"""A study: what to search, for which model on which machine, with what budget.

Study files are TOML (see ``studies/t145b-wafer.toml``)::

    [study]                  # all keys optional except model and hardware
    name = "t145b-wafer"     # Optuna study name (default "<model>-<hardware>[-<objectives>]")
    model = "T-145B"         # preset name or path (a path relative to this file where the file is there)
    hardware = "wafer"
    objectives = ["throughput"]      # or ["throughput", "memory"] for a Pareto front; for serving
                             # ["throughput", "tokens_per_s_per_user"]
    mode = "training"        # or "inference": search for serving (see below)
    prompt_length = 128      # inference: tokens of each user's prompt (default: the model's sequence length)
    decode_context_length = 129      # inference: KV cache of the decode step (default: prompt_length + 1)
    min_tokens_per_s_per_user = 10.0 # inference: a floor on each user's decode rate (tokens/s)
    max_ttft_s = 2.0         # inference: a ceiling on the time to first token (s)
    sampler = "auto"         # auto (exhaustive if the space fits the budget, else TPE) | tpe |
                             # random | exhaustive | nsga2
    trials = 300             # budget: finished trials (simulations) in the study; default 300, or 50
                             # after a screen (every point estimated, the best 50 simulated)
    seed = 0
    batch_size = 8           # trials per synchronous batch with --deterministic
    network = "sharing"      # or "contention" (PALM's), "analytical" or "estimate" (closed form, no events)
    fidelity = "auto"        # screen (estimate every point, simulate the best `trials`) | full |
                             # auto (screen when the sampler is auto and the space exceeds the budget)
    top = 10                 # mappings shown at the end
    artifacts_top = 3        # top trials re-simulated for trace and pictures (Optuna artifacts); 0: none
    eval_timeout_s = 60      # wall-clock budget of one simulation (s): over it, the trial fails and the search goes on
    stack = "megatron-core"  # software stack preset or TOML file (simulator.stacks): how ZeRO-3 runs

    [search]
    dimensions = ["degrees", "microbatch_size", "schedule", ...]   # spaces.training.DIMENSIONS
    microbatch_sizes = [1, 2, 4, 8]  # optional cap of the microbatch choices
    devices = [128, 130]     # optional: devices a mapping may use (default: all; part of a grid)
    users = [1, 2, 4, 8]     # inference: concurrent users (global batch sizes) searched

    [fixed]                  # Strategy fields not searched
    optimizer = "adam"

    [baseline]               # the reference mapping (default: PALM's or a Megatron-like one)
    tp = 8

    [placements]             # custom placements: name = [[device ids of stage 0], ...]

Serving (``mode = "inference"``): each trial is one mapping of ``users`` concurrent users (the
global batch size, searched among ``users``), simulated twice: the prefill of the whole batch
(every user's prompt at once: ``ttft_s`` is the batch's time to first token, the last user's) and
one decode step at ``decode_context_length`` (``time_per_output_token_s``; tokens/s per user is
its inverse; system tokens/s is ``users`` times that). ``throughput`` is then system tokens/s; a
trial below ``min_tokens_per_s_per_user`` or above ``max_ttft_s`` completes as infeasible (an
Optuna constraint and its ``reason``), as one over memory does.

CLI flags override the file; the embedded defaults (:data:`DEFAULT_SEARCHED` etc.) apply to
``palm-search optimize --model M --hw H`` with no file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from simulator import DEFAULT_NETWORK, MODES, NETWORKS, InputError, Strategy, is_inference, load_stack
from simulator.config import Table, read_toml

OBJECTIVES = ("throughput", "memory", "tokens_per_s_per_user")
"""``throughput``: samples/s in training, system tokens/s of the decode step in inference;
``tokens_per_s_per_user``: inference only (one user's decode rate)."""
SAMPLERS = ("auto", "tpe", "random", "exhaustive", "nsga2")
FIDELITIES = ("auto", "screen", "full")
DEFAULT_TRIALS = 300
SCREENED_TRIALS = 50
"""Simulations after a screen: the estimate ranks the whole space, so a few confirm its top."""
DEFAULT_SEARCHED = ("degrees", "microbatch_size", "schedule", "recompute", "sequence_parallel",
                    "zero_stage", "groups", "placement")
SERVING_SEARCHED = ("degrees", "microbatch_size", "groups", "placement")
"""Inference searches no schedule, recompute, sequence parallelism or ZeRO (no backward, no optimizer)."""
DEFAULT_MICROBATCH_SIZES = (1, 2, 4, 8, 16)
DEFAULT_USERS = (1, 2, 4, 8, 16, 32, 64, 128)
"""Concurrent users (global batch sizes) a serving search tries."""
SERVING_KEYS = ("mode", "prompt_length", "decode_context_length", "global_batch_size")
"""Strategy fields a serving study sets itself (from ``[study]`` and ``users``), never ``[fixed]``."""
DEFAULT_STACK = "megatron-core"
"""The stack the hardware files are calibrated under (:data:`simulator.MEGATRON_CORE`)."""
DEFAULT_EVAL_TIMEOUT_S = 60.0
"""Wall-clock budget of one simulation in a search (s): a T-145B wafer mapping takes 0.03-5 s, so a
minute is an input built wrong, and its trial fails instead of holding a worker."""
MAX_EVAL_TIMEOUT_S = 86_400.0
"""Largest evaluation budget accepted (s): a day."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StudySpec:
    """Everything a search needs besides where it runs (see the module docstring for keys)."""

    model: str
    hardware: str
    name: str = ""
    objectives: tuple[str, ...] = ("throughput",)
    sampler: str = "auto"
    trials: int | None = None
    """Finished trials (simulations); None: :data:`DEFAULT_TRIALS`, or :data:`SCREENED_TRIALS` after
    a screen (resolved when the search opens)."""
    seed: int = 0
    batch_size: int = 8
    network: str = DEFAULT_NETWORK
    fidelity: str = "auto"
    top: int = 10
    artifacts_top: int = 3
    eval_timeout_s: float = DEFAULT_EVAL_TIMEOUT_S
    searched: tuple[str, ...] = DEFAULT_SEARCHED
    microbatch_sizes: tuple[int, ...] = DEFAULT_MICROBATCH_SIZES
    device_counts: tuple[int, ...] = ()
    fixed: dict = field(default_factory=dict)
    baseline: dict | None = None
    placements: dict = field(default_factory=dict)
    mode: str = "training"
    prompt_length: int | None = None
    """Inference: tokens of each user's prompt; None: the model's sequence length."""
    decode_context_length: int | None = None
    """Inference: KV-cache tokens of the decode step; None: ``prompt_length + 1``."""
    users: tuple[int, ...] = DEFAULT_USERS
    min_tokens_per_s_per_user: float | None = None
    max_ttft_s: float | None = None
    stack: str = DEFAULT_STACK
    """The software stack every trial runs under (a preset name or a TOML file)."""

    def __post_init__(self) -> None:
        _check("objectives", self.objectives, OBJECTIVES, many=True)
        if tuple(self.objectives) == ("memory",):  # every output ranks mappings by speed
            raise InputError('study: `objectives` ["memory"] alone is not a search; use ["throughput", "memory"]'
                             " for the Pareto front of speed and memory")
        _check("mode", self.mode, MODES)
        self._check_serving()
        _check("sampler", self.sampler, SAMPLERS)
        _check("network", self.network, tuple(NETWORKS))
        _check("fidelity", self.fidelity, FIDELITIES)
        load_stack(self.stack)
        if self.fidelity == "screen" and self.sampler != "auto":
            raise InputError(f"study: `fidelity` \"screen\" chooses the points itself; it needs sampler \"auto\","
                             f" got {self.sampler!r}")
        for key in ("trials", "batch_size", "top"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise InputError(f"study: `{key}` must be >= 1, got {getattr(self, key)}")
        if not 0 <= self.seed < 2**32:  # numpy's seed range, used by every Optuna sampler
            raise InputError(f"study: `seed` must be in [0, 2**32), got {self.seed}")
        if not 0 < self.eval_timeout_s <= MAX_EVAL_TIMEOUT_S:
            raise InputError(f"study: `eval_timeout_s` must be in (0, {MAX_EVAL_TIMEOUT_S:g}] s,"
                             f" got {self.eval_timeout_s}")
        if self.artifacts_top < 0:
            raise InputError(f"study: `artifacts_top` must be >= 0, got {self.artifacts_top}")
        if not self.name:
            object.__setattr__(self, "name", default_name(self.model, self.hardware, self.objectives, self.mode))

    def _check_serving(self) -> None:
        """Raises: InputError: serving keys in training, or out of range."""
        if not self.serving:
            given = [k for k in ("prompt_length", "decode_context_length", "min_tokens_per_s_per_user", "max_ttft_s")
                     if getattr(self, k) is not None] + (["tokens_per_s_per_user"] if
                                                          "tokens_per_s_per_user" in self.objectives else [])
            if given:
                raise InputError(f"study: `{given[0]}` is for mode \"inference\" (add --mode inference)")
            return
        if self.searched == DEFAULT_SEARCHED:
            object.__setattr__(self, "searched", SERVING_SEARCHED)
        clash = [k for k in SERVING_KEYS if k in self.fixed]
        if clash:
            raise InputError(f"study: `{clash[0]}` is set by the serving study itself ([study] mode, prompt_length,"
                             " decode_context_length; [search] users), not in [fixed]")
        if not self.users or any(not isinstance(u, int) or u < 1 for u in self.users):
            raise InputError(f"study: `users` must be a list of integers >= 1, got {list(self.users)}")
        for key in ("prompt_length", "decode_context_length"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise InputError(f"study: `{key}` must be an integer >= 1, got {value!r}")
        for key in ("min_tokens_per_s_per_user", "max_ttft_s"):
            value = getattr(self, key)
            if value is not None and not 0 < value < float("inf"):
                raise InputError(f"study: `{key}` must be a positive finite number, got {value!r}")

    @property
    def serving(self) -> bool:
        """Whether the study searches inference serving (``mode = "inference"``)."""
        return is_inference(self.mode)

    @property
    def directions(self) -> list[str]:
        """Optuna directions, one per objective (throughput and tokens/s per user up, memory down)."""
        return ["minimize" if o == "memory" else "maximize" for o in self.objectives]

    def replace(self, **changes) -> StudySpec:
        """A copy with ``changes`` applied (``None`` values are ignored: flags not given); a
        default name follows a changed model, hardware, objectives or mode."""
        changes = {k: v for k, v in changes.items() if v is not None}
        renamed = self.name == default_name(self.model, self.hardware, self.objectives, self.mode)
        if renamed and "name" not in changes and {"model", "hardware", "objectives", "mode"} & set(changes):
            changes["name"] = ""
        if is_inference(changes.get("mode")) and not self.serving and self.searched == DEFAULT_SEARCHED:
            changes.setdefault("searched", SERVING_SEARCHED)
        return dataclasses.replace(self, **changes)


def default_name(model: str, hardware: str, objectives: tuple[str, ...], mode: str) -> str:
    """``<model>-<hardware>[-inference][-<objectives>]``, lower case."""
    suffix = "" if objectives == ("throughput",) else "-" + "-".join(objectives)
    serving = "-inference" if is_inference(mode) else ""
    return f"{_named(model)}-{_named(hardware)}{serving}{suffix}".lower()


def _named(name: str) -> str:
    """A preset's name (its dots its own: ``Llama-3.1-8B``), or a model or hardware file's name
    without its folder and suffix."""
    path = Path(name)
    return path.stem if path.suffix in (".toml", ".json") else path.name


def _check(key: str, value, allowed: tuple[str, ...], many: bool = False) -> None:
    values = value if many else (value,)
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise InputError(f"study: `{key}` must be {'a list of ' if many else ''}one of {list(allowed)},"
                         f" got {value!r}")


def beside(study_path: str | Path, name: str) -> str:
    """``name`` (a preset, or a model / hardware file a study names) as the study file means it:
    a file path is read relative to the study file's folder when the file is there (so a study
    runs from any directory), else as given (relative to the working directory, as before)."""
    here = Path(study_path).parent / name
    return str(here) if name.endswith((".toml", ".json")) and here.is_file() else name


def load_study(path: str | Path) -> StudySpec:
    """Read a study file.

    Raises:
        InputError: unreadable file, unknown or missing key, bad value (one line naming the file,
            table, key and value).
    """
    root = read_toml(path)
    study = root.take_table("study")
    values = _study_values(study)
    values.update(model=beside(path, values["model"]), hardware=beside(path, values["hardware"]))
    if "stack" in values:
        values["stack"] = beside(path, values["stack"])
    if root.has("search"):
        values.update(_search_values(root.take_table("search")))
    for key in ("fixed", "baseline"):
        if root.has(key):
            values[key] = strategy_fields(root.take_table(key))
    if root.has("placements"):
        values["placements"] = root.take_table("placements").data
    root.finish()
    try:
        return StudySpec(**values)
    except InputError as error:
        raise InputError(f"{path}: {error}") from None


def _study_values(study: Table) -> dict:
    values = {"model": study.take_string("model"), "hardware": study.take_string("hardware")}
    for key in ("name", "sampler", "network", "fidelity", "mode", "stack"):
        if study.has(key):
            values[key] = study.take_string(key)
    for key in ("prompt_length", "decode_context_length"):
        if study.has(key):
            values[key] = int(study.take_number(key, integer=True, minimum=0))
    for key in ("min_tokens_per_s_per_user", "max_ttft_s"):
        if study.has(key):
            values[key] = float(study.take_number(key, minimum=0))
    if study.has("objectives"):
        values["objectives"] = tuple(study.take_strings("objectives"))
    for key in ("trials", "seed", "batch_size", "top", "artifacts_top"):
        if study.has(key):
            values[key] = int(study.take_number(key, integer=True, minimum=0,
                                                inclusive=key in ("seed", "artifacts_top")))
    if study.has("eval_timeout_s"):
        values["eval_timeout_s"] = float(study.take_number("eval_timeout_s", maximum=MAX_EVAL_TIMEOUT_S))
    study.finish()
    return values


def _search_values(search: Table) -> dict:
    values = {}
    if search.has("dimensions"):
        values["searched"] = tuple(search.take_strings("dimensions"))
    for key, field_name in (("microbatch_sizes", "microbatch_sizes"), ("devices", "device_counts"),
                            ("users", "users")):
        if search.has(key):
            values[field_name] = positive_integers(search, key)
    search.finish()
    return values


def positive_integers(table: Table, key: str) -> tuple[int, ...]:
    """A non-empty list of integers >= 1 under ``key`` (taken from the table).

    Raises:
        InputError: naming the file, table, key and value.
    """
    values = table.data.pop(key)
    if not isinstance(values, list) or not values or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
        raise table.error(f"key '{key}' must be a list of integers >= 1, got {values!r}")
    return tuple(values)


def strategy_fields(table: Table) -> dict:
    """A strategy table's fields, checked by building a Strategy from them."""
    fields = dict(table.data)
    try:
        Strategy.from_dict(fields)
    except InputError as error:
        raise table.error(str(error).removeprefix("strategy: ")) from None
    return fields


def spec_to_attrs(spec: StudySpec) -> dict:
    """The whole spec as JSON-compatible data (the study's ``user_attrs["spec"]``), so another
    process (``palm-search worker``) can rebuild it with :func:`spec_from_attrs`."""
    data = dataclasses.asdict(spec)
    for key in ("model", "hardware", "stack"):  # a file path must name the same file from another directory
        if Path(data[key]).is_file():
            data[key] = str(Path(data[key]).resolve())
    return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}


def spec_from_attrs(data: dict) -> StudySpec:
    """Rebuild the spec :func:`spec_to_attrs` stored.

    Raises:
        InputError: the study was written by an older palm-search (no full spec) or holds bad values.
    """
    missing = {"model", "hardware", "microbatch_sizes", "fixed", "trials"} - set(data)
    if missing:
        raise InputError(f"study: stored spec lacks {sorted(missing)} (created by an older palm-search; "
                         "re-create it with palm-search optimize)")
    known = {f.name for f in dataclasses.fields(StudySpec)}
    tuples = ("objectives", "searched", "microbatch_sizes", "device_counts", "users")
    values = {k: tuple(v) if isinstance(v, list) and k in tuples else v for k, v in data.items() if k in known}
    return StudySpec(**values)
