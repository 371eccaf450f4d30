"""The search space of a study as a function ``trial -> Candidate``, and its exhaustive walk.

:func:`enumerate_points` walks every assignment of the parameters that
:func:`spaces.suggest_candidate` asks for, by replaying it on a scripted trial (an
odometer over the tree of choices, as Optuna's ``BruteForceSampler`` does; that sampler cannot be
driven by ask/tell because it stops the study from inside ``tell``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from itertools import islice

from joblib import Parallel, delayed

from palm_search.search.study import DEFAULT_MICROBATCH_SIZES, DEFAULT_USERS, StudySpec
from simulator import Hardware, InputError, ModelSpec, Stack, Strategy, load_stack
from simulator.legality import check_formats
from spaces import (
    Candidate,
    DegreePlans,
    ParallelDegrees,
    SearchedSpace,
    custom_placements,
    degree_plans,
    plans_tree,
    suggest_candidate,
)
from spaces.training import DIMENSIONS, degree_choices

Builder = Callable[[object], Candidate]
"""``trial -> Candidate``: the search point an Optuna (or scripted) trial proposes."""


@dataclass(frozen=True, slots=True)
class SpaceBuilder:
    """The study's :data:`Builder`: :func:`spaces.suggest_candidate` over its searched space,
    whose memory dimensions offer only plans that fit (``space.plans``, found when built)."""

    space: SearchedSpace
    hardware: Hardware
    fixed: dict

    def __call__(self, trial: object) -> Candidate:
        return suggest_candidate(trial, self.space, self.hardware, fixed=self.fixed)  # type: ignore[arg-type]

    def around(self, strategy: Strategy) -> SpaceBuilder:
        """The builder restricted to ``strategy``'s parallel degrees (when they are searched):
        the part of the space a walk for that strategy needs."""
        if "degrees" not in self.space.searched:
            return self
        return replace(self, space=replace(self.space, degree_choices=(ParallelDegrees.of(strategy),)))

    @property
    def prescreen(self) -> dict | None:
        """The memory pre-screen's counts (``plans``, ``checked``, ``fitting``), or None."""
        plans = self.space.plans
        return None if plans is None else {"plans": plans.plans, "checked": plans.checked, "fitting": plans.fitting}


def candidate_builder(spec: StudySpec, model: ModelSpec, hardware: Hardware) -> SpaceBuilder:
    """``trial -> Candidate`` over the study's searched dimensions, memory pre-screened
    (:func:`spaces.feasible.feasible_plans`; about 0.5 s for T-145B on the wafer).

    Raises:
        InputError: invalid custom placements or dimensions, a device count the machine lacks,
            or no plan of the space fits the devices' memory.
    """
    return DegreeWalk(spec, model, hardware).builder()


