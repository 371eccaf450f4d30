"""The ``palm-search`` command line (typer): thin adapters over the simulator and the search."""

from __future__ import annotations

import inspect
from functools import wraps
from pathlib import Path
from typing import Annotated, Any

import typer

from palm_search.commands.codesign import codesign_command
from palm_search.commands.hardware import hardware_app, hardware_cost, new_hardware
from palm_search.commands.optimize import dashboard_cmd, optimize_command
from palm_search.commands.worker import worker_cmd
from palm_search.search.study import DEFAULT_EVAL_TIMEOUT_S, MAX_EVAL_TIMEOUT_S
from simulator import (
    DEFAULT_NETWORK,
    MEGATRON_CORE,
    NETWORKS,
    BudgetExceeded,
    Hardware,
    InputError,
    ModelSpec,
    PalmError,
    SimulationResult,
    Stack,
    Strategy,
    StrategyFlag,
    hardware_presets,
    load_hardware,
    load_model,
    load_stack,
    load_strategy,
    read_best,
    read_json_document,
    stack_presets,
    strategy_flags,
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
NETWORK_HELP = ", ".join(f"{name} ({what})" for name, what in NETWORKS.items()) + "."
"""``--network``'s help: every network model with what it models (:data:`simulator.NETWORKS`)."""


def _strategy_option(flag: StrategyFlag) -> inspect.Parameter:
    """The option of one strategy flag: ``--name VALUE``, or the switch ``--name/--no-name`` of a
    bool; not given (None), the strategy file's value or the field's default stands."""
    dashed = flag.name.replace("_", "-")
    declarations = (f"--{dashed}/--no-{dashed}",) if flag.value_type is bool else ()
    annotation = Annotated[flag.value_type | None, Opt(*declarations, help=flag.help)]
    return inspect.Parameter(flag.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)


def with_strategy_flags(after: str):
    """A decorator giving a command one option per strategy flag (:func:`simulator.strategy_flags`,
    built from ``Strategy``'s fields), placed after its parameter ``after``; the command takes them
    in its ``**flags``. Typer reads a command's options from ``inspect.signature``, which returns
    the ``__signature__`` set here, and calls the command with them as keywords: a new strategy
    field needs no edit of the command."""
    def decorate(command):
        parameters = []
        for parameter in inspect.signature(command, eval_str=True).parameters.values():
            if parameter.kind is not inspect.Parameter.VAR_KEYWORD:
                parameters.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY))
            if parameter.name == after:
                parameters += [_strategy_option(flag) for flag in strategy_flags()]
        command.__signature__ = inspect.Signature(parameters)
        return command
    return decorate


@app.command("simulate")
@with_strategy_flags(after="strategy_file")
def simulate_command(
    model: Annotated[str | None, Opt("--model", help="Model preset (e.g. T-145B), TOML file or Hugging Face "
                                     "config.json (default: the one a --strategy best.json names).")] = None,
    hw: Annotated[str | None, Opt("--hw", help=f"Hardware preset ({', '.join(hardware_presets())}) "
                                  "or TOML file (default: the machine a --strategy best.json carries).")] = None,
    strategy_file: Annotated[Path | None, Opt("--strategy", help="Strategy TOML/JSON, e.g. a run's best.json "
                                              "(flags override).")] = None,
    stage_layers: Annotated[str | None, Opt(help="Explicit layers per virtual stage, e.g. 4,4,3.")] = None,
    stage_devices: Annotated[str | None, Opt(help="Explicit devices per stage: '0,1;2,3'.")] = None,
    stack: Annotated[str | None, Opt("--stack", help=f"Software stack preset ({', '.join(stack_presets())}) or TOML"
                                     " file (default: megatron-core, the hardware files' calibration).")] = None,
    network: Annotated[str, Opt(help=NETWORK_HELP)] = DEFAULT_NETWORK,
    steady_state: Annotated[bool, Opt("--steady-state/--full", help="Extrapolate from steady state.")] = True,
    json_output: Annotated[bool, Opt("--json", help="Print one JSON document on stdout.")] = False,
    trace: Annotated[Path | None, Opt(help="Write the timeline as a Chrome trace (Perfetto) JSON file.")] = None,
    plots: Annotated[Path | None, Opt(help="Write timeline, placement, heatmap PNG/SVG into this directory.")] = None,
    eval_timeout: Annotated[float, Opt(help="Wall-clock budget of the simulation (s); over it, one line and exit 2.",
                                       min=1e-3, max=MAX_EVAL_TIMEOUT_S)] = DEFAULT_EVAL_TIMEOUT_S,
    **flags: Any,
) -> None:
    """Simulate one training (or inference) iteration of MODEL on HW with one strategy."""
    try:
        strategy_file = _one_mapping(strategy_file, model)
        strategy = build_strategy(strategy_file, flags, stage_layers, stage_devices)
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


def _one_mapping(strategy_file: Path | None, model: str | None) -> Path | None:
    """``strategy_file``, or for a co-design run's ``best.json`` (the best chip and a mapping per
    model) the ``best-<model>.json`` beside it of its one model, or of ``model``.

    Raises:
        InputError: a co-design's ``best.json`` of several models without ``--model``, or without
            the one ``--model`` names.
    """
    if strategy_file is None or strategy_file.suffix != ".json":
        return strategy_file
    document = read_json_document(strategy_file)
    best = document.get("best") if isinstance(document, dict) and "strategy" not in document else None
    if not isinstance(best, dict) or not isinstance(best.get("per_model"), dict):
        return strategy_file
    from palm_search.codesign.outputs import mapping_file  # optuna and pandas: only for a co-design's file

    models = list(best["per_model"])
    chosen = [m for m in models if mapping_file(m) == mapping_file(model)] if model else models
    if len(chosen) != 1:
        wanted = f"--model {model} is not one of them" if model else "choose one with --model"
        raise InputError(f"{strategy_file}: a co-design summary with a mapping per model ({', '.join(models)}); "
                         f"{wanted}, or replay {strategy_file.parent}/best-<model>.json")
    return strategy_file.parent / mapping_file(chosen[0])


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
