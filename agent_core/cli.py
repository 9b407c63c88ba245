"""The `kerntune` command line (click + rich)."""

from __future__ import annotations

import difflib
import json
import signal
import sys
import threading
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agent_core.model import KerntuneError, NoGpuError
from agent_core.search.strategies import STRATEGIES as STRATEGY_NAMES

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def _fail(e: Exception, code: int = 1):
    err.print(f"[bold red]error:[/] {escape(str(e))}", markup=True, soft_wrap=True)
    sys.exit(code)


class KerntuneGroup(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except NoGpuError as e:
            _fail(e, 3)
        except KerntuneError as e:
            _fail(e, 2)
        except RecursionError:  # a safety net: inputs too deep are refused where they are read
            _fail(KerntuneError("the input is nested too deeply to be processed"), 2)
        except MemoryError:
            _fail(KerntuneError("the input is too large to be processed in memory"), 2)


@click.group(cls=KerntuneGroup)
@click.version_option(package_name="kerntune")
def main():
    """kerntune: templatize, verify and tune CUDA kernels on a real GPU."""


# --------------------------------------------------------------------------------------------- show
@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
def show(file):
    """Kernels, launch sites, tunables and spec status (no GPU needed)."""
    from agent_core.source import spec as spec_mod
    from agent_core.source.cuda_parse import kernel_has_errors, parse_cuda
    from agent_core.templating.templatize import tunable_space
    from agent_core.search.tuner import read_source

    text = read_source(file)
    cf = parse_cuda(text, file)
    by_macro = "; ".join(f"{n} (line {at.line + 1}, macro {m})" for n, (m, at) in cf.macro_kernels.items())
    if not cf.kernels:
        raise KerntuneError("no __global__ kernels in this file" + (
            f" written out: those macros define ({by_macro}) are not read; write one out to tune it"
            if by_macro else ""), file)
    if by_macro:
        err.print(f"[yellow]note:[/] kernels defined by a macro's use are not read (write one out to tune it): "
                  f"{escape(by_macro)}")
    for e in cf.errors[:5]:
        err.print(f"[yellow]warning:[/] {file}:{e.span.line + 1}:{e.span.col + 1}: {escape(e.message)}")
    broken = []
    for k in cf.kernels:
        out.print(f"[bold]{k.name}[/]  {file}:{k.span.line + 1}")
        out.print(f"  signature: {escape(k.signature.strip())}", soft_wrap=True)
        for s in k.launch_sites:
            cfg = ", ".join(c.text for c in s.config)
            out.print(f"  launch: line {s.span.line + 1} in {s.host_function or '?'}: <<<{escape(cfg)}>>>", soft_wrap=True)
        for s in k.macro_launch_sites:
            cfg = ", ".join(c.text for c in s.config)
            out.print(f"  launch: line {s.span.line + 1} in {s.host_function or '?'}, through the macro {s.macro}: "
                      f"<<<{escape(cfg)}>>> (read only: apply does not rewrite a launch inside a macro)",
                      soft_wrap=True)
        if not k.launch_sites and not k.macro_launch_sites:
            out.print("  launch: none in this file")
        if kernel_has_errors(cf, k.name):
            out.print("  [red]syntax errors inside this kernel: not tunable until fixed[/]")
            broken.append(k.name)
            continue
        try:
            t = tunable_space(cf, k.name)  # the space only: the template's text is the whole file
            for p in t.params.values():
                out.print(f"  tunable {p.name} = {p.original}  domain {p.values}  ({escape(p.why)})", soft_wrap=True)
            if t.constraints:
                out.print(f"  constraints: {', '.join(t.constraints)}", soft_wrap=True)
        except KerntuneError as e:
            out.print(f"  not tunable: {escape(e.message)}", soft_wrap=True)
            t = None
        rewrite = _show_rewrites(cf, k.name)
        try:
            s = spec_mod.find_spec(cf, k.name)
            if s is None:
                out.print(f"  spec: missing (kerntune spec {file} -k {k.name} --write)")
            else:
                spec_mod.validate_spec(s, k, set(t.params) if t else set(),
                                       t.original_config() if t else None)
                out.print(f"  spec: ok ({s.origin}; {len(s.sizes)} size sets)")
                out.print(f"  candidates: {escape(candidates_line(cf, k.name, s, t is not None, rewrite))}",
                          soft_wrap=True)
        except KerntuneError as e:
            out.print(f"  spec: [red]invalid[/]: {escape(str(e))}", soft_wrap=True)
            broken.append(k.name)
    if broken:
        err.print(f"{file}: {len(broken)} kernel(s) need fixing: {', '.join(broken)}", markup=False)
        sys.exit(1)


def candidates_line(cf, kernel: str, spec, structural: bool, rewrite=None, shown: int = 3) -> str:
    """The templates `optimize` will try for the kernel, offline: its structural template, each expert whose
    family the kernel computes with the bindings the loop checks before round 1 (how many, the first few), and
    its semantic rewrite (``rewrite``: the kernel's composed rewrites, ``rewrites.compose``'s outcome, and its
    twins)."""
    from agent_core.templating import experts
    parts = ["structural template"] if structural else []
    lib = {e.name: e for e in experts.load_library()}
    for name, group in experts.family_groups(experts.candidates(cf, kernel, spec, list(lib.values()))).items():
        first = "; ".join(f"({i + 1}) {b.describe()}" for i, b in enumerate(group[:shown]))
        more = f"; … {len(group) - shown} more" if len(group) > shown else ""
        cname, lname = experts.cluster_twin_name(name), experts.long_twin_name(name)
        # a twin is named only where it has the conventions of a binding it would follow (the first one's)
        twin = f" (then its cluster twin {cname} for few rows)" if experts.cluster_twin(group[0], lib) else ""
        if experts.long_twin(group[0], lib):
            twin += f" (its long-row twin {lname} where the rows are longer than it holds)"
        n = len(group)
        parts.append(f"expert {name}, {n} binding{'s' if n != 1 else ''} to check: {first}{more}{twin}")
    if rewrite is not None and rewrite.template is not None:
        twins = "".join(f" (and its twin {t.origin})" for t in rewrite.twins)
        parts.append(f"{rewrite.template.origin} template{twins}")
    return " | ".join(parts) if parts else "none (no structural template, no expert family, no rewrite applies)"


def _show_rewrites(cf, kernel: str):
    """One line per semantic rewrite: applies (and what it does) or why not. Returns the composition (None where
    it failed)."""
    from agent_core.templating.rewrites import compose
    try:
        got = compose(cf, kernel)
    except KerntuneError as e:
        out.print(f"  rewrites: [red]failed[/]: {escape(e.message)}", soft_wrap=True)
        return None
    by_name = {r.name: r.summary for r in _rewrites() + _twins()}
    for name, why, what in [(n, w, "") for n, w in got.report] + [(n, w, " (a second template)")
                                                                   for n, w in got.twin_report]:
        if why is None:
            out.print(f"  rewrite {name}{what}: applies ({escape(by_name[name])})", soft_wrap=True)
        else:
            out.print(f"  rewrite {name}{what}: no: {escape(why)}", soft_wrap=True)
    return got


def _rewrites():
    from agent_core.templating.rewrites import REWRITES
    return REWRITES


def _twins():
    from agent_core.templating.rewrites.compose import TWINS
    return list(TWINS.values())


# --------------------------------------------------------------------------------------------- spec
@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-k", "--kernel", required=True, help="kernel name")
@click.option("--write", is_flag=True, help="insert the drafted spec above the kernel in FILE")
def spec(file, kernel, write):
    """Draft a tuning spec from the kernel's signature and launch site."""
    from agent_core.source import spec as spec_mod
    from agent_core.search.tuner import parse_checked, read_source
    from agent_core.templating.draft_spec import draft_spec, insert_spec

    text = read_source(file)
    cf, k = parse_checked(file, kernel, text)
    existing = spec_mod.find_spec(cf, kernel)
    if existing is not None and write:
        raise KerntuneError(f"kernel '{kernel}' already has a spec ({existing.origin}); edit it there", file,
                            k.span.line)
    if not write:
        out.print(draft_spec(cf, kernel), markup=False, highlight=False, soft_wrap=True)
        return
    from agent_core.source.files import write_files
    write_files([(file, insert_spec(text, cf, kernel))])
    err.print(f"wrote a draft spec above {kernel} in {file}: fill in the TODO sizes")


# --------------------------------------------------------------------------------------------- templatize
@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-k", "--kernel", required=True)
@click.option("--force", is_flag=True, help="overwrite existing template files")
@click.option("--rewrite", is_flag=True,
              help="the semantic rewrite of the kernel (vectors, warp reductions, ...) instead of the structural template")
def templatize(file, kernel, force, rewrite):
    """Write the kernel's template and parameter space to .kerntune/ for reading and editing."""
    from agent_core.templating.workfiles import write_template_files
    from agent_core.templating.templatize import templatize as do_templatize
    from agent_core.search.tuner import parse_checked, read_source
    from agent_core.workspace import workdir_for

    text = read_source(file)
    cf, _ = parse_checked(file, kernel, text)
    if rewrite:
        from agent_core.templating.rewrites import compose
        got = compose(cf, kernel)
        if got.template is None:
            why = "; ".join(f"{n}: {w}" for n, w in got.report)
            k = cf.kernel(kernel)
            raise KerntuneError(f"no semantic rewrite applies to kernel '{kernel}': {why}", file, k.name_span.line,
                                k.name_span.col)
        t = got.template
        for note in got.notes:
            out.print(f"rewrite {escape(note)}", soft_wrap=True)
    else:
        t = do_templatize(cf, kernel)
    wd = workdir_for(file)
    stem = Path(file).stem
    existing = wd / f"{stem}.{kernel}.space.toml"
    if existing.exists() and not force:
        raise KerntuneError(f"{existing} exists (it may hold your edits); use --force to overwrite")
    tpath, spath = write_template_files(t, wd)
    out.print(f"template: {tpath}\nspace:    {spath}")
    for p in t.space.params.values():
        out.print(f"  {p.name} = {p.original}  domain {p.values}  ({escape(p.why)})", soft_wrap=True)
    for c in t.space.constraints:
        out.print(f"  constraint: {c}")


# --------------------------------------------------------------------------------------------- tune
def _fmt_us(x):
    return "-" if x is None else f"{x:.1f}"


def kept_marks(s: dict, dispatch: dict | None = None) -> dict[int, str]:
    """Size set index -> what applying the result does there instead of the best configuration: "original kept"
    where the dispatch serves it with the original kernel (no configuration faster beyond the measured noise);
    without a dispatch, "slower: not applied" where the best configuration is slower than the original (apply
    then refuses one configuration for every size)."""
    from agent_core.agent.dispatch import Dispatch
    from agent_core.apply import single_slower
    d = dispatch if dispatch is not None else s.get("dispatch")
    if d:
        return {i: "original kept" for i in Dispatch.from_dict(d).original_kept}
    return {i: "slower: not applied" for i in single_slower(s)}


def print_summary(s: dict, dispatch: dict | None = None) -> None:
    how = ("replayed from a recorded store" if s.get("backend") == "replay" else
           "confirmed, interleaved" if s.get("confirmed") else "search figures")
    table = Table(title=f"{s['kernel']} on {s['device']}  ({how})")
    marks = kept_marks(s, dispatch)
    for col in ("size set", "original µs", "best µs", "speedup", "GB/s", "% copy bw") + (("applied",) if marks else ()):
        table.add_column(col, justify="right")
    best = s.get("best_us") or [None] * len(s["original_us"])
    for i, sizes in enumerate(s["sizes"]):
        o, b = s["original_us"][i], best[i]
        sp = f"{o / b:.2f}x" if b else "-"
        g = f"{s['gbps'][i]:.0f}" if s.get("gbps") else "-"
        pct = f"{s['pct_copy'][i]:.0f}%" if s.get("pct_copy") else "-"
        table.add_row(", ".join(f"{k}={v}" for k, v in sizes.items()), _fmt_us(o), _fmt_us(b), sp, g, pct,
                      *((marks.get(i, ""),) if marks else ()))
    out.print(table)
    c = s["counts"]
    sp = f"{s['speedup']:.2f}x" if s.get("speedup") else "none"
    out.print(f"speedup (geometric mean over size sets): [bold]{sp}[/]")
    if s.get("best_params"):
        out.print(f"best parameters: {s['best_params']}  (original {s['original_params']})")
    if s.get("copy_bw_gbps"):
        out.print(f"device copy bandwidth: {s['copy_bw_gbps']:.0f} GB/s")
    out.print(f"evaluations: {c['ok']} ok, {c['failed']} failed, {c['pruned']} pruned"
              f" ({c.get('reused', 0)} reused from the store)  in {s.get('wall_s', 0):.0f} s")
    for f in s.get("failures", [])[:3]:
        out.print(f"  failed {f['params']}: {f['status']}: {f['error'].splitlines()[0] if f['error'] else ''}",
                  soft_wrap=True, markup=False)
    if s.get("stop_reason"):
        out.print(f"search ended early: {s['stop_reason']}", soft_wrap=True, markup=False)
    if s.get("dispatch"):
        print_dispatch(s["dispatch"])


def print_timeline(report: dict | None) -> None:
    """Where the run's time went (agent_core.measure.timeline), on stderr beside the progress."""
    if report:
        from agent_core.measure.timeline import render
        err.print(render(report), soft_wrap=True, markup=False, highlight=False)


EARLY_STOP_HELP = ("end a search when its best has not improved by more than 1% for N evaluations (0: never)")


def print_dispatch(data: dict) -> None:
    """The per-shape dispatch of a result: which configuration serves which sizes, and each size set's figures."""
    from agent_core.agent.dispatch import Dispatch, condition_words
    d = Dispatch.from_dict(data)
    how = ("replayed from a recorded store" if d.backend == "replay" else
           "confirmed, interleaved" if d.confirmed else "search figures")
    table = Table(title=f"per-shape dispatch ({how})")
    for col in ("size set", "original µs", "tuned µs", "speedup", "one config.", "entry"):
        table.add_column(col, justify="right")
    for i, sz in enumerate(d.sizes):
        table.add_row(", ".join(f"{k}={v}" for k, v in sz.items()), _fmt_us(d.original_us[i]), _fmt_us(d.tuned_us[i]),
                      f"{d.original_us[i] / d.tuned_us[i]:.2f}x", f"{d.single_original_us[i] / d.single_us[i]:.2f}x",
                      f"#{d.serve[i] + 1}" + (" original kept" if d.entries[d.serve[i]].is_original else ""))
    out.print(table)
    if d.applies_nothing:
        out.print("no regression: [bold]the original kernel is kept on every size set[/] (nothing to apply); "
                  f"one configuration would give {d.single_speedup:.2f}x")
    else:
        out.print(f"per-shape dispatch: [bold]{d.speedup:.2f}x[/] against {d.single_speedup:.2f}x for one configuration"
                  + (f"; the original kernel kept on {len(d.original_kept)} size set(s)" if d.original_kept else ""))
    for i, e in enumerate(d.entries):
        what = "the original kernel, unchanged" if e.is_original else f"{e.origin} " + ", ".join(
            f"{k}={v}" for k, v in e.params.items())
        out.print(f"  #{i + 1}{' (default)' if i == 0 else ''}: {condition_words(d, i)} -> {what}", soft_wrap=True,
                  markup=False)
    for why in d.dropped:
        out.print(f"  kept on the winner after confirmation: {why}", soft_wrap=True, markup=False)
    for why in d.kept:
        out.print(f"  original kept: {why}", soft_wrap=True, markup=False)
    if d.instead:
        what = "one configuration" if len(d.entries) == 1 else "this dispatch"
        out.print(f"  {what} instead of the winner: {d.instead}", soft_wrap=True, markup=False)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-k", "--kernel", required=True)
@click.option("--budget", default=60, show_default=True, help="evaluations to measure (pruned ones do not count)")
@click.option("--time-budget", type=float, default=None, help="seconds")
@click.option("--early-stop", type=click.IntRange(min=0), default=None, metavar="N",
              help=EARLY_STOP_HELP + " [default: 25]")
@click.option("--strategy", type=click.Choice(list(STRATEGY_NAMES)), default="auto",
              show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--backend", default=None, help="auto | gpu | replay:PATH (default $KERNTUNE_BACKEND or auto)")
@click.option("--store", "store_path", default=None, help="results store (default .kerntune/results.sqlite)")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), default=None, help="write the summary here")
def tune(file, kernel, budget, time_budget, early_stop, strategy, seed, backend, store_path, json_out):
    """Tune a kernel on the GPU: every variant verified against the original, then timed."""
    from agent_core.store import Store
    from agent_core.search.tuner import TuneOptions, open_backend, prepare, require_template, tune as run_tune
    from agent_core.workspace import store_path_for

    prep = prepare(file, kernel)  # bad input fails before any device work
    require_template(prep)  # nothing structurally tunable: `optimize` searches the expert templates
    be = open_backend(backend)
    store = Store(store_path or store_path_for(file))
    cancel = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())
    try:
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[best]}"), TimeElapsedColumn(), console=err,
                      transient=False) as progress:
            task = progress.add_task(kernel, total=budget, best="")

            def on_event(ev):
                best = f"best {1 / ev.best.objective:.2f}x" if ev.best and ev.best.objective else ""
                progress.update(task, completed=ev.done, best=best)
                if ev.kind in ("status", "original"):
                    progress.console.print(f"[dim]{escape(ev.message)}[/]")

            topt = TuneOptions(budget=budget, time_budget_s=time_budget, strategy=strategy, seed=seed)
            if early_stop is not None:
                topt.early_stop_after = early_stop or None
            result = run_tune(file, kernel, be, store, topt, on_event=on_event, cancel=cancel, prepared=prep)
    finally:
        signal.signal(signal.SIGINT, previous)
        be.close()
    print_summary(result.summary)
    print_timeline(result.timeline)
    if json_out:
        Path(json_out).write_text(json.dumps(result.summary, indent=2))
    if result.status == "cancelled":
        err.print("cancelled: what was measured is in the store; run again to resume")
        sys.exit(130)
    if not result.best:
        err.print("no variant verified: see the failures above")
        sys.exit(1)


