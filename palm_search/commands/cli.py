"""The ``palm-search`` command line (typer): thin adapters over the simulator and the search."""

from __future__ import annotations

from functools import wraps
from pathlib import Path
from typing import Annotated

import typer

from palm_search.commands.codesign import codesign_command
from palm_search.commands.hardware import hardware_app, hardware_cost, new_hardware
from palm_search.commands.optimize import dashboard_cmd, optimize_command
from palm_search.commands.worker import worker_cmd
from palm_search.search.study import DEFAULT_EVAL_TIMEOUT_S, MAX_EVAL_TIMEOUT_S
from simulator import (
    MEGATRON_CORE,
    PLACEMENTS,
    PRECISIONS,
    BudgetExceeded,
    Hardware,
    InputError,
    ModelSpec,
    PalmError,
    SimulationResult,
    Stack,
    Strategy,
    hardware_presets,
    load_hardware,
    load_model,
    load_stack,
    load_strategy,
    read_best,
    stack_presets,
    strategy_fields,
)
from simulator import __version__ as SIMULATOR_VERSION

app = typer.Typer(no_args_is_help=True, help="Simulate and search parallel mappings of large-model training.")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"palm-search {SIMULATOR_VERSION}")
        raise typer.Exit()


@app.callback()
def palm_search(
    version: Annotated[bool, Opt("--version", callback=_print_version, is_eager=True,
                                 help="Print the version and exit.")] = False,
) -> None:
    """Simulate and search parallel mappings of large-model training (after PALM, arXiv 2406.03868).
    Shell completion: palm-search --install-completion."""


STRATEGY_FLAGS = strategy_fields(flag=True)
"""The strategy fields ``simulate`` has a flag of its own name for (its signature lists them: a
test checks the two agree)."""