class DegreeWalk:
    """The space's points, walked one set of parallel degrees at a time, each set pre-screened for
    memory (:func:`spaces.degree_plans`) once: when the walk reaches it, or before, all of them
    on the search's workers (:meth:`prescreen`). The points and their order are those of
    walking :meth:`builder` (the degrees are the walk's first choice). Iterate once, then call
    :meth:`builder` (not while a thread is still iterating)."""

    def __init__(self, spec: StudySpec, model: ModelSpec, hardware: Hardware) -> None:
        """Raises:
            InputError: invalid custom placements or dimensions, a device count the machine lacks,
                a number format it does not offer.
        """
        over = [n for n in spec.device_counts if n > hardware.num_devices]
        if over:
            raise InputError(f"study: [search] `devices` has {over[0]}, more than the {hardware.num_devices}"
                             f" devices of hardware {hardware.name!r}")
        _check_formats(spec, hardware)
        custom = custom_placements(spec.placements, hardware, _fixed_degrees(spec)) if spec.placements else None
        self.space = SearchedSpace(model=model, searched=frozenset(spec.searched), custom_placements=custom,
                                   microbatch_choices=spec.microbatch_sizes, device_counts=spec.device_counts)
        self.hardware, self.fixed, self.stack = hardware, dict(spec.fixed), load_stack(spec.stack)
        if "degrees" in self.space.searched:
            self.degrees = degree_choices(self.space, hardware, spec.fixed)
            if not self.degrees:
                counts = " or ".join(str(n) for n in spec.device_counts or [hardware.num_devices])
                raise InputError(f"study: no legal TP x PP x DP of {model.name} uses {counts} devices of"
                                 f" {hardware.name!r} (with the study's fixed values); list the device counts"
                                 " a mapping may use in [search] `devices`")
        else:
            base = Strategy.from_dict(dict(spec.fixed))
            self.degrees = (ParallelDegrees.of(base),)
        self.found: dict[ParallelDegrees, DegreePlans] = {}

    def _plans(self, degrees: ParallelDegrees) -> DegreePlans:
        """The pre-screen of ``degrees``, made once."""
        found = self.found.get(degrees)
        if found is None:
            found = self.found[degrees] = degree_plans(
                self.space.model, self.hardware, degrees, searched=self.space.searched, fixed=self.fixed,
                microbatch_choices=self.space.microbatch_choices, stack=self.stack)
        return found

    def __iter__(self) -> Iterator[tuple[dict, Candidate]]:
        for block in self.blocks():
            yield from block.points()

    def blocks(self) -> Iterator[Block]:
        """The walk's points as blocks (:func:`walk_blocks`), one per set of degrees with a
        fitting plan; iterate once, as the walk itself."""
        for degrees in self.degrees:
            found = self._plans(degrees)
            if found.fitting:
                space = replace(self.space, plans=plans_tree([found]), degree_choices=(degrees,))
                yield from walk_blocks(SpaceBuilder(space=space, hardware=self.hardware, fixed=self.fixed))

    def prescreen(self, jobs: int, backend: str | None = None) -> None:
        """Pre-screen the sets of degrees not pre-screened yet on ``jobs`` joblib workers (on
        ``backend``; one job: none, :meth:`_plans` makes each when asked), the same
        :class:`DegreePlans` either way. Sets differing only in ``pp`` and ``dp`` go to one
        worker (their checks build the same units, kept per process), in
        :data:`PRESCREEN_RUNS_PER_JOB` runs per worker of about equal numbers of sets."""
        left = [degrees for degrees in self.degrees if degrees not in self.found]
        if jobs <= 1 or len(left) < 2:
            return
        alike: dict[ParallelDegrees, list[ParallelDegrees]] = {}
        for degrees in left:
            alike.setdefault(degrees._replace(pp=1, dp=1), []).append(degrees)
        runs: list[list[ParallelDegrees]] = [[] for _ in range(min(jobs * PRESCREEN_RUNS_PER_JOB, len(alike)))]
        for group in sorted(alike.values(), key=len, reverse=True):  # largest first, to the shortest run
            min(runs, key=len).extend(group)
        done = Parallel(n_jobs=jobs, backend=backend, batch_size=1)(
            delayed(_prescreen_run)(self.space, self.hardware, self.fixed, self.stack, run) for run in runs)
        for found in (found for run in done for found in run):
            self.found[found.degrees] = found

    def fitting_plans(self) -> int:
        """The plans (:data:`spaces.feasible.Plan`) that fit memory, every set of degrees
        pre-screened: at most the plans the walk's blocks hold, each fitting plan being one or
        more of them (under ZeRO-3 one per shard group offered, under a searched partition one
        per partition), so a walk can be known too large to screen before it is walked."""
        return sum(len(self._plans(degrees).fitting) for degrees in self.degrees)

    def builder(self) -> SpaceBuilder:
        """The study's builder, every set of degrees pre-screened (those the walk has not reached now).

        Raises:
            InputError: no plan of the space fits the devices' memory.
        """
        plans = plans_tree([self._plans(degrees) for degrees in self.degrees])
        if not plans.fitting:
            raise InputError(f"study: no mapping of {self.space.model.name} fits the memory of {self.hardware.name!r}"
                             f" ({plans.plans} plans of degrees, microbatch, schedule, recompute, sequence"
                             " parallelism and ZeRO; search more of them or fix fewer)")
        fitting = tuple(d for d in self.degrees if d.label in plans.allowed())
        return SpaceBuilder(space=replace(self.space, plans=plans, degree_choices=fitting), hardware=self.hardware,
                            fixed=self.fixed)


FORMAT_FIELDS = ("precision", "fp8_recipe", "math_fidelity")
"""The strategy fields naming number formats, which :func:`_check_formats` checks once."""


def _check_formats(spec: StudySpec, hardware: Hardware) -> None:
    """Raises: InputError: ``hardware`` lacks a number format of the study (its fixed precision,
    fp8 recipe and math fidelity, else the strategy's defaults: :func:`simulator.legality.check_formats`).
    Every plan would be refused, which the memory pre-screen would report as none fitting memory."""
    formats = {k: v for k, v in spec.fixed.items() if k in FORMAT_FIELDS}
    try:
        check_formats(hardware, Strategy.from_dict(formats))
    except InputError as error:
        given = "the study's [fixed]" if formats else "the defaults; set it with --precision or the study's [fixed]"
        raise InputError(f"study: {str(error).removeprefix('strategy: ')} ({given})") from None