# --------------------------------------------------------------------------------------------- optimize
def _llm_hooks_for(store, be, base_url, model, max_calls, max_tokens, max_seconds, budget, rounds):
    """The LLM roles for `optimize`, or None when no endpoint is configured (the offline loop, as before).
    The API key comes only from the environment ($KERNTUNE_LLM_API_KEY or $OPENAI_API_KEY)."""
    from agent_core.agent.llm.config import settings_from_env
    from agent_core.agent.llm.hooks import llm_hooks
    from agent_core.agent.llm.limits import Limits

    settings = settings_from_env(base_url=base_url, model=model)
    if settings is None:
        if any(v is not None for v in (max_calls, max_tokens, max_seconds)):
            err.print("note: no LLM endpoint configured (--llm-base-url / --llm-model or $KERNTUNE_LLM_BASE_URL / "
                      "$KERNTUNE_LLM_MODEL): the --llm-max-* limits are ignored", markup=False, soft_wrap=True)
        return None
    limits = Limits.from_env(max_calls=max_calls, max_tokens=max_tokens, max_wall_s=max_seconds)
    try:  # proposals are compiled for the device that measures them
        arch = be.device().arch
    except KerntuneError:
        arch = None
    hooks = llm_hooks(store, settings, limits, arch=arch, budget_per_round=budget, max_rounds=rounds)
    lim = ", ".join(f"{n} {v:g}" for n, v in (("calls", limits.max_calls), ("tokens", limits.max_tokens),
                                             ("seconds", limits.max_wall_s)) if v is not None)
    err.print(f"LLM: {settings.model} at {settings.base_url} ({'API key set' if settings.api_key else 'no API key'}"
              f"; limits: {lim or 'none'})", markup=False, soft_wrap=True)
    return hooks