def fail(message: str) -> None:
    """Print a one-line error on stderr and exit with code 2."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


def _int_list(text: str, flag: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise InputError(f"{flag}: expected comma-separated integers, got {text!r}") from None


def build_strategy(base: Path | None, overrides: dict, stage_layers: str | None,
                   stage_devices: str | None) -> Strategy:
    """The strategy file's fields (if any) overridden by the flags the user gave.

    Raises:
        InputError: bad file or values.
    """
    fields = load_strategy(base).to_dict() if base else {}
    fields.update({k: v for k, v in overrides.items() if v is not None})
    if stage_layers:
        fields.update(partition="explicit", stage_layers=_int_list(stage_layers, "--stage-layers"))
    if stage_devices:
        groups = [_int_list(g, "--stage-devices") for g in stage_devices.split(";")]
        fields.update(placement="explicit", stage_devices=tuple(groups))
    return Strategy.from_dict(fields)


Opt = typer.Option


@app.command("simulate")
def simulate_command(
    model: Annotated[str | None, Opt("--model", help="Model preset (e.g. T-145B), TOML file or Hugging Face "
                                     "config.json (default: the one a --strategy best.json names).")] = None,
    hw: Annotated[str | None, Opt("--hw", help=f"Hardware preset ({', '.join(hardware_presets())}) "
                                  "or TOML file (default: the machine a --strategy best.json carries).")] = None,
    strategy_file: Annotated[Path | None, Opt("--strategy", help="Strategy TOML/JSON, e.g. a run's best.json "
                                              "(flags override).")] = None,
    tp: Annotated[int | None, Opt(help="Tensor-parallel degree.")] = None,
    pp: Annotated[int | None, Opt(help="Pipeline-parallel degree (stages).")] = None,
    dp: Annotated[int | None, Opt(help="Data-parallel degree.")] = None,
    cp: Annotated[int | None, Opt(help="Context-parallel degree: each sequence split over cp devices"
                                       " (ring attention).")] = None,
    ep: Annotated[int | None, Opt(help="Expert-parallel degree of a Mixture-of-Experts model: its routed experts"
                                       " split over ep of the dp*cp ranks (all-to-all dispatch).")] = None,
    etp: Annotated[int | None, Opt(help="Expert tensor-parallel degree: each routed expert split over etp ranks"
                                        " (1 or tp; default tp). With etp 1, ep*etp divides tp*cp*dp.")] = None,
    microbatch_size: Annotated[int | None, Opt(help="Samples per microbatch.")] = None,
    global_batch_size: Annotated[int | None, Opt(help="Samples per iteration (default: model's).")] = None,
    schedule: Annotated[str | None, Opt(help="gpipe, 1f1b, interleaved-1f1b or zb-h1.")] = None,
    num_chunks: Annotated[int | None, Opt(help="Model chunks per stage (interleaved).")] = None,
    recompute: Annotated[str | None, Opt(help="none, selective or full.")] = None,
    sequence_parallel: Annotated[bool | None, Opt("--sequence-parallel/--no-sequence-parallel")] = None,
    tp_overlap: Annotated[bool | None, Opt("--tp-overlap/--no-tp-overlap",
                                           help="Hide backward TP collectives behind weight-gradient GEMMs.")] = None,
    p2p_blocking: Annotated[bool | None, Opt("--p2p-blocking/--no-p2p-blocking",
                                             help="Stages wait for their pipeline sends (Megatron-LM).")] = None,
    zero_stage: Annotated[int | None, Opt(help="ZeRO stage 0-3.")] = None,
    shard_group_size: Annotated[int | None, Opt(help="Hybrid sharding with ZeRO-3: shard over groups of this many"
                                                " DP ranks, replicate across them (FSDP HYBRID_SHARD).")] = None,
    optimizer: Annotated[str | None, Opt(help="sgd or adam.")] = None,
    precision: Annotated[str | None, Opt(help=f"{', '.join(PRECISIONS)}.")] = None,
    mode: Annotated[str | None, Opt(help="training or inference.")] = None,
    partition: Annotated[str | None, Opt(help="balanced or uniform (see --stage-layers).")] = None,
    stage_layers: Annotated[str | None, Opt(help="Explicit layers per virtual stage, e.g. 4,4,3.")] = None,
    placement: Annotated[str | None, Opt(help=f"Stage-to-device order: {', '.join(PLACEMENTS)} "
                                         "(explicit: see --stage-devices).")] = None,
    stage_devices: Annotated[str | None, Opt(help="Explicit devices per stage: '0,1;2,3'.")] = None,
    group_layout: Annotated[str | None, Opt(help="TP groups compact or strided.")] = None,
    group_order: Annotated[str | None, Opt(help="tp-major or dp-major walk inside a stage.")] = None,
    wafer_stages: Annotated[str | None, Opt(help="On several wafers: span (stages cut from the order over all"
                                            " wafers) or within (walked wafer by wafer, no stage crossing a"
                                            " wafer boundary).")] = None,
    transfer_strategy: Annotated[int | None, Opt(help="Inter-stage transfer, PALM Fig. 11: 1 or 2.")] = None,
    math_fidelity: Annotated[str | None, Opt(help="Matrix-engine passes on hardware that has them: LoFi, HiFi2, "
                                             "HiFi3 or HiFi4 (default: the stated peak).")] = None,
    attention: Annotated[str | None, Opt(help="Attention core: fused (FlashAttention, where the hardware states"
                                         " its efficiency), unfused, or auto (default: fused where stated).")] = None,
    prompt_length: Annotated[int | None, Opt(help="Inference: prompt tokens per sample (default: the model's"
                                             " sequence length).")] = None,
    decode_context_length: Annotated[int | None, Opt(help="Inference: simulate one decode step, each sample's"
                                                     " new token attending to a KV cache of this many"
                                                     " tokens (0: the prompt's forward).")] = None,
    attention_split: Annotated[str | None, Opt(help="Inference: how a TP group divides attention: heads"
                                               " (Megatron) or users (sample x KV-head pairs, as tt-metal's"
                                               " decode over a core grid).")] = None,
    stack: Annotated[str | None, Opt("--stack", help=f"Software stack preset ({', '.join(stack_presets())}) or TOML"
                                     " file (default: megatron-core, the hardware files' calibration).")] = None,
    network: Annotated[str, Opt(help="sharing (links' and DRAM ports' bandwidth shared max-min fairly),"
                                     " contention (PALM: links and DRAM ports held exclusively), analytical (no"
                                     " contention) or estimate (closed form, no events).")] = "sharing",
    steady_state: Annotated[bool, Opt("--steady-state/--full", help="Extrapolate from steady state.")] = True,
    json_output: Annotated[bool, Opt("--json", help="Print one JSON document on stdout.")] = False,
    trace: Annotated[Path | None, Opt(help="Write the timeline as a Chrome trace (Perfetto) JSON file.")] = None,
    plots: Annotated[Path | None, Opt(help="Write timeline, placement, heatmap PNG/SVG into this directory.")] = None,
    eval_timeout: Annotated[float, Opt(help="Wall-clock budget of the simulation (s); over it, one line and exit 2.",
                                       min=1e-3, max=MAX_EVAL_TIMEOUT_S)] = DEFAULT_EVAL_TIMEOUT_S,
) -> None:
    """Simulate one training (or inference) iteration of MODEL on HW with one strategy."""
    values = locals()
    overrides = {k: values[k] for k in STRATEGY_FLAGS}
    try:
        strategy = build_strategy(strategy_file, overrides, stage_layers, stage_devices)
        model_spec, hardware = _model_and_machine(model, hw, strategy_file)
        result = _simulate_and_draw(model_spec, hardware, strategy, network, steady_state, trace, plots,
                                    eval_timeout, load_stack(stack) if stack else MEGATRON_CORE)
    except BudgetExceeded as error:
        fail(f"{error}; --eval-timeout {eval_timeout:g} s (give more to wait longer)")
    except PalmError as error:
        fail(str(error))
    if json_output:
        typer.echo(result.to_json())
    else:
        from palm_search.views.render import print_result  # rich: only to print

        print_result(result, machine_devices=hardware.num_devices)


def _model_and_machine(model: str | None, hw: str | None, strategy_file: Path | None) -> tuple[ModelSpec, Hardware]:
    """The model and machine of ``simulate``: the flags, else what a ``best.json`` names.

    Raises:
        InputError: neither the flag nor the strategy file names one; bad files.
    """
    named_model, machine = read_best(strategy_file) if strategy_file else (None, None)
    if not (model or named_model):
        raise InputError("--model: required (or a --strategy best.json that names the model)")
    if not (hw or machine):
        raise InputError("--hw: required (or a --strategy best.json that carries the machine)")
    return load_model(model or named_model), load_hardware(hw) if hw else machine


def _simulate_and_draw(model: ModelSpec, hardware: Hardware, strategy: Strategy, network: str,
                       steady_state: bool, trace: Path | None, plots: Path | None,
                       time_limit_s: float, stack: Stack = MEGATRON_CORE) -> SimulationResult:
    """One simulation within ``time_limit_s`` under ``stack``; with a trace or plots asked, the
    recorded one (three engine runs in all)."""
    from simulator import simulate, simulate_timeline  # numpy, SimPy and the engine: not at start-up

    if not (trace or plots):
        return simulate(model, hardware, strategy, network=network, steady_state=steady_state,
                        time_limit_s=time_limit_s, stack=stack)
    from palm_search.views.report import write_visuals

    timeline = simulate_timeline(model, hardware, strategy, network=network, steady_state=steady_state,
                                 time_limit_s=time_limit_s, stack=stack)
    for path in write_visuals(timeline, trace, plots):
        typer.echo(f"wrote {path}", err=True)
    return timeline.result


@app.command("report")
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory of palm-search optimize.")],
) -> None:
    """Write RUN_DIR/report.html: one self-contained page explaining the search and its best mapping."""
    from palm_search.views.report import write_report

    try:
        path = write_report(run_dir, on_progress=lambda text: typer.echo(text, err=True))
    except PalmError as error:
        fail(str(error))
    typer.echo(str(path))


def _user_errors(command):
    """``command`` with a :class:`PalmError` turned into the one-line error and exit code 2."""
    @wraps(command)
    def run(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except PalmError as error:
            fail(str(error))
    return run


def _resumable(command):
    """``optimize`` with an operating-system error (a full disk...) as one line that says the run
    can resume: every trial told before it is in the study."""
    @wraps(command)
    def run(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except OSError as error:
            fail(f"{os_error(error)}; the trials told before it are kept: fix this and run the same command to resume")
    return run


app.command("optimize")(_user_errors(_resumable(optimize_command)))
app.command("codesign")(_user_errors(codesign_command))
hardware_app.command("new")(_user_errors(new_hardware))
hardware_app.command("cost")(_user_errors(hardware_cost))
app.add_typer(hardware_app, name="hardware")
app.command("dashboard")(_user_errors(dashboard_cmd))
app.command("worker")(_user_errors(worker_cmd))


def _click_error(name: str) -> type[Exception]:
    """Click's exception class ``name`` as the installed typer uses it (typer vendors click)."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


