"""A generator of bad inputs and a judge of what ``palm-search`` does with them.

A :class:`Case` is the files a user could hand the CLI and the command line naming them. The
hypothesis strategy :func:`cases` draws them from four sources:

* **schema**: a valid model, hardware, strategy or study document with one key dropped, renamed,
  duplicated in another unit or given a bad value (wrong type, NaN, infinities, zero, negative,
  1e-300, 1e300, huge integers, nested tables...);
* **bytes**: a bundled preset's bytes corrupted (bytes flipped, invalid UTF-8, NUL, truncation,
  lines repeated or dropped, empty file);
* **file kinds**: a path that is a directory, a FIFO, a symlink loop, missing, or a sparse file of
  100 MiB;
* **flags**: random values for ``simulate``'s strategy flags and ``optimize``'s options.

:func:`run` runs a case as a real ``palm-search`` process and :func:`verdict` judges it: exit 0
with a JSON result, or exit 2 with exactly one line on stderr; never a traceback, never past
:data:`HANG_S`, and an ``optimize`` that fails leaves no run directory behind.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from hypothesis import strategies as st

from simulator import strategy_fields, strategy_flags

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
MODELS = tomllib.loads((ROOT / "simulator/workload/presets/models.toml").read_text())
BASES = {
    "model": {"model": {k: v for k, v in MODELS["T-1.7B"].items() if k != "aliases"}},
    "hardware": tomllib.loads((DATA / "mini-mesh.toml").read_text()),
    "strategy": {"strategy": {"tp": 2, "pp": 2, "dp": 2, "microbatch_size": 1, "global_batch_size": 16,
                              "schedule": "1f1b", "recompute": "full"}},
    "study": {**tomllib.loads((DATA / "small-study.toml").read_text())},
}
BASES["study"]["study"] = {**BASES["study"]["study"], "hardware": str(DATA / "mini-mesh.toml"), "trials": 4}
BASES["decode strategy"] = {"strategy": {"tp": 2, "pp": 2, "microbatch_size": 4, "global_batch_size": 8,
                                         "mode": "inference", "prompt_length": 64, "decode_context_length": 65}}
BASES["serving study"] = {"study": {"name": "serving-small", "model": "T-1.7B", "mode": "inference",
                                    "hardware": str(DATA / "mini-mesh.toml"), "prompt_length": 64,
                                    "min_tokens_per_s_per_user": 1, "trials": 4},
                          "search": {"users": [1, 2]}}
"""Valid documents the schema cases damage: a model, a machine, a training and a decode strategy
(LLM inference: prompt and KV-cache context), a training and a serving study."""
BASES["multi-chip hardware"] = tomllib.loads((ROOT / "simulator/hardware/presets/wormhole-n300.toml").read_text())
"""A machine of two chips: its inter-chip hop latency, interleaved DRAM and two-level collectives are keys
the mini mesh lacks."""
BASES["multi-wafer hardware"] = tomllib.loads((ROOT / "simulator/hardware/presets/wafer-4.toml").read_text())
"""A machine of four wafers (``base = "wafer"``): its inter-wafer link keys."""
BASES["gpu hardware"] = tomllib.loads((ROOT / "simulator/hardware/presets/h100-cluster.toml").read_text())
"""A GPU cluster: its fused-attention (forward and backward) and FP8 efficiencies are keys the mini mesh lacks."""
BASES["moe model"] = {"model": {k: v for k, v in MODELS["Mixtral-8x7B"].items() if k != "aliases"}}
"""A Mixture-of-Experts model: its expert keys are keys a dense model lacks."""
BASES["classifier model"] = {"model": {k: v for k, v in MODELS["BERT-base-SST-2"].items() if k != "aliases"}}
"""A model with a classification head (``num_classes``)."""
BASES["hf config"] = json.loads((ROOT / "tests/simulator/workload/hf_configs/Mixtral-8x7B.json").read_text())
"""A Hugging Face ``config.json`` given to ``simulate --model`` (a JSON file, not TOML)."""
BASES["windowed model"] = {"model": {**BASES["model"]["model"], "sliding_window": 512, "sliding_window_pattern": 2}}
"""A model with sliding-window attention on every other layer."""
BASES["windowed hf config"] = {**BASES["hf config"], "sliding_window": 4096,
                               "layer_types": ["sliding_attention", "full_attention"] * 16}
"""A Hugging Face config whose ``layer_types`` list windowed and full-attention layers."""
BASES["recompute strategy"] = {"strategy": {**BASES["strategy"]["strategy"], "recompute": "selective",
                                            "recompute_modules": "layernorm,mlp"}}
"""A strategy recomputing Megatron-Core modules (its comma-separated ``recompute_modules``)."""
BASES["stack"] = tomllib.loads((ROOT / "simulator/stacks/presets/deepspeed-0.3-zero3.toml").read_text())
"""A software stack file, given to ``simulate --stack``."""
BASES["serving stack"] = tomllib.loads((ROOT / "simulator/stacks/presets/tt-transformers-performance.toml").read_text())
"""A serving stack file: its tables of operator classes (weight formats, math fidelities) and KV-cache format."""
BASES["training stack"] = tomllib.loads((ROOT / "simulator/stacks/presets/torchtitan-fsdp2-eager.toml").read_text())
"""A training stack file with its recompute policy, reduction format and table of element-wise bytes."""
BASES["codesign summary"] = {"best": {"per_model": {"T-1.7B": {"samples_per_s": 1.0}, "T-3.6B": {}}}}
"""A co-design run's ``best.json`` given to ``simulate --strategy``: it replays the ``best-<model>.json``
beside it (:data:`JSON_FILES`) of the model ``--model`` names."""
JSON_FILES = {"config": "config.json", "summary": "best.json", "mapping": "best-T-1.7B.json"}
"""The files a case writes as JSON, by their name in the case (the others are TOML)."""
BAD_VALUES = ["text", "", -1, 0, -0.5, math.nan, math.inf, -math.inf, 1e308, 1e300, 1e-300, 10**18, 2**63 - 1,
              True, 2.5, [], [1, "x"], {"nested": 1}]
PRESET_FILES = [ROOT / "simulator/hardware/presets/wafer.toml", ROOT / "simulator/hardware/presets/h100-cluster.toml",
                ROOT / "simulator/workload/presets/models.toml", DATA / "small-study.toml", DATA / "mini-mesh.toml"]
HANG_S = 120.0
"""A case still running after this long (s) is a hang (the evaluation budget is 60 s)."""
SIMULATE = ["--network", "analytical", "--json"]
OPTIMIZE = ["--trials", "2", "--jobs", "1", "--network", "analytical", "--fidelity", "full", "--artifacts-top", "0",
            "--json"]
"""Flags every case adds, keeping a valid input's run short (optimize: two trials, one process)."""