class _PlanMarks:
    """Wraps the LLM planner to note how many model calls had been made when each plan was chosen, so that
    each round can show the calls that led to it."""

    def __init__(self, planner, log):
        self.planner, self.log, self.marks = planner, log, []
        self.name = planner.name

    def plan(self, rounds, candidates):
        try:
            return self.planner.plan(rounds, candidates)
        finally:
            self.marks.append(len(self.log.entries))

    def groups(self) -> list[list[dict]]:
        """The model calls made for each plan (the templater's come before the plan they fed)."""
        starts = [0, *self.marks]
        return [self.log.entries[a:b] for a, b in zip(starts, starts[1:])]


def _call_fate(e: dict, rounds) -> str:
    """What happened to one model call's answer."""
    from agent_core.agent.llm.roles import FEEDBACK_KINDS

    outcome, attempt = e.get("outcome"), e.get("attempt", 1)
    if outcome == "rejected":
        return "fed back to the model" if attempt == 1 else "dropped"
    if outcome == "error":
        if e.get("fatal"):
            return "the model is not asked again: the session goes on offline"
        if attempt == 1 and e.get("error_kind") in FEEDBACK_KINDS:
            return "fed back to the model"
        return "no answer: the rules decide"
    if rounds is not None and e.get("role") == "templater" and e.get("template_hash"):
        for r in rounds:
            if r.template.template_hash == e["template_hash"]:
                sp = r.summary.get("speedup")
                return f"searched in round {r.index + 1}: " + (f"{sp:.2f}x" if sp else "no variant verified")
        return "a candidate; not searched"
    return ""


