"""Readable terminal summaries (rich) of simulation results."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from palm_search.views.explain import sentences
from simulator import SimulationResult, is_inference

OVER_CAPACITY = ("util above 100%: demand over capacity (the analytical network lets transfers overlap on a"
                 " resource; --network sharing makes them share it)")


def _gib(x: float) -> str:
    return f"{x / 2**30:.2f} GiB"


def _wide_console() -> Console:
    """A console; at least 150 columns wide when writing to a file or pipe."""
    console = Console()
    return console if console.is_terminal else Console(width=150)


def print_result(result: SimulationResult, console: Console | None = None, machine_devices: int | None = None) -> None:
    """Print the headline numbers, the per-stage table and the busiest resources; with
    ``machine_devices``, how many of the machine's devices the mapping leaves idle."""
    console = console or _wide_console()
    s = result.strategy
    context = f" cp={s['cp']}" if s.get("cp", 1) > 1 else ""
    context += f" ep={s['ep']}" if s.get("ep", 1) > 1 else ""
    context += f" etp={s['etp']}" if s.get("etp") not in (None, s["tp"]) else ""
    context += " ep-overlap" if s.get("ep_overlap") else ""
    zero = f" zero={s['zero_stage']}" + (f"/{s['shard_group_size']}" if s.get("shard_group_size") else "")
    modules = s.get("recompute_modules", "core_attn")
    recompute = s["recompute"] + (f"({modules})" if s["recompute"] == "selective" and modules != "core_attn" else "")
    recipe = s.get("fp8_recipe", "delayed")
    precision = s["precision"] + (f"/{recipe} scaling" if recipe != "delayed" else "")
    console.print(f"[bold]{result.model}[/] on [bold]{result.hardware}[/]  tp={s['tp']} pp={s['pp']} "
                  f"dp={s['dp']}{context} microbatch={s['microbatch_size']} schedule={s['schedule']} "
                  f"recompute={recompute}{zero if s['zero_stage'] else ''} precision={precision} "
                  f"placement={_placement(s)} groups={s['group_layout']}")
    used = s["tp"] * s.get("cp", 1) * s["pp"] * s["dp"]
    if machine_devices and used < machine_devices:
        console.print(f"uses {used} of the machine's {machine_devices} devices ({machine_devices - used} idle:"
                      " --tp x --cp x --pp x --dp sets how many)")
    if not result.feasible:
        console.print(f"[red]infeasible[/]: {result.reason}")
        return
    how = (f"extrapolated from {result.simulated_microbatches} simulated microbatches"
           if result.extrapolated else f"{result.simulated_microbatches} microbatches simulated")
    period = "batch latency" if is_inference(s["mode"]) else "iteration"
    if s.get("decode_context_length"):
        console.print(f"decode step at a context of {s['decode_context_length']} tokens:"
                      f" time per output token {result.iteration_time_s:.4g} s |"
                      f" {1 / result.iteration_time_s:.4g} tokens/s per user |"
                      f" {result.tokens_per_s:.4g} tokens/s for {result.samples_per_s * result.iteration_time_s:.0f}"
                      " users")
    elif is_inference(s["mode"]) and s.get("prompt_length"):
        console.print(f"prefill of {s['prompt_length']} tokens: time to first token {result.iteration_time_s:.4g} s")
    console.print(
        f"{period} {result.iteration_time_s:.4g} s | {result.samples_per_s:.4g} samples/s | "
        f"{result.tokens_per_s:.4g} tokens/s | MFU {result.model_flops_utilisation:.1%} | "
        f"HFU {result.hardware_flops_utilisation:.1%} | bubble {result.bubble_fraction:.1%}\n"
        f"{result.num_microbatches} microbatches per replica, {how}; network {result.network}; "
        f"{result.events_simulated} events in {result.wall_time_s * 1e3:.0f} ms"
    )
    console.print(_stage_table(result))
    console.print(_resource_table(result))


def _stage_table(result: SimulationResult) -> Table:
    table = Table(title="per pipeline stage (one device)")
    host = any(st.host_s for st in result.stages)  # a column only where a stage waited on the host
    for column in ("stage", "compute s", "comm s", "DRAM stall s", "optimizer s", *(("host s",) if host else ()),
                   "bubble s", "memory", "in flight"):
        table.add_column(column, justify="right")
    for st in result.stages:
        table.add_row(str(st.stage), f"{st.compute_s:.3f}", f"{st.communication_s:.3f}",
                      f"{st.dram_stall_s:.3f}", f"{st.optimizer_s:.3f}", *((f"{st.host_s:.3f}",) if host else ()),
                      f"{st.bubble_s:.3f}", _gib(st.memory_bytes), str(st.microbatches_in_flight))
    return table


