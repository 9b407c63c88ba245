"""The whole optimize loop with the LLM roles: a real loopback server replaying scripted transcripts, the real
openai client, nvcc for the proposal's compile check, and the replay backend answering from a recording
(made with the Store API, the way a GPU session writes one)."""

import json
import math
import shutil
from pathlib import Path

import pytest

from agent_core.agent.loop import AgentOptions, expert_templater, optimize
from agent_core.agent.llm.config import LlmSettings
from agent_core.agent.llm.hooks import llm_hooks
from agent_core.agent.llm.limits import Limits
from agent_core.agent.llm.proposal import template_from_proposal
from agent_core.model import DeviceInfo, Evaluation, Status, Timing, sha256_text
from agent_core.measure.replay import ReplayBackend
from agent_core.templating.space import valid_configs
from agent_core.store import Store
from agent_core.search.tuner import prepare
from tests.llm_server import TRANSCRIPTS, ReplayServer, free_port

pytestmark = pytest.mark.nvcc
ROOT = Path(__file__).resolve().parents[1]
DEVICE = DeviceInfo(name="NVIDIA H100 80GB HBM3", arch="sm_90", sm_count=132, copy_bandwidth_gbps=2960.0)
ORIGINAL_US = [120.0, 16.0]
KEY = "sk-loop-KEY-abcdef0123456789"


def t(us):
    return Timing(median_us=us, min_us=us * 0.97, max_us=us * 1.1, iqr_us=us * 0.02, reps=100, batch=1, l2="flushed")


def llm_template(prep):
    reply = json.loads((TRANSCRIPTS / "templater_ok.json").read_text())["exchanges"][0]["reply"]
    return template_from_proposal(reply, prep, compile_check=False)


@pytest.fixture
def recorded(tmp_path):
    """row_sum.cu (no expert family) and a recording of its structural template and of the LLM template:
    structural best 1.25x at BLOCK=256, the LLM template best 2.5x at THREADS=256, VEC=4."""
    src = tmp_path / "row_sum.cu"
    shutil.copy(ROOT / "examples" / "row_sum.cu", src)
    prep = prepare(str(src), "row_sum", use_workspace_files=False)
    sh, oh = prep.spec.spec_hash, sha256_text(prep.text)
    rec = tmp_path / "recording.sqlite"
    with Store(rec) as s:
        s.put_device(DEVICE)
        s.put_original(oh, sh, DEVICE.name, [t(u) for u in ORIGINAL_US])
        for tmpl, scale, vary in ((prep.template, 0.8, "BLOCK"), (llm_template(prep), 0.4, "THREADS")):
            sid = s.start_session(str(src), "row_sum", oh, tmpl.template_hash, sh, DEVICE.name, "exhaustive", 100, 0,
                                  tmpl.origin)
            for cfg in valid_configs(tmpl.space, prep.spec.sizes):
                f = scale * (1 + 0.1 * (math.log2(cfg[vary]) - 8) ** 2) * (1 + 0.05 * (4 - cfg.get("VEC", 4)))
                s.put_evaluation(sid, tmpl.template_hash, sh, DEVICE.name, Evaluation(
                    params=cfg, status=Status.OK, timings=[t(u * f) for u in ORIGINAL_US], gbps=[1.0, 1.0],
                    objective=f))
            s.finish_session(sid, "finished", {})
    return src, rec


def run(src, rec, ws, srv_url, limits=None, max_retries=1):
    settings = LlmSettings(base_url=srv_url, model="scripted", api_key=KEY, backoff_s=0.01, max_retries=max_retries,
                           timeout_s=10)
    hooks = llm_hooks(ws, settings, limits, arch="sm_90", budget_per_round=100, max_rounds=4)
    backend = ReplayBackend(Store(rec))
    try:
        res = optimize(str(src), "row_sum", backend, ws, AgentOptions(budget_per_round=100, strategy="exhaustive"),
                       planner=hooks.planner, templaters=[expert_templater, *hooks.templaters])
    finally:
        backend.close()
    return res, hooks


def llm_steps(ws):
    steps = [st for s in ws.sessions() for st in ws.steps(s["id"]) if st["kind"] == "llm"]
    return sorted(steps, key=lambda st: st["id"])


