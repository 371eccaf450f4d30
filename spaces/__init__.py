"""What the search may propose: the space of mappings of a model onto a machine.

A point of the space is a :class:`spaces.candidate.Candidate`: a machine and a
:class:`simulator.Strategy` on it. Its dimensions, one module each:

* :mod:`spaces.parallelism`: degrees ``(tp, pp, dp)`` with ``tp * pp * dp`` = the devices, ``tp``
  dividing heads / hidden / FFN, ``pp`` at most the layers, ``dp`` dividing the global batch
  (Megatron-LM, Narayanan et al. SC'21 §3); microbatch size dividing ``B / dp``; schedule GPipe /
  1F1B / interleaved 1F1B with 2 or 4 chunks; recompute; sequence parallelism; ZeRO stage.
* :mod:`spaces.placement`: stage placement on the mesh: PALM's ``line`` and ``s-shape``
  (arXiv 2406.03868 §V-B, Fig. 8), mirrored / transposed s-shapes, row and column snakes, a
  generalized Hilbert curve, and validated user placements.
* :mod:`spaces.groups`: TP/DP group layout inside a stage (PALM Fig. 8, comm1 vs comm2).
* :mod:`spaces.partition`: layers per stage: balanced, uniform, or the min-max partition under
  the device memory (Piper, Tarnawski et al. NeurIPS'21).
* :mod:`spaces.feasible`: the plans (degrees, microbatch, schedule, recompute, sequence
  parallelism, ZeRO) that fit the devices' memory, found before the search proposes any.
* :mod:`spaces.training`: all of them drawn from one Optuna trial into a candidate.

Each module has ``enumerate_*`` (every legal point, deterministic order) and ``suggest_*(trial, ...)``.
Suggestions never change a categorical's choices between trials (Optuna 5 rejects that): fixed
lists of labels (``degrees = "8x20x2"``), and parameter names that carry what the choices depend on
(``microbatch_size|dp=2``, ``schedule|only=gpipe,1f1b``); see :mod:`spaces._choices`.

Imports flow ``palm_search -> spaces -> simulator``: this package imports optuna and simulator only.
"""

from spaces.candidate import Candidate
from spaces.feasible import DegreePlans, FeasiblePlans, degree_plans, feasible_plans, plan_of, plans_tree
from spaces.groups import GroupChoice, enumerate_group_layouts, suggest_group_layout
from spaces.parallelism import (
    ParallelDegrees,
    ScheduleChoice,
    enumerate_degrees,
    enumerate_microbatch_sizes,
    enumerate_recompute,
    enumerate_schedules,
    enumerate_sequence_parallel,
    enumerate_zero_stages,
    node_shard_group_size,
    suggest_degrees,
    suggest_microbatch_size,
    suggest_recompute,
    suggest_schedule,
    suggest_sequence_parallel,
    suggest_shard_group,
    suggest_zero_stage,
)
from spaces.partition import (
    enumerate_partitions,
    min_max_partition,
    min_max_stage_layers,
    suggest_partition,
)
from spaces.placement import (
    canonical_placement,
    custom_placements,
    enumerate_placements,
    placement_names,
    suggest_placement,
)
from spaces.training import DIMENSIONS, SearchedSpace, candidate_degrees, placement_key, suggest_candidate

__all__ = [
    "DIMENSIONS", "Candidate", "DegreePlans", "FeasiblePlans", "GroupChoice", "degree_plans", "feasible_plans",
    "plan_of", "plans_tree",
    "ParallelDegrees", "ScheduleChoice", "candidate_degrees",
    "canonical_placement", "custom_placements", "enumerate_degrees",
    "enumerate_group_layouts", "enumerate_microbatch_sizes",
    "enumerate_partitions", "enumerate_placements", "enumerate_recompute", "enumerate_schedules",
    "enumerate_sequence_parallel", "enumerate_zero_stages", "node_shard_group_size", "min_max_partition",
    "min_max_stage_layers",
    "placement_names", "suggest_degrees", "suggest_group_layout", "suggest_microbatch_size",
    "suggest_partition", "suggest_placement", "suggest_recompute", "suggest_schedule",
    "suggest_sequence_parallel", "suggest_shard_group", "suggest_zero_stage", "SearchedSpace", "suggest_candidate",
    "placement_key",
]