def _print_calls(entries: list[dict], rounds, indent: str = "  ") -> None:
    for e in entries:
        tok = e.get("tokens") or {}
        n = (tok.get("prompt_tokens") or 0) + (tok.get("completion_tokens") or 0)
        head = f"{indent}model {e.get('role')} (attempt {e.get('attempt', 1)}): {e.get('outcome')}"
        text = e.get("text", "").split(": ", 1)[-1].splitlines()[0] if e.get("text") else ""
        fate = _call_fate(e, rounds)
        out.print(head + (f", {n} tokens" if n else "") + f": {text}" + (f" -> {fate}" if fate else ""),
                  soft_wrap=True, markup=False)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-k", "--kernel", default=None, help="kernel name (or --all)")
@click.option("--all", "all_kernels", is_flag=True, help="every kernel of FILE that has a tuning spec, one session each")
@click.option("--gpus", default=None, metavar="all|N",
              help="run the sessions on a local Dask cluster, one worker per GPU (default: in this process)")
@click.option("--scheduler", default=None, metavar="tcp://HOST:PORT",
              help="run the sessions on the GPU workers of an existing Dask scheduler")
@click.option("--budget", default=40, show_default=True, help="evaluations per round")
@click.option("--rounds", default=4, show_default=True, help="most rounds (templates tried)")
@click.option("--total-budget", type=int, default=None, help="evaluations over all rounds")
@click.option("--time-budget", type=float, default=None,
              help="seconds for the whole run: a round ends at it and no round starts after it (the round's "
                   "confirmation still runs)")