def main() -> None:
    """Entry point of the ``palm-search`` command: a bad flag is one line on stderr, exit code 2."""
    usage_error = _click_error("UsageError")
    try:
        code = app(standalone_mode=False)
    except usage_error as error:
        where = f" ({error.ctx.command_path})" if getattr(error, "ctx", None) else ""
        typer.echo(f"error{where}: {error.format_message()}", err=True)
        raise SystemExit(2) from None
    except typer.Abort:
        typer.echo("error: aborted", err=True)
        raise SystemExit(130) from None
    except OSError as error:  # a full disk, a read-only directory...: the machine's answer, one line
        typer.echo(f"error: {os_error(error)}", err=True)
        raise SystemExit(2) from None
    raise SystemExit(code or 0)


def os_error(error: OSError) -> str:
    """One line for an operating-system error: the file (when known), the reason and errno."""
    where = f"{error.filename}: " if error.filename else ""
    return f"{where}{error.strerror or error} (errno {error.errno})"


@app.command("validate")
def validate(
    suite: Annotated[list[str] | None, Opt(help="Suite to run (repeat); default all.")] = None,
    csv_output: Annotated[bool, Opt("--csv", help="Print the rows as CSV on stdout.")] = False,
    json_output: Annotated[bool, Opt("--json", help="Print one JSON document on stdout.")] = False,
    jobs: Annotated[int, Opt(help="Worker processes (default: all cores).")] = -1,
) -> None:
    """Compare the simulator with published measurements (studies/validation)."""
    import json

    from palm_search.commands.validate import SUITES, run_suites, summary, to_frame
    from palm_search.views.render import print_validation

    try:
        rows = run_suites(suite or list(SUITES), jobs=jobs)
    except PalmError as error:
        fail(str(error))
    if csv_output:
        typer.echo(to_frame(rows).to_csv(index=False), nl=False)
    elif json_output:
        typer.echo(json.dumps({"rows": to_frame(rows).to_dict(orient="records"), "summary": summary(rows)}))
    else:
        print_validation(rows, summary(rows))
