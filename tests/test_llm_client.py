"""The LLM client against a real loopback HTTP server replaying transcripts, through the real openai package."""

import logging

import pytest

from agent_core.agent.llm.client import LlmClient
from agent_core.agent.llm.config import LlmSettings, settings_from_env
from agent_core.agent.llm.errors import LlmError, redact
from agent_core.agent.llm.limits import Limits
from agent_core.model import KerntuneError
from tests.llm_server import ReplayServer, free_port

KEY = "sk-test-SECRET-0123456789abcdef"
MSGS = [{"role": "system", "content": "You analyse CUDA kernels."}, {"role": "user", "content": "round 1: 62%"}]


def make(srv_url, sleeps=None, limits=None, **kw):
    s = LlmSettings(base_url=srv_url, model="replay-model", api_key=KEY,
                    **{"timeout_s": 5.0, "max_retries": 3, "backoff_s": 0.01, "max_backoff_s": 0.2, **kw})
    waits = sleeps if sleeps is not None else []
    return LlmClient(s, limits, sleep=waits.append)


def test_good_answer_and_spend():
    with ReplayServer("analyst_ok") as srv:
        c = make(srv.base_url)
        r = c.ask("analyst", MSGS)
    assert r.data["bottleneck"] == "memory_bandwidth"
    assert (r.prompt_tokens, r.completion_tokens, r.attempts) == (812, 64, 1)
    assert c.spend.calls == 1 and c.spend.tokens == 876
    req = srv.requests[0]
    assert req["headers"]["authorization"] == f"Bearer {KEY}"
    rf = req["body"]["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["name"] == "analyst" and rf["json_schema"]["strict"]
    assert req["body"]["model"] == "replay-model" and req["body"]["max_tokens"] == 8192
    assert not srv.mismatches


def test_429_then_success_backs_off_with_retry_after():
    waits = []
    with ReplayServer("rate_limited_then_ok") as srv:
        r = make(srv.base_url, waits).ask("analyst", MSGS)
    assert r.attempts == 2 and waits == [0.05]
    assert len(srv.requests) == 2


def test_500_then_success_uses_exponential_backoff():
    waits = []
    with ReplayServer("server_error_then_ok") as srv:
        r = make(srv.base_url, waits, backoff_s=0.03).ask("analyst", MSGS)
    assert r.attempts == 2 and waits == [0.03]


def test_5xx_every_time_gives_up_after_retries():
    waits = []
    with ReplayServer("server_errors") as srv:
        with pytest.raises(LlmError) as ei:
            make(srv.base_url, waits, backoff_s=0.01).ask("analyst", MSGS)
    e = ei.value
    assert e.kind == "server_error" and e.attempts == 4 and not e.fatal
    assert "HTTP 503 after 4 attempts" in str(e) and "overloaded" in str(e)
    assert waits == [0.01, 0.02, 0.04] and srv.remaining == 0


def test_timeout():
    with ReplayServer("timeout") as srv:
        with pytest.raises(LlmError) as ei:
            make(srv.base_url, timeout_s=0.3, max_retries=1).ask("analyst", MSGS)
    assert ei.value.kind == "timeout" and "no answer within 0.3 s (2 attempts)" in str(ei.value)


def test_refused_connection():
    url = f"http://127.0.0.1:{free_port()}/v1"
    waits = []
    with pytest.raises(LlmError) as ei:
        make(url, waits, max_retries=2).ask("analyst", MSGS)
    e = ei.value
    assert e.kind == "unreachable" and e.fatal and "cannot reach http://127.0.0.1:" in str(e)
    assert len(waits) == 2


@pytest.mark.parametrize("name, kind, words", [
    ("malformed_json", "bad_json", "is not JSON"),
    ("truncated", "truncated", "cut off at the token limit"),
    ("ignores_schema", "schema", "answer.diagnosis is missing"),
    ("raw_garbage", "bad_json", "analyst"),
    ("context_error", "context", "maximum context length"),
])
def test_bad_answers_are_clear_errors(name, kind, words):
    with ReplayServer(name) as srv:
        c = make(srv.base_url)
        with pytest.raises(LlmError) as ei:
            c.ask("analyst", MSGS)
    assert ei.value.kind == kind, str(ei.value)
    assert words in str(ei.value)
    assert len(srv.requests) == 1  # not retried: asking again gives the same answer


def test_fenced_json_is_accepted():
    with ReplayServer("fenced_json") as srv:
        r = make(srv.base_url).ask("analyst", MSGS)
    assert r.data["ideas"][0] == "16-byte vector loads"


def test_context_too_long_is_refused_before_sending():
    with ReplayServer("analyst_ok") as srv:
        c = make(srv.base_url, context_tokens=1000, max_output_tokens=500)
        with pytest.raises(LlmError) as ei:
            c.ask("analyst", MSGS + [{"role": "user", "content": "x" * 3000}])
    assert ei.value.kind == "context" and "context of 1000 tokens" in str(ei.value)
    assert srv.requests == [] and c.spend.calls == 0


def test_call_and_token_limits():
    with ReplayServer([{"reply": {"diagnosis": "d", "bottleneck": "unknown", "ideas": []},
                        "usage": {"prompt_tokens": 100, "completion_tokens": 20}}] * 3) as srv:
        c = make(srv.base_url, limits=Limits(max_calls=2))
        c.ask("analyst", MSGS)
        c.ask("analyst", MSGS)
        with pytest.raises(LlmError) as ei:
            c.ask("analyst", MSGS)
        assert ei.value.kind == "limit" and ei.value.fatal and "call limit (2)" in str(ei.value)
        assert len(srv.requests) == 2
        c2 = make(srv.base_url, limits=Limits(max_tokens=130))
        c2.ask("analyst", MSGS)
        assert srv.requests[-1]["body"]["max_tokens"] < 130  # the answer is capped to what is left
        with pytest.raises(LlmError, match="token limit"):
            c2.ask("analyst", MSGS)
    assert c.spend.to_dict()["by_role"] == {"analyst": {"calls": 2, "tokens": 240}}


def test_wall_limit():
    with ReplayServer("analyst_ok") as srv:
        c = make(srv.base_url, limits=Limits(max_wall_s=0.0001))
        c.ask("analyst", MSGS)  # the first call may start; it spends the time
        with pytest.raises(LlmError, match="time limit"):
            c.ask("analyst", MSGS)


def test_api_key_never_in_errors_logs_or_reprs(caplog):
    caplog.set_level(logging.DEBUG)
    with ReplayServer("auth_echo") as srv:
        c = make(srv.base_url)
        with pytest.raises(LlmError) as ei:
            c.ask("analyst", MSGS)
    e = ei.value
    assert e.kind == "auth" and e.fatal and "HTTP 401" in str(e)
    for text in (str(e), repr(e), e.message, caplog.text, repr(c), repr(c.settings), str(c.settings),
                 str(c.settings.describe())):
        assert KEY not in text and "0123456789abcdef" not in text
    assert "[api key]" in str(e)
    assert e.__cause__ is None and e.__suppress_context__  # the openai exception (with the body) is not chained


def test_redact_fragments():
    assert redact(f"key {KEY[:20]}... rejected", KEY) .count("[api key]") >= 1
    assert KEY[:20] not in redact(f"key {KEY[:20]}... rejected", KEY)
    assert redact("nothing here", "") == "nothing here"


def test_settings_from_env():
    assert settings_from_env(env={}) is None
    assert settings_from_env(env={"OPENAI_API_KEY": "sk-x"}) is None  # a key alone does not turn the LLM on
    s = settings_from_env(env={"KERNTUNE_LLM_BASE_URL": "http://h:8000/v1/", "KERNTUNE_LLM_MODEL": "m",
                               "OPENAI_API_KEY": "sk-x", "KERNTUNE_LLM_CONTEXT_TOKENS": "32000"})
    assert (s.base_url, s.model, s.api_key, s.context_tokens) == ("http://h:8000/v1", "m", "sk-x", 32000)
    s = settings_from_env(model="gpt-x", env={"KERNTUNE_LLM_API_KEY": "k1", "OPENAI_API_KEY": "k2"})
    assert s.base_url == "https://api.openai.com/v1" and s.api_key == "k1"
    assert settings_from_env(base_url="http://a/v1", model="m", api_key="k3", env={"KERNTUNE_LLM_API_KEY": "k1"}).api_key == "k3"
    with pytest.raises(KerntuneError, match="KERNTUNE_LLM_MODEL"):
        settings_from_env(env={"KERNTUNE_LLM_BASE_URL": "http://h/v1"})
    assert "k1" not in repr(s)


def test_recorded_transcript_replays(tmp_path):
    rec = tmp_path / "rec.json"
    with ReplayServer("rate_limited_then_ok") as srv:
        make(srv.base_url, record_path=str(rec)).ask("analyst", MSGS)
    assert KEY not in rec.read_text()
    with ReplayServer(rec) as srv2:
        r = make(srv2.base_url).ask("analyst", MSGS)
    assert r.attempts == 2 and r.data["bottleneck"] == "memory_bandwidth" and not srv2.mismatches


def test_recording_an_error_that_echoes_the_key(tmp_path):
    rec = tmp_path / "rec.json"
    with ReplayServer("auth_echo") as srv:
        with pytest.raises(LlmError):
            make(srv.base_url, record_path=str(rec)).ask("analyst", MSGS)
    text = rec.read_text()
    assert "401" in text and KEY not in text and "0123456789abcdef" not in text


def test_no_endpoint_no_hooks():
    from agent_core.agent.llm.hooks import llm_hooks
    assert llm_hooks(None, env={"OPENAI_API_KEY": "sk-x"}) is None
    h = llm_hooks(None, env={"KERNTUNE_LLM_BASE_URL": "http://127.0.0.1:9/v1", "KERNTUNE_LLM_MODEL": "m",
                             "KERNTUNE_LLM_MAX_CALLS": "5"})
    assert h.roles.client.limits.max_calls == 5 and h.report()["spent"]["calls"] == 0
