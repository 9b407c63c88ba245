"""The roles' validation: templater proposals, test designs, planner steps, GPU-failure feedback, prompts."""

import copy
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from agent_core.agent.llm.client import LlmClient
from agent_core.agent.llm.config import LlmSettings
from agent_core.agent.llm.prompts import render
from agent_core.agent.llm.proposal import ProposalError, check_includes, template_from_proposal
from agent_core.agent.llm.roles import LlmPlanner, LlmRoles, LlmTemplater, LlmTestDesigner
from agent_core.model import KerntuneError
from agent_core.agent.planning import Analysis, Round, Step
from agent_core.search.tuner import prepare
from tests.llm_server import TRANSCRIPTS, ReplayServer

ROOT = Path(__file__).resolve().parents[1]
GOOD = json.loads((TRANSCRIPTS / "templater_ok.json").read_text())["exchanges"][0]["reply"]


@pytest.fixture(scope="module")
def prep(tmp_path_factory):
    d = tmp_path_factory.mktemp("src")
    shutil.copy(ROOT / "examples" / "row_sum.cu", d / "row_sum.cu")
    return prepare(str(d / "row_sum.cu"), "row_sum", use_workspace_files=False)


def bad(**changes):
    d = copy.deepcopy(GOOD)
    d.update(changes)
    return d


def roles_for(srv, **kw):
    s = LlmSettings(base_url=srv.base_url, model="m", api_key="k-123", backoff_s=0.01, max_retries=0)
    return LlmRoles(LlmClient(s), None, compile_check=False, **kw)


def test_good_proposal_becomes_an_llm_template(prep):
    t = template_from_proposal(GOOD, prep, compile_check=False)
    assert t.origin == "llm" and t.entry is None and t.kernel == "row_sum"
    assert t.space.original_config() == {"THREADS": 128, "VEC": 4}
    assert t.text.startswith("#ifndef KT_THREADS\n#define KT_THREADS 128\n#endif\n")  # defaults added
    assert t.launch == {"grid": ["rows"], "block": ["THREADS"], "smem": "0"}


@pytest.mark.parametrize("changes, stage, words", [
    ({"params": GOOD["params"] + [{"name": "UNROLL", "values": [1, 2], "original": 1, "kind": "", "why": ""}]},
     "macros", "parameter UNROLL is never used"),
    ({"params": [dict(GOOD["params"][0], original=96), GOOD["params"][1]]}, "params", "original 96 is not one"),
    ({"params": [dict(GOOD["params"][0], name="threads"), GOOD["params"][1]]}, "params", "upper-case"),
    ({"constraints": ["THREADS % 32 == 0", "__import__('os').system('x')"]}, "constraints", "unknown function"),
    ({"constraints": ["THREADS <= MAXT"]}, "constraints", "unknown name(s) MAXT"),
    ({"constraints": ["THREADS >= 256"]}, "constraints", "original values"),
    ({"launch": {"grid": ["rows"], "block": ["THREADS * 16"], "smem": "0"}}, "launch", "2048 threads"),
    ({"launch": {"grid": ["n_rows"], "block": ["THREADS"], "smem": "0"}}, "launch", "unknown name(s) n_rows"),
    ({"launch": {"grid": ["rows"], "block": ["THREADS.bit_length()"], "smem": "0"}}, "launch", "unknown function"),
    ({"entry": "row_sum_v2"}, "entry", "no __global__ function 'row_sum_v2'"),
    ({"template": GOOD["template"].replace("int cols)", "int cols, int rows)")}, "entry", "takes 4 arguments"),
    ({"template": '#include "/etc/passwd"\n' + GOOD["template"]}, "includes", "not allowed"),
])
def test_bad_proposals_are_rejected_with_the_reason(prep, changes, stage, words):
    with pytest.raises(ProposalError) as ei:
        template_from_proposal(bad(**changes), prep, compile_check=False)
    assert ei.value.stage == stage and words in ei.value.message, ei.value.message


def test_includes():
    orig = '#include "my_helpers.cuh"\n#include <cuda_fp16.h>\n'
    check_includes('#include <cuda_bf16.h>\n#include "my_helpers.cuh"\n#include <cstdint>\n', orig)
    for line in ('#include "other.cuh"', "#include </etc/passwd>", "#include <../x.h>", "#include SECRET",
                 "# include_next <../../x>"):
        with pytest.raises(ProposalError):
            check_includes(line + "\n", orig)


@pytest.mark.nvcc
def test_proposal_must_compile(prep):
    t = template_from_proposal(GOOD, prep, compile_check=True)
    assert "KT_VEC" in t.text
    broken = bad(template=GOOD["template"].replace("acc += row[c];", "acc += row[c] +;"))
    with pytest.raises(ProposalError) as ei:
        template_from_proposal(broken, prep, compile_check=True)
    assert ei.value.stage == "compile" and "nvcc failed at the original values" in ei.value.message