@click.option("--early-stop", type=click.IntRange(min=0), default=None, metavar="N",
              help=EARLY_STOP_HELP + ", per round [default: 25]")
@click.option("--strategy", type=click.Choice(list(STRATEGY_NAMES)), default="auto")
@click.option("--seed", default=0, show_default=True)
@click.option("--no-experts", is_flag=True,
              help="only templates of your own kernel (structural, and its semantic rewrite)")
@click.option("--no-dispatch", is_flag=True, help="one configuration for every size set (no per-shape dispatch)")
@click.option("--backend", default=None, help="auto | gpu | replay:PATH")
@click.option("--store", "store_path", default=None)
@click.option("--json", "json_out", type=click.Path(dir_okay=False), default=None)
@click.option("--llm-base-url", default=None, metavar="URL",
              help="OpenAI-compatible endpoint for the LLM templater, analyst and planner (default "
                   "$KERNTUNE_LLM_BASE_URL; none: the offline agent). The API key is read only from "
                   "$KERNTUNE_LLM_API_KEY or $OPENAI_API_KEY")
@click.option("--llm-model", default=None, metavar="NAME", help="model name (default $KERNTUNE_LLM_MODEL)")
@click.option("--llm-max-calls", type=click.IntRange(min=0), default=None,
              help="most requests to the model (default $KERNTUNE_LLM_MAX_CALLS; no limit)")
@click.option("--llm-max-tokens", type=click.IntRange(min=0), default=None,
              help="most prompt + answer tokens (default $KERNTUNE_LLM_MAX_TOKENS; no limit)")
@click.option("--llm-max-seconds", type=click.FloatRange(min=0), default=None,
              help="most seconds waiting on the model (default $KERNTUNE_LLM_MAX_WALL_S; no limit)")
@click.option("--llm-test-sizes", is_flag=True,
              help="ask the model's test designer for size sets and input distributions that stress each "
                   "template it proposes; the template is verified and timed on them too")
def optimize(file, kernel, all_kernels, gpus, scheduler, budget, rounds, total_budget, time_budget, early_stop, strategy, seed,
             no_experts, no_dispatch, backend, store_path, json_out, llm_base_url, llm_model, llm_max_calls,
             llm_max_tokens, llm_max_seconds, llm_test_sizes):
    """The agent loop: tune, analyse, plan the next template or stop; prints how the result was reached.
    With an LLM endpoint, the model also proposes templates, diagnoses rounds and plans; every proposal is
    compiled, verified and timed like any other template. With --all, every kernel of FILE that has a spec,
    each one session of a runner (in process, or spread over GPUs with --gpus / --scheduler)."""
    from agent_core.agent.loop import AgentOptions, expert_templater, optimize as run_optimize, rewrite_templater
    from agent_core.store import Store
    from agent_core.search.tuner import open_backend, prepare
    from agent_core.workspace import store_path_for

    if all_kernels == (kernel is not None):
        raise click.UsageError("give one kernel (-k KERNEL) or --all")
    if all_kernels or gpus is not None or scheduler is not None:
        if llm_base_url or llm_model or llm_test_sizes:
            raise click.UsageError("the LLM options tune one kernel in this process: use -k without --gpus/--scheduler")
        aopt = AgentOptions(budget_per_round=budget, max_rounds=rounds, total_budget=total_budget,
                            time_budget_s=time_budget, strategy=strategy, seed=seed, use_experts=not no_experts,
                            dispatch=not no_dispatch)
        if early_stop is not None:
            aopt.early_stop_after = early_stop or None
        _optimize_units(file, [kernel] if kernel else None, aopt, backend, store_path, gpus, scheduler, json_out)
        return

    prepare(file, kernel)
    be = open_backend(backend)
    store = Store(store_path or store_path_for(file))
    try:
        hooks = _llm_hooks_for(store, be, llm_base_url, llm_model, llm_max_calls, llm_max_tokens, llm_max_seconds,
                               budget, rounds)
    except BaseException:
        be.close()
        raise
    planner = templaters = marks = designer = None
    if llm_test_sizes and hooks is None:
        err.print("note: --llm-test-sizes needs an LLM endpoint; the loop runs offline", markup=False)
    if hooks is not None and llm_test_sizes:
        designer = hooks.test_designer.design
    if hooks is not None:
        marks = _PlanMarks(hooks.planner, hooks.roles.log)
        planner = marks
        # the model's proposals come before the rewrite: the model plans over them first, the rules fall back on it
        templaters = ([] if no_experts else [expert_templater]) + hooks.templaters + [rewrite_templater]
    cancel = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())

    def on_event(ev):
        if ev.kind in ("status", "original"):
            err.print(f"[dim]{escape(ev.message)}[/]", soft_wrap=True)

    aopt = AgentOptions(budget_per_round=budget, max_rounds=rounds, total_budget=total_budget,
                        time_budget_s=time_budget, strategy=strategy, seed=seed, use_experts=not no_experts,
                        dispatch=not no_dispatch)
    if early_stop is not None:
        aopt.early_stop_after = early_stop or None
    try:
        res = run_optimize(file, kernel, be, store, aopt, planner=planner, templaters=templaters,
                           on_event=on_event, cancel=cancel, test_designer=designer)
    finally:
        signal.signal(signal.SIGINT, previous)
        be.close()
    groups = marks.groups() if marks is not None else []
    if res.screening is not None:  # which binding of each expert the loop kept (verified, or unchecked on a replay)
        for v in res.screening.chosen():
            out.print(v.words(res.screening.sizes_text), soft_wrap=True, markup=False)
    for r in res.rounds:
        sp = r.summary.get("speedup")
        out.print(f"[bold]round {r.index + 1}[/] {r.template.origin}: {escape(r.step.reason)}", soft_wrap=True)
        if r.index < len(groups):
            _print_calls(groups[r.index], res.rounds)
        out.print(f"  -> {sp:.2f}x" if sp else "  -> no variant verified")
        missed = (r.summary.get("counts") or {}).get("not_recorded")
        if missed and hooks is not None:  # the model's templates are new to a replayed recording
            out.print(f"     not recorded: {missed} configurations of this template are not in the replayed store")
        for line in r.analysis.text.splitlines():
            out.print(f"     {line}", soft_wrap=True, markup=False)
    for g in groups[len(res.rounds):]:
        _print_calls(g, res.rounds)
    if res.final_step:
        out.print(f"stop: {escape(res.final_step.reason)}", soft_wrap=True)
    print_timeline(res.timeline)
    report = None
    if hooks is not None:
        report = hooks.report()
        report["sessions"] = [r.summary.get("session_id") for r in res.rounds]
        offline = hooks.roles.offline
        out.print(hooks.spend.line() + ("; offline from then on: " + offline if offline else "; the model stayed online"),
                  soft_wrap=True, markup=False)
        if res.rounds and res.rounds[-1].summary.get("session_id") is not None:
            store.put_step(res.rounds[-1].summary["session_id"], "llm_summary", hooks.spend.line(), report)
    best = res.best
    if best:
        print_summary(best.summary, res.dispatch.to_dict() if res.dispatch is not None else {})
        if res.dispatch is not None:
            print_dispatch(res.dispatch.to_dict())
        if json_out:
            doc = {"best": best.summary, "dispatch": res.dispatch.to_dict() if res.dispatch else None,
                   "timeline": res.timeline, "rounds": [
                {"origin": r.template.origin, "step": r.step.reason, "analysis": r.analysis.text,
                 "summary": r.summary} for r in res.rounds]}
            if res.screening is not None:
                doc["screening"] = [v.to_dict(res.screening.size_set) for v in res.screening.verdicts]
            if hooks is not None:
                doc["llm"] = report
                doc["llm_calls"] = hooks.roles.log.entries
            Path(json_out).write_text(json.dumps(doc, indent=2, default=str))
    else:
        err.print("no variant verified in any round")
        sys.exit(1)