@dataclass
class Case:
    """Files (name -> bytes, or a special kind ``dir``, ``fifo``, ``loop``, ``missing``,
    ``sparse``) and the command line, where ``{name}`` stands for the file's path."""

    argv: list[str]
    files: dict[str, bytes | str] = field(default_factory=dict)
    source: str = ""

    def __str__(self) -> str:
        shown = {k: (v if isinstance(v, str) else v[:300]) for k, v in self.files.items()}
        return f"{self.source}: palm-search {' '.join(self.argv)}  files={shown}"


# -- documents -----------------------------------------------------------------------------------


def key_paths(document: dict, prefix: tuple = ()) -> list[tuple]:
    """Every key path of a nested document (tables and leaves)."""
    out = []
    for key, value in document.items():
        out.append((*prefix, key))
        if isinstance(value, dict):
            out += key_paths(value, (*prefix, key))
    return out


@st.composite
def mutated(draw, kind: str) -> dict:
    """``BASES[kind]`` with one key dropped, given a bad value, renamed, or joined by an unknown one."""
    document = json.loads(json.dumps(BASES[kind]))
    path = draw(st.sampled_from(key_paths(document)), label="path")
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    operation = draw(st.sampled_from(["drop", "value", "unknown", "scale", "unit"]), label="operation")
    value = parent[path[-1]]
    if operation == "drop":
        del parent[path[-1]]
    elif operation == "value":
        parent[path[-1]] = draw(st.sampled_from(BAD_VALUES), label="value")
    elif operation == "scale" and isinstance(value, int | float) and not isinstance(value, bool):
        parent[path[-1]] = value * draw(st.sampled_from([1e-300, 1e-9, -1, 1e9, 1e300]), label="factor")
    elif operation == "unit":  # the same quantity twice, in another unit
        parent[str(path[-1]) + "_GB"] = value
    else:
        parent["unknown_key_" + str(path[-1])] = 1
    return document