def test_test_designer_adds_sizes_and_inits(prep):
    with ReplayServer([{"reply": {"sizes": [[{"name": "rows", "value": 3}, {"name": "cols", "value": 33}],
                                            [{"name": "cols", "value": 1}, {"name": "rows", "value": 1}]],
                                  "inits": [{"arg": "x", "init": "uniform(-1000, 1000)"}],
                                  "why": "short rows and large magnitudes"}},
                       {"reply": {"sizes": [[{"name": "rows", "value": 3}]], "inits": [], "why": "w"}},
                       {"reply": {"sizes": [], "inits": [{"arg": "out", "init": "ones"}], "why": "w"}}]) as srv:
        d = LlmTestDesigner(roles_for(srv))
        spec = d.design(prep)
        assert spec.sizes == prep.spec.sizes + [{"rows": 3, "cols": 33}, {"rows": 1, "cols": 1}]
        assert spec.args[0].init == "uniform(-1000, 1000)" and prep.spec.args[0].init == "normal"
        assert spec.spec_hash != prep.spec.spec_hash
        assert d.design(prep) is None  # a size set without cols, then an init for an output: dropped
        log = d.roles.log.entries
        assert [e["outcome"] for e in log] == ["accepted", "rejected", "rejected"]
        assert "every size set names" in log[1]["reason"] and "not an input buffer" in log[2]["reason"]
        assert "every size set names" in srv.requests[2]["body"]["messages"][-1]["content"]


def _round(prep, template, summary, action="search"):
    return Round(0, template, {"session_id": None, "kernel": "row_sum", "sizes": prep.spec.sizes, **summary},
                 Analysis("findings", {}), Step(action, "r", template))


def test_planner_steps_are_validated(prep):
    t = prep.template
    last = _round(prep, t, {"best_params": {"BLOCK": 256, "UNROLL": 8}, "speedup": 1.2, "counts": {"ok": 3}})
    plans = [
        {"action": "widen", "reason": "edge", "candidate": -1, "idea": "", "changes": [{"param": "UNROLL", "values": [1, 2]}], "budget": 0},
        {"action": "widen", "reason": "edge", "candidate": -1, "idea": "",
         "changes": [{"param": "UNROLL", "values": [1, 2, 4, 8, 16, 32]}], "budget": 12},
        {"action": "narrow", "reason": "n", "candidate": -1, "idea": "", "changes": [{"param": "BLOCK", "values": [128, 512]}], "budget": 0},
        {"action": "narrow", "reason": "n", "candidate": -1, "idea": "", "changes": [{"param": "BLOCK", "values": [128, 256]}], "budget": 0},
        {"action": "switch_template", "reason": "s", "candidate": 3, "idea": "", "changes": [], "budget": 0},
        {"action": "switch_template", "reason": "s", "candidate": 0, "idea": "", "changes": [], "budget": 0},
    ]
    with ReplayServer([{"reply": p} for p in plans]) as srv:
        pl = LlmPlanner(roles_for(srv), budget_per_round=20)
        s = pl.plan([last], [t])
        assert s.action == "widen" and s.template.space.params["UNROLL"].values == [1, 2, 4, 8, 16, 32]
        assert s.budget == 12 and t.space.params["UNROLL"].values == [1, 2, 4, 8, 16]  # a copy
        s = pl.plan([last], [t])
        assert s.action == "narrow" and s.template.space.params["BLOCK"].values == [128, 256]
        s = pl.plan([last], [t])
        assert s.action == "switch_template" and s.template is t and s.budget == 20
        reasons = [e["reason"] for e in pl.roles.log.entries if e["outcome"] == "rejected"]
        assert "must contain every old value" in reasons[0] and "keeps [128, 256]" in reasons[1]
        assert "candidate 3 does not exist" in reasons[2]


def test_planner_first_round_and_failures_use_the_rules(prep):
    t = prep.template
    with ReplayServer([{"content": "not json"}, {"content": "still not json"}]) as srv:
        pl = LlmPlanner(roles_for(srv))
        s = pl.plan([], [t])
        assert s.action == "search" and s.template is t and srv.requests == []  # no call for the first round
        last = _round(prep, t, {"best_params": {"BLOCK": 256, "UNROLL": 4}, "speedup": 1.2, "counts": {"ok": 3}})
        s = pl.plan([last], [])
        assert s.action in ("widen", "stop") and len(srv.requests) == 2
        assert "is not JSON" in srv.requests[1]["body"]["messages"][-1]["content"]  # fed back once


def test_templater_feeds_gpu_failures_back_once(prep):
    reply2 = bad(idea="scalar loads only", params=[GOOD["params"][0], dict(GOOD["params"][1], values=[1, 2], original=1)])
    with ReplayServer([{"reply": GOOD}, {"reply": reply2, "expect": {"contains": "no variant of this template passed"}}]) as srv:
        tp = LlmTemplater(roles_for(srv))
        first = tp(prep, [])
        assert len(first) == 1 and first[0].origin == "llm"
        failed = _round(prep, first[0], {"counts": {"ok": 0, "failed": 2},
                                         "failures": [{"params": {"THREADS": 128, "VEC": 4}, "status": "verify_failed",
                                                       "error": "out[7]: 1.0 != 2.0"}]})
        second = tp(prep, [failed])
        assert len(second) == 1 and second[0].space.params["VEC"].values == [1, 2]
        assert tp(prep, [failed]) == []  # once only
        assert not srv.mismatches and len(srv.requests) == 2
        conv = srv.requests[1]["body"]["messages"]
        assert conv[-2]["role"] == "assistant" and "out[7]: 1.0 != 2.0" in conv[-1]["content"]


def test_prompts_render_and_refuse_missing_values():
    m = render("planner", kernel="k", history="h", diagnosis="d", candidates="c", rounds_left=2)
    assert [x["role"] for x in m] == ["system", "user"] and "Rounds left: 2." in m[1]["content"]
    with pytest.raises(KerntuneError, match="no value for placeholder"):
        render("planner", kernel="k")
    src = "__global__ void k(float* a) { a[0] = $x; }"  # values are not re-substituted
    assert src in render("templater", kernel="k", file_name="f.cu", kernel_source=src, spec="", size_names="n",
                         current="", idea="")[1]["content"]