def _kernels_with_spec(file: str) -> tuple[list[str], list[str]]:
    """(kernels of FILE with a tuning spec, those without)."""
    from agent_core.source import spec as spec_mod
    from agent_core.source.cuda_parse import parse_cuda
    from agent_core.search.tuner import read_source

    path = str(Path(file).resolve())
    cf = parse_cuda(read_source(path), path)
    have, lack = [], []
    for k in cf.kernels:
        (have if spec_mod.find_spec(cf, k.name) is not None else lack).append(k.name)
    return have, lack


def _optimize_units(file, kernels, aopt, backend, store_path, gpus, scheduler, json_out) -> None:
    """`optimize --all` (or one kernel on a Dask runner): each kernel one session of the runner; each result
    printed, with the device it was tuned on, as it arrives (its rows already in the store)."""
    from agent_core.runners import SessionUnit, make_runner
    from agent_core.store import Store
    from agent_core.workspace import store_path_for

    if kernels is None:
        kernels, lack = _kernels_with_spec(file)
        if lack:
            err.print(f"not tuned (no tuning spec): {', '.join(lack)}", soft_wrap=True, markup=False)
        if not kernels:
            raise KerntuneError(f"no kernel in {file} has a tuning spec: draft one with `kerntune spec {file} -k KERNEL"
                                " --write`", file)
    units = [SessionUnit.of(file, k, aopt) for k in kernels]
    store = Store(store_path or store_path_for(file))
    try:
        runner = make_runner(store, backend, gpus, scheduler)
    except BaseException:
        store.close()
        raise
    d = runner.describe()
    err.print(f"{len(units)} kernel(s) of {file}: " + ", ".join(kernels) + (
        f"; Dask runner, {d['workers']} GPU worker(s)" if d["kind"] == "dask" else ""), soft_wrap=True, markup=False)
    cancel = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set()) \
        if threading.current_thread() is threading.main_thread() else None

    def on_event(u, ev):
        if ev.kind in ("status", "original"):
            err.print(f"[dim]{escape(u.key)}: {escape(ev.message)}[/]", soft_wrap=True)

    doc, failed = {"kernels": []}, 0
    try:
        for o in runner.run(units, on_event, cancel):
            best = o.result.best if o.result is not None else None
            where = ""
            if o.attempts and o.attempts[-1].worker != "local":
                a = o.attempts[-1]
                where = f" (worker {a.worker}" + (f", redone after {len(o.attempts) - 1} lost" if len(o.attempts) > 1
                                                  else "") + ")"
            if o.error_kind == "no_gpu":
                raise NoGpuError(o.error)
            if o.error or best is None:
                failed += 1
                out.print(f"[bold]{escape(o.kernel)}[/]{escape(where)}: " + escape(o.error or "no variant verified in "
                                                                                   "any round"), soft_wrap=True)
            else:
                out.print(f"[bold]{escape(o.kernel)}[/] tuned on {escape(str(o.device))}{escape(where)}: "
                          f"{best.summary['speedup']:.2f}x ({escape(best.template.origin)}, "
                          f"{len(o.result.rounds)} rounds)", soft_wrap=True)
                print_summary(best.summary)
                if o.result.dispatch is not None:
                    print_dispatch(o.result.dispatch.to_dict())
            doc["kernels"].append({
                "kernel": o.kernel, "error": o.error, "device": o.device, "wall_s": o.wall_s,
                "attempts": [{"worker": a.worker, "pid": a.pid, "gpu": a.gpu} for a in o.attempts],
                "best": best.summary if best else None,
                "dispatch": o.result.dispatch.to_dict() if o.result is not None and o.result.dispatch else None})
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        runner.close()
        store.close()
    if json_out:
        Path(json_out).write_text(json.dumps(doc, indent=2, default=str))
    ok = len(units) - failed
    out.print(f"{ok} of {len(units)} kernel(s) tuned" + ("" if not failed else f"; {failed} without a result"))
    if failed or cancel.is_set():
        sys.exit(130 if cancel.is_set() else 1)