def test_llm_loop_end_to_end(recorded, tmp_path):
    src, rec = recorded
    with ReplayServer("row_sum_loop") as srv, Store(tmp_path / "ws.sqlite") as ws:
        res, hooks = run(src, rec, ws, srv.base_url)
        assert not srv.mismatches and srv.remaining == 0
        # round 1: rules search the user's kernel; round 2: the model's template; then the model stops
        assert [r.template.origin for r in res.rounds] == ["structural", "llm"]
        assert res.rounds[1].step.action == "switch_template"
        assert res.final_step.action == "stop" and "copy bandwidth" in res.final_step.reason
        assert res.best.template.origin == "llm"
        assert res.best.summary["best_params"] == {"THREADS": 256, "VEC": 4}
        assert res.best.summary["speedup"] == pytest.approx(2.5)
        # the feedback message named the reason of the rejection
        assert "parameter UNROLL is never used" in srv.requests[1]["body"]["messages"][-1]["content"]
        # the record: every model call, its role, tokens, proposal and outcome, attached to the sessions
        steps = llm_steps(ws)
        got = [(s["data"]["role"], s["data"]["outcome"]) for s in steps]
        assert got == [("templater", "rejected"), ("templater", "accepted"), ("analyst", "accepted"),
                       ("planner", "accepted"), ("analyst", "accepted"), ("planner", "accepted")]
        assert steps[0]["data"]["reason"].startswith("parameter UNROLL is never used")
        assert steps[1]["data"]["proposal"]["params"][0]["name"] == "THREADS"
        assert steps[1]["data"]["tokens"]["prompt_tokens"] == 2100
        assert steps[3]["data"]["tokens"]["attempts"] == 2  # the 429, then the answer
        spent = steps[-1]["data"]["spent"]
        assert spent["calls"] == 7 and spent["tokens"] == 2 * 3000 + 1620 + 960 + 1580 + 990
        assert hooks.report()["spent"] == spent and hooks.report()["offline"] is None
        # the calls made before the first session exist are attached to it
        first = ws.sessions()[-1]
        assert first["origin"] == "structural" and [s["data"]["role"] for s in ws.steps(first["id"])
                                                    if s["kind"] == "llm"][:2] == ["templater", "templater"]
        dump = json.dumps([ws.steps(s["id"]) for s in ws.sessions()])
        assert KEY not in dump and "abcdef0123456789" not in dump


def test_endpoint_down_runs_offline_as_before(recorded, tmp_path):
    src, rec = recorded
    with Store(tmp_path / "ws.sqlite") as ws:
        res, hooks = run(src, rec, ws, f"http://127.0.0.1:{free_port()}/v1")
        assert [r.template.origin for r in res.rounds] == ["structural"]
        assert res.final_step.action == "stop"
        assert hooks.roles.offline and "cannot reach" in hooks.roles.offline
        steps = llm_steps(ws)
        assert [(s["data"]["role"], s["data"]["outcome"], s["data"]["error_kind"]) for s in steps] == \
            [("templater", "error", "unreachable")]  # asked once, then never again
    with Store(tmp_path / "offline.sqlite") as ws2:
        backend = ReplayBackend(Store(rec))
        plain = optimize(str(src), "row_sum", backend, ws2, AgentOptions(budget_per_round=100, strategy="exhaustive"),
                         templaters=[expert_templater])  # the same templaters as `run`, without the model
        backend.close()
    assert [r.summary["best_params"] for r in plain.rounds] == [r.summary["best_params"] for r in res.rounds]
    assert plain.final_step.action == res.final_step.action


def test_call_limit_stops_asking_and_keeps_measurements(recorded, tmp_path):
    src, rec = recorded
    with ReplayServer("templater_ok") as srv, Store(tmp_path / "ws.sqlite") as ws:
        res, hooks = run(src, rec, ws, srv.base_url, Limits(max_calls=1))
        # the proposal was made; the planner could not ask and fell back to the rules, which still search it
        assert [r.template.origin for r in res.rounds] == ["structural", "llm"]
        assert "[rules: LLM offline" in res.rounds[1].step.reason
        assert hooks.spend.calls == 1 and "call limit (1)" in hooks.roles.offline
        assert res.best.summary["speedup"] == pytest.approx(2.5)


def test_rejected_twice_is_dropped(recorded, tmp_path):
    src, rec = recorded
    with ReplayServer("templater_rejected_twice") as srv, Store(tmp_path / "ws.sqlite") as ws:
        res, hooks = run(src, rec, ws, srv.base_url, Limits(max_calls=2))
        assert [r.template.origin for r in res.rounds] == ["structural"]
        outcomes = [(s["data"]["role"], s["data"]["outcome"]) for s in llm_steps(ws)]
        assert outcomes[:2] == [("templater", "rejected"), ("templater", "rejected")]
        assert "UNROLL" in llm_steps(ws)[0]["data"]["reason"]


def test_a_template_that_cannot_be_tuned_leaves_the_rounds_before_it_standing(recorded, tmp_path, monkeypatch):
    """A template the loop switches to that cannot be tuned (its tune raises a KerntuneError: held-out batch 27's
    Eole kernel, whose rewrite the spec could not instantiate after the expert and structural rounds had verified)
    is reported and left out; the run keeps the rounds before it instead of ending in an error."""
    from agent_core.agent import loop as loop_mod
    from agent_core.model import KerntuneError
    src, rec = recorded
    real = loop_mod.tune

    def tune(path, kernel, backend, store, topt, **kw):
        if kw["prepared"].template.origin == "llm":
            raise KerntuneError("cannot tell which instantiation of 'row_sum' the spec tunes")
        return real(path, kernel, backend, store, topt, **kw)

    monkeypatch.setattr(loop_mod, "tune", tune)
    events = []
    with Store(tmp_path / "ws.sqlite") as ws:
        backend = ReplayBackend(Store(rec))
        res = optimize(str(src), "row_sum", backend, ws, AgentOptions(budget_per_round=100, strategy="exhaustive"),
                       templaters=[lambda prep, rounds: [llm_template(prep)]], on_event=events.append)
        backend.close()
    assert [r.template.origin for r in res.rounds] == ["structural"]
    assert res.best.summary["speedup"] == pytest.approx(1.25)
    said = [e.message for e in events if e.kind == "status"]
    assert any("the llm template could not be tuned (cannot tell which instantiation" in m for m in said), said