PRESCREEN_RUNS_PER_JOB = 4
"""Runs of sets of degrees per worker in a parallel pre-screen (:meth:`DegreeWalk.prescreen`):
joblib hands each to the next free worker, so uneven runs even out."""


def _prescreen_run(space: SearchedSpace, hardware: Hardware, fixed: dict, stack: Stack,
                   run: list[ParallelDegrees]) -> list[DegreePlans]:
    """A worker's task: :func:`spaces.degree_plans` of each set of degrees in ``run``."""
    return [degree_plans(space.model, hardware, degrees, searched=space.searched, fixed=fixed,
                         microbatch_choices=space.microbatch_choices, stack=stack) for degrees in run]


def _fixed_degrees(spec: StudySpec) -> ParallelDegrees | None:
    """The degrees when the study fixes all three (custom placements are then checked fully)."""
    return ParallelDegrees.of(spec.fixed) if all(k in spec.fixed for k in ("tp", "pp", "dp")) else None


@dataclass
class ScriptedTrial:
    """A stand-in for an Optuna trial whose categorical answers follow ``script`` (indices)."""

    script: list[int]

    def __post_init__(self) -> None:
        self.offered: list[int] = []
        self.params: dict[str, object] = {}

    def suggest_categorical(self, name: str, choices):
        index = self.script[len(self.offered)] if len(self.offered) < len(self.script) else 0
        self.offered.append(len(choices))
        self.params[name] = choices[index]
        return choices[index]

    def suggest_int(self, name: str, low: int, high: int, step: int = 1, log: bool = False):
        return self.suggest_categorical(name, list(range(low, high + 1, step)))


def enumerate_points(build: Builder, limit: int) -> list[dict] | None:
    """Every parameter assignment of the space, or None if there are more than ``limit``."""
    walk = enumerate_candidates(build, limit)
    return None if walk is None else [params for params, _ in walk]


def enumerate_candidates(build: Builder, limit: int) -> list[tuple[dict, Candidate]] | None:
    """Every parameter assignment of the space with the candidate it builds, or None if there are
    more than ``limit``."""
    points = []
    for point in walk_space(build):
        points.append(point)
        if len(points) > limit:
            return None
    return points


@dataclass
class ReplayTrial:
    """A stand-in for an Optuna trial answering each parameter from ``params``.

    Raises (from ``suggest_categorical``):
        InputError: a parameter ``params`` lacks, or a value not among the choices offered.
    """

    params: dict

    def suggest_categorical(self, name: str, choices):
        if name not in self.params or self.params[name] not in choices:
            raise InputError(f"parameter {name!r}: {self.params.get(name)!r} is not among {list(choices)}")
        return self.params[name]


def point_of(build: SpaceBuilder | UsersBuilder, strategy: Strategy) -> dict | None:
    """The parameters under which ``build`` proposes ``strategy`` (the point of the space that is
    that strategy), or None when the space does not hold it. Walks only the part of the space with
    ``strategy``'s degrees (and users), at most :data:`POINT_SEARCH_LIMIT` points."""
    for params, candidate in islice(walk_space(build.around(strategy)), POINT_SEARCH_LIMIT):
        if candidate.strategy == strategy:
            try:
                return params if build(ReplayTrial(params)).strategy == strategy else None
            except InputError:
                return None
    return None


POINT_SEARCH_LIMIT = 20_000
"""Most points :func:`point_of` walks (a few seconds at worst)."""


def walk_space(build: Builder) -> Iterator[tuple[dict, Candidate]]:
    """Every parameter assignment of the space with the candidate it builds, in the odometer's
    order (the first choice, the degrees, changes slowest)."""
    script: list[int] = []
    while True:
        trial = ScriptedTrial(script)
        try:
            candidate = build(trial)
            yield dict(trial.params), candidate
        except InputError:
            pass
        taken = [script[i] if i < len(script) else 0 for i in range(len(trial.offered))]
        j = max((i for i, n in enumerate(trial.offered) if taken[i] + 1 < n), default=-1)
        if j < 0:
            return
        script = taken[:j] + [taken[j] + 1]


LAYOUT_DIMENSIONS = frozenset({"groups", "placement", "transfer_strategy"})
"""Dimensions drawn after the plan's (:func:`spaces.suggest_candidate`) whose choices and names
depend on the parallel degrees and the machine alone, and whose ``Strategy`` fields no check
relates to the plan's (:meth:`Strategy.with_fields`): for one set of degrees the points are every
plan under every layout."""