def _run_end_session(store, summary: dict):
    """The session that ended the optimize run the best result belongs to (its llm_summary step lists the
    run's sessions, see tuner.result_summary); the best session itself when no such step exists."""
    return (summary.get("llm_run") or {}).get("session_id") or summary.get("session_id")


def _print_recorded_calls(store, session_id) -> None:
    """The model calls an `optimize` with an LLM recorded: those of every round of the run when this session
    ended one (its llm_summary step lists the rounds' sessions), else those attached to this session."""
    if session_id is None:
        return
    steps = store.steps(session_id)
    summary = next((s for s in reversed(steps) if s["kind"] == "llm_summary"), None)
    sids = [x for x in ((summary or {}).get("data") or {}).get("sessions", []) if x is not None] or [session_id]
    calls = [s for sid in sids for s in (steps if sid == session_id else store.steps(sid)) if s["kind"] == "llm"]
    if not calls and summary is None:
        return
    out.print(f"model calls ({len(calls)}):", markup=False)
    _print_calls([{"text": s["text"], **(s["data"] or {})} for s in sorted(calls, key=lambda s: s["id"])], None)
    if summary is not None:
        d = summary["data"] or {}
        out.print(f"{summary['text']}" + (f"; offline from then on: {d['offline']}" if d.get("offline") else ""),
                  soft_wrap=True, markup=False)


# --------------------------------------------------------------------------------------------- results
@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-k", "--kernel", required=True)
@click.option("--store", "store_path", default=None)
@click.option("--device", default=None, help="the result tuned on this device model (default: the latest's)")
def results(file, kernel, store_path, device):
    """Show the latest stored result for a kernel (no GPU needed)."""
    from agent_core.store import Store
    from agent_core.search.tuner import read_source, result_summary
    from agent_core.workspace import store_path_for

    p = Path(store_path or store_path_for(file))
    if not p.exists():
        raise KerntuneError(f"no results yet for {file} (no store at {p})")
    store = Store(p, readonly=True)  # results only reads: a read-only store (or one from elsewhere) is fine
    s = result_summary(store, file, kernel, read_source(file), device=device)
    if not s:
        raise KerntuneError(f"no finished tuning session for kernel '{kernel}'" + (f" on {device}" if device else "")
                            + f" in {p}")
    try:
        print_summary(s)
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # a store from elsewhere: say so plainly
        raise KerntuneError(f"{p}: the summary of session {s.get('session_id')} is malformed "
                            f"({type(e).__name__}: {str(e)[:80]})") from None
    _other_devices(s)
    _print_recorded_calls(store, _run_end_session(store, s))
    if s.get("stale"):
        out.print("[yellow]stale: the file has changed since this result was measured[/]")


# --------------------------------------------------------------------------------------------- apply
@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-k", "--kernel", required=True)
@click.option("--store", "store_path", default=None)
@click.option("--dry-run", is_flag=True, help="print the diff, write nothing")
@click.option("--backend", default=None, help="verify the rewritten kernel on: auto | gpu | none")
@click.option("--single", is_flag=True, help="one configuration (the best overall) even where the result has a "
                                             "per-shape dispatch")
@click.option("--device", default=None, help="apply what was tuned on this device model (default: the latest "
                                             "result's device)")