def _resource_table(result: SimulationResult) -> Table:
    table = Table(title="resources and traffic")
    for column in ("kind", "count", "max util", "mean util", "busiest"):
        table.add_column(column)
    for r in result.resources:
        busiest = ", ".join(f"{name} {u:.0%}" for name, u in r.busiest[:3])
        table.add_row(r.kind, str(r.count), f"{r.max_utilisation:.1%}", f"{r.mean_utilisation:.1%}", busiest)
    traffic = "  ".join(f"{k} {v / 1e9:.1f} GB" for k, v in result.traffic_bytes.items())
    table.caption = f"traffic per iteration: {traffic}"
    if any(r.max_utilisation > 1 for r in result.resources):
        table.caption += f"\n{OVER_CAPACITY}"
    return table


def _certificate(screened: dict) -> str:
    """What the screen certifies once every queued point is simulated (:func:`.screen.certified_margin`),
    or "" (an older study, queued points not simulated yet, or nothing certified: a serving search
    queues the estimates' Pareto front first, so a point left out may estimate above one queued)."""
    margin = screened.get("margin")
    if margin is None or margin <= 0.0 or not screened["queued"] \
            or screened.get("queued_simulated", 0) < screened["queued"]:
        return ""
    if margin >= 1.0:
        return "certified: every point with a positive estimate was simulated"
    return f"certified: every point whose estimate is within {margin:.2%} of the best estimate was simulated"


def print_search_summary(summary: dict, console: Console | None = None) -> None:
    """Print the best mappings of a search, the baseline, and where to look further."""
    console = console or _wide_console()
    base = summary.get("baseline") or {}
    new = summary.get("new_trials")
    added = "" if new is None else f"; {new:,} new trial{'' if new == 1 else 's'}" + (
        " (the study had already finished: re-run with a larger --trials to search further)" if new == 0 else "")
    console.print(f"[bold]{summary['study']}[/]: {summary['trials']} trials ({summary['feasible']} feasible, "
                  f"{summary['failed']} failed), sampler {summary['sampler']}{added}")
    if summary.get("devices"):
        console.print(summary["devices"], markup=False, highlight=False)
    screen = summary.get("memory_prescreen")
    if screen:
        console.print(f"memory pre-screen: {screen['fitting']} of {screen['plans']} plans fit the devices"
                      f" ({screen['checked']} checked); the search proposed only those")
    serving = is_inference(summary.get("mode"))
    screened = summary.get("screen")
    if screened:
        rho, compared = screened.get("spearman"), screened.get("compared", 0)
        agreement = (f"Spearman {rho:.2f} over {compared} simulated" if rho is not None else
                     f"undefined (the {compared} simulated trials tie in estimate or simulation)" if compared
                     else "-")
        if rho is not None and "simulated_span" in screened:
            agreement += (f" (their {'tokens/s' if serving else 'samples/s'} within {screened['simulated_span']:.1%}"
                          " of each other; every"
                          f" estimate within {screened['largest_gap']:.1%} of its simulation)")
        console.print(f"screen: {screened['points']:,} points estimated in {screened['seconds']:.1f} s, the best"
                      f" {screened['queued']} simulated; estimate vs simulation rank agreement: {agreement}")
        certificate = _certificate(screened)
        if certificate:
            console.print(certificate)
    if base:
        rate = (f"{base.get('tokens_per_s') or 0:.4g} tokens/s, {base.get('tokens_per_s_per_user') or 0:.4g} per user"
                if serving else f"{base.get('samples_per_s', 0):.4g} samples/s")
        state = rate if base.get("feasible") else f"infeasible: {base.get('reason')}"
        console.print(f"baseline ({summary.get('baseline_note', '')}): {state}")
    families = summary.get("families") or {}
    if len(families) == 2:
        console.print(_family_line(families))
    if serving:
        console.print(_serving_table(summary["top"]))
    else:
        console.print(_top_table(summary["top"], narrow=console.width < WIDE_TABLE_COLUMNS))
    if console.width < WIDE_TABLE_COLUMNS and not serving:
        console.print(NARROW_LEGEND)
    for line in sentences(summary.get("explanation") or {}, "tokens/s" if serving else "samples/s"):
        console.print(line, highlight=False)
    if summary.get("pareto_front") and serving:
        console.print("Pareto front (users: tokens/s per user, system tokens/s; mapping): " + "; ".join(
            f"#{p['trial']} {p['users']}: {p['tokens_per_s_per_user']:.4g}, {p['tokens_per_s']:.4g}"
            f" (TP {p['tp']} / PP {p['pp']} / DP {p['dp']}, mb {p['microbatch_size']}, {p['placement']})"
            for p in summary["pareto_front"]))
    elif summary.get("pareto_front"):
        console.print("Pareto front (samples/s vs peak memory per device): " + "; ".join(
            f"#{p['trial']} {p['samples_per_s']:.4g}/s at {p['peak_memory_GiB']:.3g} GiB"
            for p in summary["pareto_front"]))
    console.print(f"run directory: {summary['run_dir']} (best.json, trials.csv)\n"
                  f"open the study: {summary['dashboard']}")