def to_toml(document: dict, prefix: str = "") -> str:
    """A minimal TOML writer (scalars, arrays, nested tables) that can also write NaN and inf."""
    lines, tables = [], []
    for key, value in document.items():
        if isinstance(value, dict):
            tables.append((key, value))
        else:
            lines.append(f"{json.dumps(key)} = {_value(value)}")
    text = "\n".join(lines) + "\n"
    for key, value in tables:
        name = f"{prefix}.{json.dumps(key)}" if prefix else json.dumps(key)
        text += f"\n[{name}]\n" + to_toml(value, name)
    return text


def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


# -- cases ---------------------------------------------------------------------------------------


def simulate_case(files: dict[str, bytes | str], source: str) -> Case:
    """``simulate`` of the given files (a ``stack`` file only when given); the missing ones are the
    valid bases."""
    for kind in ("model", "hardware", "strategy"):
        files.setdefault(kind, to_toml(BASES[kind]).encode())
    stack = ["--stack", "{stack}"] if "stack" in files else []
    argv = ["simulate", "--model", "{model}", "--hw", "{hardware}", "--strategy", "{strategy}", *stack, *SIMULATE]
    return Case(argv=argv, files=files, source=source)


def optimize_case(study: bytes | str, source: str) -> Case:
    return Case(argv=["optimize", "--study", "{study}", "--run-dir", "{run}", *OPTIMIZE], files={"study": study},
                source=source)


@st.composite
def schema_cases(draw) -> Case:
    kind = draw(st.sampled_from(["model", "moe model", "classifier model", "windowed model", "hf config",
                                 "windowed hf config", "hardware", "multi-chip hardware", "multi-wafer hardware",
                                 "gpu hardware", "strategy", "decode strategy", "recompute strategy", "stack",
                                 "serving stack", "training stack", "codesign summary",
                                 "study", "serving study"]), label="kind")
    if kind.endswith("hf config"):
        case = simulate_case({"config": json.dumps(draw(mutated(kind))).encode()}, f"schema {kind}")
        return replace(case, argv=[a.replace("{model}", "{config}") for a in case.argv])
    if kind == "codesign summary":
        case = simulate_case({"summary": json.dumps(draw(mutated(kind))).encode(),
                              "mapping": json.dumps(BASES["strategy"]).encode()}, f"schema {kind}")
        return replace(case, argv=[{"{strategy}": "{summary}", "{model}": "T-1.7B"}.get(a, a) for a in case.argv])
    text = to_toml(draw(mutated(kind))).encode()
    if kind.endswith("study"):
        return optimize_case(text, f"schema {kind}")
    return simulate_case({kind.split()[-1]: text}, f"schema {kind}")


@st.composite
def corrupted(draw) -> bytes:
    """A preset's bytes, damaged."""
    data = bytearray(draw(st.sampled_from(PRESET_FILES)).read_bytes())
    operation = draw(st.sampled_from(["flip", "utf8", "nul", "truncate", "lines", "empty", "binary"]))
    at = draw(st.integers(0, max(len(data) - 1, 0)))
    if operation == "flip":
        for _ in range(draw(st.integers(1, 8))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    elif operation == "utf8":
        data[at:at] = b"\xff\xfe\xc3"
    elif operation == "nul":
        data[at:at] = b"\x00"
    elif operation == "truncate":
        del data[at:]
    elif operation == "lines":
        lines = bytes(data).splitlines(keepends=True)
        i = draw(st.integers(0, len(lines) - 1))
        lines[i:i + 1] = [] if draw(st.booleans()) else [lines[i]] * 2
        data = bytearray(b"".join(lines))
    elif operation == "empty":
        data = bytearray()
    else:
        data = bytearray(draw(st.binary(min_size=1, max_size=64)))
    return bytes(data)


@st.composite
def byte_cases(draw) -> Case:
    data = draw(corrupted())
    target = draw(st.sampled_from(["model", "hardware", "strategy", "study"]))
    if target == "study":
        return optimize_case(data, "bytes study")
    return simulate_case({target: data}, f"bytes {target}")


@st.composite
def file_kind_cases(draw) -> Case:
    kind = draw(st.sampled_from(["dir", "fifo", "loop", "missing", "sparse"]))
    target = draw(st.sampled_from(["model", "hardware", "strategy", "study"]))
    if target == "study":
        return optimize_case(kind, f"file {kind} study")
    return simulate_case({target: kind}, f"file {kind} {target}")


SWITCHES = tuple(flag.name for flag in strategy_flags() if flag.value_type is bool)
"""``simulate``'s strategy flags that are switches (``--tp-overlap``), given without a value."""
SIMULATE_FLAGS = (*strategy_fields(), "eval_timeout", "stack")
"""``simulate``'s flags drawn: every strategy field's (its own flag, or ``--stage-layers`` and
``--stage-devices``) and two of the command's own."""
OPTIMIZE_FLAGS = ("trials", "sampler", "seed", "objective", "network", "fidelity", "top", "artifacts_top", "jobs",
                  "executor", "eval_timeout", "stack", "mode", "precision", "prompt_length", "users")
FLAG_VALUES = st.one_of(st.sampled_from(["-1", "0", "1", "2", "3", "nan", "inf", "1e-300", "1e308",
                                         "99999999999999999999", "", "x", "1f1b", "gpipe", "full", "line",
                                         "0,1;2,3", "3,3", "-", "--", "\u00e9", "users", "heads", "within"]),
                        st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=8))