def apply(file, kernel, store_path, dry_run, backend, single, device):
    """Rewrite the kernel and its launch site to the best configuration found (or to its per-shape dispatch:
    one kernel per configuration, an if/else over the sizes at each launch)."""

    from agent_core.apply import check_compiles, rewrite_result
    from agent_core.measure.compiler import compile_kernel
    from agent_core.source.cuda_parse import parse_cuda
    from agent_core.store import Store
    from agent_core.search.tuner import read_source, record_applied, result_summary
    from agent_core.workspace import cache_dir, store_path_for

    text = read_source(file)
    store = Store(store_path or store_path_for(file))
    s = result_summary(store, file, kernel, text, device=device)
    if not s or not s.get("best_params"):
        on = f" on {device}" if device else ""
        raise KerntuneError(f"no tuned result for kernel '{kernel}'{on}: run `kerntune tune {file} -k {kernel}` first")
    if s.get("applied"):
        out.print(f"{file} already holds the tuned result of '{kernel}' (written by apply): nothing to change")
        return
    if s["stale"]:
        raise KerntuneError(f"{file} changed since kernel '{kernel}' was tuned; tune again before applying")
    rw, template = rewrite_result(file, kernel, text, s, store, single=single, fallback=True)
    new = rw.text
    for w in rw.warnings:
        err.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    side_old = Path(rw.sidecar[0]).read_text(encoding="utf-8") if rw.sidecar and Path(rw.sidecar[0]).exists() else ""
    if new == text and (rw.sidecar is None or rw.sidecar[1] == side_old):
        if rw.kept:
            out.print("nothing applied: the original kernel is kept on every size set, no verified configuration "
                      "is faster there beyond the measured noise", soft_wrap=True)
            for why in rw.kept:
                out.print(f"  {why}", soft_wrap=True, markup=False)
        else:
            out.print("the best configuration is the original one: nothing to change")
        return
    diff = "".join(difflib.unified_diff(text.splitlines(True), new.splitlines(True), file, file + " (tuned)"))
    if rw.sidecar:
        diff += "".join(difflib.unified_diff(side_old.splitlines(True), rw.sidecar[1].splitlines(True),
                                             rw.sidecar[0], rw.sidecar[0] + " (tuned)"))
    if dry_run:
        out.print(diff, markup=False, highlight=False)
        out.print(f"tuned on {s.get('device')}", soft_wrap=True, markup=False)
        _other_devices(s)
        return
    # the rewritten file must compile (all of it, host code included, when the kernel was rewritten in place),
    # and (with a GPU) verify against the original and be timed
    arch = s.get("arch") or (s.get("best_resources") or {}).get("arch") or "sm_90"
    from agent_core.source import spec as spec_mod
    new_cf = parse_cuda(new, file)
    for name, new_spec in rw.kernels or [(kernel, rw.spec)]:
        # a kernel template: the instantiation its spec tunes (the explicit specialization apply wrote for it)
        targs = spec_mod.instantiation(new_spec, new_cf.kernel(name)) if new_spec is not None else None
        compile_kernel(new, name, arch=arch, include_dirs=[str(Path(file).resolve().parent)], cache_dir=cache_dir(),
                       template_args=targs)
    if rw.in_place:
        check_compiles(new, file, arch, host=True)
    verified = _verify_applied(file, kernel, text, new, backend, rw)
    from agent_core.source.files import write_files
    write_files([(Path(file), new)] + ([(Path(rw.sidecar[0]), rw.sidecar[1])] if rw.sidecar else []))
    if not store.readonly:  # the editor shows the file as applied, not stale (a read-only store cannot say so)
        record_applied(store, s, file, kernel, new)
    out.print(diff, markup=False, highlight=False)
    how = f" in place ({template.origin} template)" if rw.in_place else ""
    if rw.dispatch is not None:
        d = rw.dispatch
        what = (f"a per-shape dispatch of {len(d.entries)} configurations ({', '.join(n for n, _ in rw.kernels)})")
        speed = (f"{d.speedup:.2f}x {'confirmed' if d.confirmed else 'in the search'}, against "
                 f"{d.single_speedup:.2f}x for one configuration"
                 + (f"; the original kernel kept on {len(d.original_kept)} size set(s)" if d.original_kept else ""))
    else:
        what = str(s["best_params"])
        speed = f"{s['speedup']:.2f}x measured" if s.get("speedup") else "no speedup measured"
    out.print(f"applied {what} to {file}{how} ({speed}, tuned on {s.get('device')}); {verified}", soft_wrap=True)
    _other_devices(s)


def _other_devices(s: dict) -> None:
    """A result is one device model's: say which others have one for this text of the file."""
    others = [d for d in s.get("devices") or [] if d != s.get("device")]
    if others:
        out.print(f"also tuned on: {', '.join(others)} (choose with --device NAME)", soft_wrap=True, markup=False)


def _verify_applied(file: str, kernel: str, old: str, new: str, backend: str | None, rw=None) -> str:
    """Verify the rewritten kernel(s) against the original on the GPU (each launched as its spec after the
    rewrite, ``rw.kernels``; default: the kernel's spec in ``new``); a plain note when there is no GPU. For a
    per-shape dispatch, every configuration is verified on every size set and each size set is timed with the
    configuration the dispatch gives it."""
    if backend == "none":
        return "not verified on a GPU (--backend none)"
    from agent_core.measure.gpu_backend import gpu_available
    ok, why = gpu_available()
    if not ok:
        if backend == "gpu":
            raise NoGpuError(f"no CUDA device available: {why}")
        return f"verified during tuning; not re-verified here ({why})"
    from agent_core.measure.gpu_backend import GpuBackend
    from agent_core.search.tuner import verify_kernels
    kernels = list(rw.kernels) if rw is not None and rw.kernels else [(kernel, rw.spec if rw is not None else None)]
    be = GpuBackend()
    try:
        results = verify_kernels(file, kernel, old, new, be, kernels)
    finally:
        be.close()
    for (name, _), (ev, _) in zip(kernels, results):
        if not ev.ok:
            raise KerntuneError(f"the rewritten kernel {name} did not pass verification ({ev.status.value}): "
                                f"{ev.error}; the file was not changed", file)
    if all(c is not None for _, c in results):
        d = rw.dispatch if rw is not None else None
        serve = d.serve if d is not None else [0] * len(results[0][1][0])
        o = [results[e][1][0][i].median_us for i, e in enumerate(serve)]
        b = [results[e][1][1][i].median_us for i, e in enumerate(serve)]
        figures = ", ".join(f"{x:.1f} -> {y:.1f} us" for x, y in zip(o, b))
        return f"verified on the GPU against the original; timed interleaved: {figures}"
    return "verified on the GPU against the original"


# --------------------------------------------------------------------------------------------- lsp
@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                "help_option_names": []})
@click.pass_context
def lsp(ctx):
    """Run the language server over stdio (for editors). Accepts the transport flags LSP clients append:
    --stdio, --clientProcessId=PID; refuses --socket/--pipe/--node-ipc with a message (stdio only)."""
    from server.main import run_stdio

    run_stdio(list(ctx.args))


# --------------------------------------------------------------------------------------------- bench
def _register_bench() -> None:
    from agent_core.bench import bench_command

    main.add_command(bench_command)


_register_bench()

if __name__ == "__main__":
    main()