WIDE_TABLE_COLUMNS = 120
"""Terminal width from which the top-mappings table shows every column."""
NARROW_LEGEND = ("tp.pp.dp: parallel degrees (x CP n: context-parallel degree n); mb: microbatch;"
                 " i1f1b: interleaved 1F1B; recomp: sel(ective); z: ZeRO stage (3/8: hybrid, sharded over"
                 " groups of 8 DP ranks); x base: speed-up over the baseline")
WIDE = {"tp": "tp", "pp": "pp", "dp": "dp", "microbatch_size": "mb", "schedule": "schedule",
        "recompute": "recomp", "zero_stage": "zero", "placement": "placement", "group_layout": "groups",
        "samples_per_s": "samples/s", "model_flops_utilisation": "MFU", "peak_memory_GiB": "GiB/dev",
        "bubble_fraction": "bubble", "speedup": "speedup"}
"""The top-mappings table's columns on a wide terminal: row key -> header."""


def _top_table(top: list[dict], narrow: bool) -> Table:
    """The top mappings: every column of :data:`WIDE`, or (``narrow``) the ones that fit 80
    columns, degrees in one (``tp.pp.dp``) and the legend :data:`NARROW_LEGEND`."""
    if not narrow:
        table = Table(title=f"top {len(top)} mappings", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False,
                      collapse_padding=True)  # 150 columns hold a row
        for header in ("#", *WIDE.values()):
            table.add_column(header, justify="right", overflow="fold")
        for row in top:
            dp = f"DP {_cell(row.get('dp'))}{_context(row)}" if _context(row) else _cell(row.get("dp"))
            mfu, bubble, speedup = (row.get(k) for k in ("model_flops_utilisation", "bubble_fraction", "speedup"))
            shown = {"zero_stage": _zero(row), "group_layout": _groups(row), "dp": dp, "placement": _placement(row),
                     "model_flops_utilisation": f"{mfu:.1%}" if isinstance(mfu, float) else "-",
                     "bubble_fraction": f"{bubble:.1%}" if isinstance(bubble, float) else "-",
                     "speedup": f"{speedup:.3g}x" if isinstance(speedup, float) else "-"}
            table.add_row(str(row["trial"]), *(shown.get(c, _cell(row.get(c))) for c in WIDE))
        table.caption = "groups: comm-group layout/order (tp: TP ranks vary fastest, dp: DP ranks do)"
        return table
    table = Table(title=f"top {len(top)} mappings", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0))
    for header in ("#", "tp.pp.dp", "mb", "schedule", "recomp", "z", "placement", "samples/s", "MFU", "x base"):
        table.add_column(header, justify="right", no_wrap=True, min_width=len(header))
    for row in top:
        mfu, speedup = row.get("model_flops_utilisation"), row.get("speedup")
        table.add_row(str(row["trial"]), f"{row.get('tp')}.{row.get('pp')}.{row.get('dp')}{_context(row)}",
                      _cell(row.get("microbatch_size")),
                      {"interleaved-1f1b": "i1f1b"}.get(row.get("schedule"), _cell(row.get("schedule"))),
                      {"selective": "sel"}.get(row.get("recompute"), _cell(row.get("recompute"))),
                      _zero(row), _placement(row), _cell(row.get("samples_per_s")),
                      f"{mfu:.1%}" if isinstance(mfu, float) else "-",
                      f"{speedup:.3g}x" if isinstance(speedup, float) else "-")
    return table