@dataclass(frozen=True, slots=True)
class Block:
    """Points of a walk as the product of plans and layouts: point ``(p, l)`` has the parameters
    ``{**plans[p][0], **layouts[l][0]}`` and the strategy ``plans[p][1]`` with the fields
    ``layouts[l][1]`` (:data:`LAYOUT_DIMENSIONS`' only; none: each plan is its point), plan-major
    (the walk's order)."""

    plans: list[tuple[dict, Strategy]]
    layouts: list[tuple[dict, dict]]
    hardware: Hardware

    def __len__(self) -> int:
        return len(self.plans) * len(self.layouts)

    def params(self, k: int) -> dict:
        """The parameters of point ``k`` (plan-major)."""
        plan, layout = divmod(k, len(self.layouts))
        return {**self.plans[plan][0], **self.layouts[layout][0]}

    def points(self) -> Iterator[tuple[dict, Candidate]]:
        """Every point with its candidate, in order."""
        for params, strategy in self.plans:
            for placed, values in self.layouts:
                yield {**params, **placed}, Candidate(hardware=self.hardware,
                                                      strategy=strategy.with_fields(**values) if values else strategy)


def walk_blocks(build: SpaceBuilder) -> Iterator[Block]:
    """:func:`walk_space` of a builder of one set of degrees, the same points in the same order,
    as the product of its plans and its layouts (:data:`LAYOUT_DIMENSIONS`, each walked once)
    instead of a build per point: one block (or none); the odometer's points themselves (a
    block of empty layouts) when no layout is searched, or the layer partition (whose choices
    read the whole strategy). A layout whose fields contradict the first plan's is left out
    (:meth:`Strategy.with_fields`: such checks read the layout and the degrees alone)."""
    searched = build.space.searched
    layout = searched & LAYOUT_DIMENSIONS
    if not layout or "partition" in searched:
        plans = [(params, candidate.strategy) for params, candidate in walk_space(build)]
        if plans:
            yield Block(plans, [({}, {})], build.hardware)
        return
    plan_space = replace(build.space, searched=searched - layout)
    plans = [(params, candidate.strategy) for params, candidate in walk_space(replace(build, space=plan_space))]
    if not plans:
        return
    fields = [f for d in layout for f in DIMENSIONS[d]]
    kept = {k: v for k, v in plans[0][1].to_dict().items() if k not in fields}
    only = replace(build.space, searched=layout | (searched & {"degrees"}), plans=None)
    layouts = []
    for p, c in walk_space(replace(build, space=only, fixed={**build.fixed, **kept})):
        values = {f: getattr(c.strategy, f) for f in fields}
        try:
            plans[0][1].with_fields(**values)
        except InputError:
            continue
        layouts.append(({k: v for k, v in p.items() if k != "degrees"}, values))
    if layouts:
        yield Block(plans, layouts, build.hardware)


DEFAULT_PROMPT_LENGTH = 128
"""A serving study's prompt when none is given (tokens; tt-metal's LLM table measures 128-token
prompts), at most the model's context less the first generated token."""


def serving_fixed(spec: StudySpec, model: ModelSpec, users: int) -> dict:
    """The fixed ``Strategy`` fields of a serving study's points with ``users`` concurrent users:
    the decode step at ``decode_context_length`` (default ``prompt_length + 1``)."""
    prompt = spec.prompt_length or max(min(DEFAULT_PROMPT_LENGTH, model.sequence_length - 1), 1)
    return {**spec.fixed, "mode": "inference", "prompt_length": prompt, "global_batch_size": users,
            "decode_context_length": spec.decode_context_length or prompt + 1}


class _PerUsers:
    """A trial whose parameter names carry the number of users (``degrees|users=8``,
    ``microbatch_size|dp=1,users=8``): the choices of every later parameter depend on it, and a
    name must keep one list of choices (:mod:`spaces._choices`)."""

    def __init__(self, trial, users: int) -> None:
        self.trial, self.users = trial, users

    def suggest_categorical(self, name: str, choices):
        return self.trial.suggest_categorical(per_users(name, self.users), choices)


def per_users(name: str, users: int) -> str:
    """``name`` conditioned on ``users`` as :func:`spaces._choices.conditional_name` writes it."""
    return f"{name}{',' if '|' in name else '|'}users={users}"


