"""The tuning job, off the event loop: prepare, open the backend, run the optimize loop (``agent.optimize``:
rounds of ``tuner.tune`` over the structural template, the expert templates that match, and LLM proposals
when an endpoint is configured) in a thread (the GPU backend runs the kernels in worker processes), report
`$/progress` with the best so far, and cancel from the progress notification or the Cancel command."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from lsprotocol import types as lsp

from agent_core.model import KerntuneError, NoGpuError, Status, params_words
from agent_core.store import Store
from agent_core.search.tuner import TuneEvent, TuneOptions, open_backend, prepare
from agent_core.workspace import store_path_for

from .results import Live, Results
from .warm_backend import WarmBackends

log = logging.getLogger(__name__)
UPDATE_EVERY_S = 0.2  # at most this often: diagnostics / lens / hint refreshes while tuning
SCAN_LIMIT = 100_000  # spaces up to this size are scanned for the number of valid configurations


class PacedReplay:
    """A replay backend that takes ``delay_s`` per evaluation, the way a GPU does ($KERNTUNE_REPLAY_DELAY_S:
    demos and tests of progress, live hints and cancel; a replay otherwise finishes in a blink)."""

    def __init__(self, backend, delay_s: float):
        self._backend, self._delay = backend, delay_s

    def evaluate(self, variant):
        time.sleep(self._delay)
        return self._backend.evaluate(variant)

    def __getattr__(self, name):
        return getattr(self._backend, name)


def _env_seconds(name: str) -> float:
    try:
        return max(0.0, float(os.environ.get(name) or 0))
    except ValueError:
        log.warning("ignoring %s=%r (not a number of seconds)", name, os.environ.get(name))
        return 0.0


def expected_evaluations(prep, options: TuneOptions) -> int:
    """How many evaluations the session will measure at most: the budget, or fewer valid configurations."""
    from agent_core.templating.space import valid_configs
    if prep.template is None:  # nothing structurally tunable: the rounds search expert templates
        return options.budget
    space = prep.template.space
    try:
        if space.size() <= SCAN_LIMIT:
            return max(1, min(options.budget, len(valid_configs(space, prep.spec.sizes, limit=options.budget))))
    except Exception:
        log.debug("counting the valid configurations failed", exc_info=True)
    return options.budget


DEFAULT_ROUNDS = 3


def rounds_from(settings: dict | None, override: dict | None) -> tuple[int, bool]:
    """(most rounds, use the expert templates) from ``kerntune.tuning.rounds`` / ``.experts`` or the override."""
    t = dict((settings or {}).get("tuning") or {})
    t.update(override or {})
    rounds = int(t["rounds"]) if t.get("rounds") else DEFAULT_ROUNDS
    return max(1, rounds), bool(t.get("experts", True))


def llm_from(settings: dict | None):
    """LLM settings from ``kerntune.llm.endpoint`` / ``.model`` (else $KERNTUNE_LLM_BASE_URL / _MODEL); the key
    only from the environment ($KERNTUNE_LLM_API_KEY, which the extension sets from SecretStorage). None: offline."""
    from agent_core.agent.llm.config import settings_from_env
    llm = dict((settings or {}).get("llm") or {})
    return settings_from_env(base_url=llm.get("endpoint") or None, model=llm.get("model") or None)


# Optimize kernel in the editor: seconds for the whole run (every round) unless kerntune.tuning.timeBudgetSeconds
# says otherwise (0: no limit). A user waits for it; the search mostly lands within 5% of its best well before.
DEFAULT_TIME_BUDGET_S = 120.0


def options_from(settings: dict | None, override: dict | None) -> TuneOptions:
    t = dict((settings or {}).get("tuning") or {})
    t.update(override or {})
    opt = TuneOptions()
    if t.get("budget"):
        opt.budget = int(t["budget"])
    tb = t.get("timeBudgetSeconds")
    opt.time_budget_s = DEFAULT_TIME_BUDGET_S if tb is None else (float(tb) if float(tb) > 0 else None)
    if t.get("strategy"):
        opt.strategy = str(t["strategy"])
    if t.get("seed") is not None:
        opt.seed = int(t["seed"])
    return opt


class TuningJobs:
    def __init__(self, ls, results: Results, on_update: Callable[[str, bool], None]):
        self.ls = ls
        self.results = results
        self.on_update = on_update  # (uri, final) -> republish diagnostics, refresh lenses and hints
        self.executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kerntune-tune")
        self.tasks: set[asyncio.Task] = set()
        self.backends = WarmBackends()  # the GPU worker kept warm between runs ($KERNTUNE_WARM_S)

    def message(self, text: str, kind=lsp.MessageType.Info) -> None:
        self.ls.window_show_message(lsp.ShowMessageParams(type=kind, message=text))

    async def start(self, uri: str, path: str, text: str, kernel: str, settings: dict | None,
                    override: dict | None = None) -> dict:
        key = (path, kernel)
        live = self.results.live.get(key)
        if live is not None and not live.finished:
            return {"status": "running", "token": live.token}
        loop = asyncio.get_running_loop()
        options = options_from(settings, override)
        rounds, experts = rounds_from(settings, override)
        try:
            llm = llm_from(settings)
        except KerntuneError as e:
            self.message(f"kerntune: the LLM settings are incomplete ({e}); optimizing offline",
                         lsp.MessageType.Warning)
            llm = None
        try:
            prep = await loop.run_in_executor(self.executor, prepare, path, kernel, text)
        except KerntuneError as e:
            self.message(f"kerntune: cannot tune '{kernel}': {e}", lsp.MessageType.Error)
            return {"status": "error", "message": str(e), "line": e.line, "field": e.field_name}
        try:
            backend = await loop.run_in_executor(self.executor, self.backends.acquire,
                                                 lambda: open_backend(None, None, None))
            delay = _env_seconds("KERNTUNE_REPLAY_DELAY_S")
            if delay > 0 and backend.name == "replay":
                backend = PacedReplay(backend, delay)
        except NoGpuError as e:
            self.message(f"kerntune: {e.message}", lsp.MessageType.Warning)
            return {"status": "no-gpu", "message": e.message}
        except KerntuneError as e:
            self.message(f"kerntune: {e}", lsp.MessageType.Error)
            return {"status": "error", "message": str(e)}
        total = await loop.run_in_executor(self.executor, expected_evaluations, prep, options)
        token = f"kerntune-tune-{uuid.uuid4().hex[:12]}"
        live = Live(uri=uri, path=path, kernel=kernel, token=token, total=total)
        live.round_total, live.budget = total, options.budget
        live.estimate = total * rounds  # later rounds: about as many as the first (their spaces are unknown yet)
        self.results.live[key] = live
        progress = bool(getattr(getattr(self.ls.client_capabilities, "window", None), "work_done_progress", False))
        if progress:
            try:
                await self.ls.work_done_progress.create_async(token)
                fut = self.ls.work_done_progress.tokens.get(token)
                if fut is not None:
                    fut.add_done_callback(lambda f: live.cancel.set() if f.cancelled() else None)
            except Exception:
                log.exception("window/workDoneProgress/create failed; tuning without progress")
                progress = False
        if progress:
            self.ls.work_done_progress.begin(token, lsp.WorkDoneProgressBegin(
                title=f"kerntune: tuning {kernel}", cancellable=True, percentage=0,
                message=f"round 1: 0/{total} on {backend.name}"))
        test_sizes = bool(((settings or {}).get("llm") or {}).get("testSizes"))
        task = asyncio.ensure_future(self._run(live, prep, backend, options, progress, rounds, experts, llm,
                                               test_sizes))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        self.on_update(uri, False)
        return {"status": "started", "token": token}

    def cancel(self, path: str, kernel: str) -> bool:
        live = self.results.live.get((path, kernel))
        if live is None or live.finished:
            return False
        live.cancel.set()
        live.message = "cancelling"
        return True

    def _tune_thread(self, live: Live, prep, backend, options: TuneOptions, loop, rounds: int = 1,
                     experts: bool = True, llm=None, test_sizes: bool = False) -> dict:
        from agent_core.agent.loop import AgentOptions, expert_templater, optimize, rewrite_templater
        store = Store(store_path_for(prep.path))

        def on_event(ev: TuneEvent) -> None:
            loop.call_soon_threadsafe(self._on_event, live, ev)

        try:
            hooks = None
            if llm is not None:
                from agent_core.agent.llm.hooks import llm_hooks
                hooks = llm_hooks(store, llm, budget_per_round=options.budget, max_rounds=rounds)
            designer = hooks.test_designer.design if hooks is not None and test_sizes else None
            ex = [expert_templater] if experts else []  # the model's proposals, when there is a model, before the rewrite
            templaters = ex + hooks.templaters + [rewrite_templater] if hooks else [rewrite_templater] + ex
            res = optimize(prep.path, live.kernel, backend, store, AgentOptions(
                budget_per_round=options.budget, max_rounds=rounds, time_budget_s=options.time_budget_s,
                strategy=options.strategy, seed=options.seed, use_experts=experts),
                planner=hooks.planner if hooks else None, templaters=templaters, on_event=on_event,
                cancel=live.cancel, text=prep.text, test_designer=designer)
            if hooks is not None and res.rounds and res.rounds[-1].summary.get("session_id") is not None:
                report = hooks.report()  # what the run spent, for hovers and `kerntune results` (no key)
                report["sessions"] = [r.summary.get("session_id") for r in res.rounds]
                store.put_step(res.rounds[-1].summary["session_id"], "llm_summary", hooks.spend.line(), report)
            best = res.best
            status = "cancelled" if live.cancel.is_set() else "finished"
            summary = best.summary if best else (res.rounds[-1].summary if res.rounds else {})
            return {"status": status, "summary": summary, "rounds": len(res.rounds),
                    "dispatch": res.dispatch.to_dict() if res.dispatch is not None else None,
                    "origin": best.template.origin if best else None,
                    "stop": res.final_step.reason if res.final_step else "",
                    "llm": hooks.spend.line() if hooks and hasattr(hooks.spend, "line") else None}
        finally:
            try:
                self.backends.release(backend)  # kept warm for the next run, or closed
            finally:
                store.close()

    def _on_event(self, live: Live, ev: TuneEvent) -> None:
        if ev.kind == "status" and ev.message.startswith("plan: ") and live.round_started:
            # a new round of the optimize loop: what was measured so far stays counted
            live.base += live.round_done
            live.round += 1
            live.round_done, live.round_total, live.round_started = 0, live.budget, False
        if ev.kind != "status" or ev.done:
            live.round_done = ev.done
            live.round_total = max(live.round_total, ev.done)
            live.round_started = True
        live.done = live.base + live.round_done
        live.total = max(live.total, live.done)
        if ev.best is not None:
            live.best = ev.best
        if ev.kind == "evaluation" and ev.evaluation is not None:
            st = ev.evaluation.status
            if st == Status.PRUNED:
                live.pruned += 1
            elif st == Status.OK:
                live.ok += 1
            else:
                live.failed += 1
        if ev.kind in ("status", "original"):
            live.message = ev.message
        now = time.monotonic()
        if ev.kind in ("evaluation", "best", "original") and now - live.last_update >= UPDATE_EVERY_S:
            live.last_update = now
            self._report(live)
            self.on_update(live.uri, False)
        elif ev.kind == "status":
            self._report(live)

    def _report(self, live: Live) -> None:
        if live.token not in self.ls.work_done_progress.tokens:
            return
        best = f", best {live.speedup:.2f}x" if live.speedup else ""
        estimate = max(live.estimate, live.total)
        pct = min(99, int(100 * live.done / estimate)) if estimate else None
        pct = live.percentage = max(pct or 0, live.percentage)  # never goes back
        rnd, done_r, total_r = live.round, live.round_done, live.round_total or live.total
        self.ls.work_done_progress.report(live.token, lsp.WorkDoneProgressReport(
            message=f"round {rnd}: {done_r}/{total_r}{best} · {live.message}", percentage=pct, cancellable=True))

    async def _run(self, live: Live, prep, backend, options: TuneOptions, progress: bool, rounds: int = 1,
                   experts: bool = True, llm=None, test_sizes: bool = False) -> None:
        loop = asyncio.get_running_loop()
        result: dict = {"status": "failed", "summary": {}}
        try:
            result = await loop.run_in_executor(self.executor, self._tune_thread, live, prep, backend, options, loop,
                                                rounds, experts, llm, test_sizes)
        except KerntuneError as e:
            self.message(f"kerntune: tuning '{live.kernel}' failed: {e}", lsp.MessageType.Error)
        except Exception as e:
            log.exception("tuning %s failed", live.kernel)
            self.message(f"kerntune: tuning '{live.kernel}' failed: {e!r} (see the output channel)",
                         lsp.MessageType.Error)
        finally:
            live.finished = True
            self.results.live.pop((live.path, live.kernel), None)
            self.results.forget(live.path)
        s = result.get("summary") or {}
        sp = s.get("speedup")
        status = result.get("status")
        how = f" ({result['origin']}, {result['rounds']} round{'s' if result.get('rounds') != 1 else ''})" \
            if result.get("origin") else ""
        text = (f"{live.kernel}: {status}, {sp:.2f}x with {params_words(s.get('best_params'))}{how}" if sp
                else f"{live.kernel}: {status}, no verified speedup")
        if result.get("stop"):
            text += f"; stopped: {result['stop']}"
        if result.get("dispatch"):
            d = result["dispatch"]
            kept = len(d.get("original_kept") or [])
            if kept and kept == len(d.get("sizes") or []):
                text += "; the original kernel kept on every size set (no configuration faster beyond the noise)"
            else:
                text += (f"; per-shape dispatch of {len(d['entries'])} configurations: {d['speedup']:.2f}x"
                         + (f", the original kernel kept on {kept} size set(s)" if kept else ""))
        if result.get("llm"):
            text += f"; {result['llm']}"
        if progress:
            self.ls.work_done_progress.end(live.token, lsp.WorkDoneProgressEnd(message=text))
            self.ls.work_done_progress.tokens.pop(live.token, None)
        if result.get("summary"):
            self.message(f"kerntune: {text}" + (" — 'Apply best' is above the kernel." if sp and sp > 1 else ""))
        self.on_update(live.uri, True)

    def shutdown(self) -> None:
        for live in list(self.results.live.values()):
            live.cancel.set()
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.backends.close()