SERVING = {"users": "users", "tp": "tp", "pp": "pp", "dp": "dp", "microbatch_size": "mb",
           "placement": "placement", "group_layout": "groups", "tokens_per_s": "tokens/s",
           "tokens_per_s_per_user": "tokens/s/user", "ttft_s": "TTFT s", "peak_memory_GiB": "GiB/dev",
           "speedup": "speedup"}
"""A serving study's top-mappings columns: row key -> header (tokens/s: the decode step's, all users)."""


def _serving_table(top: list[dict]) -> Table:
    """A serving study's top mappings (:data:`SERVING`)."""
    table = Table(title=f"top {len(top)} mappings (decode at the study's context; TTFT: the batch's prefill)",
                  box=box.SIMPLE_HEAD)
    for header in ("#", *SERVING.values()):
        table.add_column(header, justify="right", overflow="fold")
    for row in top:
        table.add_row(str(row["trial"]), *(_cell(row.get(c)) for c in SERVING))
    return table


def _family_line(families: dict) -> str:
    """Data parallelism (with ZeRO / FSDP sharding) against 3D parallelism: each one's best trial
    and the ratio."""
    data, three_d = families["data parallel"], families["3D parallel"]
    ratio = data["samples_per_s"] / three_d["samples_per_s"]
    faster = f"data parallel {ratio:.3g}x faster" if ratio >= 1 else f"3D parallel {1 / ratio:.3g}x faster"
    return (f"data parallel (TP 1, PP 1; DDP, ZeRO or FSDP sharding) best {data['samples_per_s']:.4g}"
            f" samples/s (#{data['trial']}); 3D parallel (TP or PP > 1) best {three_d['samples_per_s']:.4g}"
            f" (#{three_d['trial']}): {faster} among this run's trials")


def _groups(row: dict) -> str:
    """The comm-group layout, ``/tp`` or ``/dp`` after it for the group order (``tp-major``,
    ``dp-major``) when the row has one."""
    order = row.get("group_order")
    return _cell(row.get("group_layout")) + (f"/{order.removesuffix('-major')}" if isinstance(order, str) and order
                                             else "")


def _context(row: dict) -> str:
    """`` x CP n`` after the data-parallel degree under context parallelism (``DP 8 x CP 16``)
    and `` (EP n)`` under expert parallelism (``DP 16 (EP 8)``), else nothing."""
    cp, ep = row.get("cp"), row.get("ep")
    return (f" x CP {int(cp)}" if isinstance(cp, (int, float)) and cp == cp and cp > 1 else "") \
        + (f" (EP {int(ep)})" if isinstance(ep, (int, float)) and ep == ep and ep > 1 else "")


def _zero(row: dict) -> str:
    """The ZeRO stage, ``3/F`` under hybrid sharding over groups of ``F`` ranks."""
    shards = row.get("shard_group_size")
    return _cell(row.get("zero_stage")) + (f"/{int(shards)}" if isinstance(shards, (int, float)) and shards == shards
                                           else "")


def _placement(row) -> str:
    """The placement's name, ``/within`` added where stages are kept within wafers."""
    return _cell(row.get("placement")) + ("/within" if row.get("wafer_stages") == "within" else "")


def _cell(value) -> str:
    if isinstance(value, float):
        return "-" if value != value else f"{value:.4g}"
    return "-" if value is None else str(value)


def print_validation(rows, stats: dict, console: Console | None = None) -> None:
    """One table per suite (published, predicted, error, what was chosen) and its error summary."""
    console = console or _wide_console()
    for suite, s in stats.items():
        table = Table(title=suite)
        for column in ("case", "unit", "published", "predicted", "error", "chosen", "note"):
            table.add_column(column)
        for r in (r for r in rows if r.suite == suite):
            error = (f"{r.error:+.1%}" if r.measured or r.predicted > 0 else "-") + (
                "" if r.measured else f" ({r.excluded_as})")
            table.add_row(r.case, r.unit, f"{r.published:.4g}", f"{r.predicted:.4g}", error, r.chosen, r.note)
        if s["mean_abs_error"] is not None:
            table.caption = f"mean absolute error {s['mean_abs_error']:.1%}, max {s['max_abs_error']:.1%}" + "".join(
                f"\n{group}: mean {g['mean_abs_error']:.1%}, max {g['max_abs_error']:.1%} ({g['rows']} rows)"
                for group, g in s.get("groups", {}).items())
        else:
            table.caption = "cross-check against a non-measurement: no error statistics"
        console.print(table)