@dataclass(frozen=True, slots=True)
class UsersBuilder:
    """A serving study's :data:`Builder`: categorical ``users`` first, then that many users'
    :class:`SpaceBuilder` on a trial whose names carry the users (:class:`_PerUsers`)."""

    builders: dict[int, SpaceBuilder]

    def __call__(self, trial) -> Candidate:
        users = trial.suggest_categorical("users", list(self.builders))
        return self.builders[users](_PerUsers(trial, users))

    def around(self, strategy: Strategy) -> UsersBuilder:
        """The builder restricted to ``strategy``'s users and parallel degrees."""
        users = strategy.global_batch_size
        return UsersBuilder({users: self.builders[users].around(strategy)} if users in self.builders else {})

    @property
    def prescreen(self) -> dict | None:
        """The memory pre-screens' counts summed over the numbers of users."""
        parts = [b.prescreen for b in self.builders.values()]
        return {k: sum(p[k] for p in parts if p) for k in ("plans", "checked", "fitting")}


class ServingWalk:
    """A serving study's points: a :class:`DegreeWalk` per number of users (``spec.users``; a
    number no mapping fits, or that no legal degrees divide, is left out), each point's
    parameters led by ``users`` (as :class:`UsersBuilder` asks them)."""

    def __init__(self, spec: StudySpec, model: ModelSpec, hardware: Hardware) -> None:
        """Raises:
            InputError: no number of users has a legal mapping.
        """
        if not model.is_causal:
            raise InputError(f"study: an inference search serves a decoder's tokens; {model.name} generates none"
                             " (palm-search simulate --mode inference times its forward passes)")
        lengths = serving_fixed(spec, model, 1)
        for key in ("prompt_length", "decode_context_length"):
            if lengths[key] > model.sequence_length:
                raise InputError(f"study: `{key}` = {lengths[key]} exceeds the context of {model.name},"
                                 f" {model.sequence_length} tokens")
        self.walks: dict[int, DegreeWalk] = {}
        errors = []
        for users in sorted(set(spec.users)):
            try:
                self.walks[users] = DegreeWalk(replace_fixed(spec, serving_fixed(spec, model, users)), model, hardware)
            except InputError as error:
                errors.append(str(error))
        if not self.walks:
            raise InputError(f"{errors[-1]} (users {list(spec.users)})")
        self.model, self.hardware = model, hardware
        self.lengths = f"{lengths['prompt_length']}-token prompts, decode at {lengths['decode_context_length']}"

    def __iter__(self) -> Iterator[tuple[dict, Candidate]]:
        for block in self.blocks():
            yield from block.points()

    def blocks(self) -> Iterator[Block]:
        """The walk's points as blocks (:func:`walk_blocks`), each point's parameters led by
        ``users`` and named per users."""
        for users, walk in self.walks.items():
            for block in walk.blocks():
                plans = [({"users": users, **_named(params, users)}, strategy) for params, strategy in block.plans]
                layouts = [(_named(params, users), values) for params, values in block.layouts]
                yield Block(plans, layouts, block.hardware)

    def prescreen(self, jobs: int, backend: str | None = None) -> None:
        """:meth:`DegreeWalk.prescreen` of each number of users."""
        for walk in self.walks.values():
            walk.prescreen(jobs, backend)

    def fitting_plans(self) -> int:
        """:meth:`DegreeWalk.fitting_plans` summed over the numbers of users."""
        return sum(walk.fitting_plans() for walk in self.walks.values())

    def builder(self) -> UsersBuilder:
        """The study's builder over the numbers of users some mapping fits.

        Raises:
            InputError: no mapping of any number of users fits the devices' memory.
        """
        builders, error = {}, None
        for users, walk in self.walks.items():
            try:
                builders[users] = walk.builder()
            except InputError as failed:
                error = failed
        if not builders:
            raise InputError(f"study: no mapping of {self.model.name} serving {min(self.walks)} to"
                             f" {max(self.walks)} users ({self.lengths}) fits the memory of"
                             f" {self.hardware.name!r}") from error
        return UsersBuilder(builders)


def _named(params: dict, users: int) -> dict:
    """``params`` with names conditioned on ``users`` (:func:`per_users`)."""
    return {per_users(k, users): v for k, v in params.items()}


def replace_fixed(spec: StudySpec, fixed: dict) -> StudySpec:
    """The sub-study of a serving ``spec`` with ``fixed`` as its fixed fields (one number of
    users): the serving keys live in ``fixed`` there; microbatches up to the users by default."""
    sizes = DEFAULT_USERS if spec.microbatch_sizes == DEFAULT_MICROBATCH_SIZES else spec.microbatch_sizes
    return replace(spec, fixed=fixed, mode="training", prompt_length=None, decode_context_length=None,
                   min_tokens_per_s_per_user=None, max_ttft_s=None, objectives=("throughput",),
                   microbatch_sizes=sizes)