"""Flag values; no NUL (a command line cannot hold one) nor lone surrogates (nor encode them)."""


@st.composite
def flag_cases(draw) -> Case:
    if draw(st.booleans()):
        flags = draw(st.dictionaries(st.sampled_from(SIMULATE_FLAGS), FLAG_VALUES, min_size=1, max_size=4))
        argv = ["simulate", "--model", "T-1.7B", "--hw", str(DATA / "mini-mesh.toml"), *SIMULATE]
    else:
        flags = draw(st.dictionaries(st.sampled_from(OPTIMIZE_FLAGS), FLAG_VALUES, min_size=1, max_size=3))
        argv = ["optimize", "--study", str(DATA / "small-study.toml"), "--hw", str(DATA / "mini-mesh.toml"),
                "--run-dir", "{run}", *OPTIMIZE]
    for name, value in flags.items():
        argv += ["--" + name.replace("_", "-"), *([] if name in SWITCHES else [value])]
    return Case(argv=argv, source="flags")


def cases() -> st.SearchStrategy[Case]:
    """Every kind of bad input, in the proportions of a user's mistakes we can think of."""
    return st.one_of(schema_cases(), byte_cases(), file_kind_cases(), flag_cases())


# -- running and judging -------------------------------------------------------------------------


@dataclass
class Outcome:
    case: Case
    code: int | None
    stdout: str
    stderr: str
    run_dir_left: bool


def _materialise(case: Case, directory: Path) -> list[str]:
    paths = {"run": str(directory / "run")}
    for name, content in case.files.items():
        path = directory / JSON_FILES.get(name, f"{name}.toml")
        if content == "dir":
            path.mkdir()
        elif content == "fifo":
            os.mkfifo(path)
        elif content == "loop":
            path.symlink_to(path)
        elif content == "sparse":
            with path.open("wb") as file:
                file.truncate(100 * 2**20)
        elif content != "missing":
            path.write_bytes(content if isinstance(content, bytes) else content.encode())
        paths[name] = str(path)
    return [arg.format(**paths) if "{" in arg and arg.strip("{}") in paths else arg for arg in case.argv]


def run(case: Case, directory: Path) -> Outcome:
    """Run ``case`` as a ``palm-search`` process in ``directory`` (at most :data:`HANG_S`)."""
    argv = _materialise(case, directory)
    env = {**os.environ, "COLUMNS": "100", "PYTHONIOENCODING": "utf-8"}
    try:
        done = subprocess.run([sys.executable, "-m", "palm_search", *argv], cwd=directory, env=env, text=True,
                              capture_output=True, errors="replace", timeout=HANG_S, stdin=subprocess.DEVNULL)
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as error:
        code, stdout, stderr = None, str(error.stdout or ""), str(error.stderr or "")
    return Outcome(case, code, stdout, stderr, (directory / "run").exists())


def verdict(outcome: Outcome) -> str | None:
    """What is wrong with ``outcome`` (None: nothing): a hang, a traceback, another exit code,
    an error of more than one line, a result that is not JSON, or a failed optimize's run directory."""
    if outcome.code is None:
        return f"hang (> {HANG_S:g} s)"
    if "Traceback" in outcome.stderr or "Traceback" in outcome.stdout:
        return "traceback"
    if outcome.code == 0:
        try:
            json.loads(outcome.stdout)
        except ValueError:
            return "exit 0 without a JSON result"
        return None
    if outcome.code != 2:
        return f"exit code {outcome.code}"
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    if len(lines) != 1 or not lines[0].startswith("error"):
        return f"{len(lines)} lines on stderr"
    if outcome.case.argv[0] == "optimize" and outcome.run_dir_left:
        return "a failed optimize left its run directory"
    return None
