"""An endpoint that echoes the API key transformed (issue #15): lower-cased, base64 inside a header dump,
percent- or hex-encoded, or any key-like header or token. None of it reaches an error, a log, a transcript,
the store or the command's output."""

import base64
import json
import logging
import urllib.parse

import pytest
from hypothesis import given, settings, strategies as st

from agent_core.agent.llm.errors import LlmError, redact, redact_obj
from tests.llm_server import ReplayServer
from tests.test_llm_cli import dump, flat, optimize, work  # noqa: F401 (work: the fixture)
from tests.test_llm_client import KEY, MSGS, make

FRAG = "0123456789abcdef"


def forms(key: str) -> list[str]:
    """The key as a careless or hostile endpoint might echo it."""
    hdr = f"POST /v1/chat/completions\r\nAuthorization: Bearer {key}\r\nHost: x\r\n"
    return [key, key.lower(), key.upper(), key[:20] + "...", base64.b64encode(hdr.encode()).decode(),
            base64.urlsafe_b64encode(("x" + key).encode()).decode(), base64.b64encode(key.encode()).decode(),
            urllib.parse.quote(f"api_key={key}", safe=""), key.encode().hex(), f"Authorization: Bearer {key}"]


def leaks(text: str, key: str = KEY) -> list[str]:
    low = text.lower()
    found = [f for f in (key.lower(), FRAG, "secret-0123") if f in low]
    for run in __import__("re").findall(r"[A-Za-z0-9+/_-]{12,}={0,2}", text):
        for skip in range(4):
            for alt in (None, b"-_"):
                try:
                    raw = base64.b64decode(run[skip:] + "===", altchars=alt).decode("latin-1").lower()
                except Exception:
                    continue
                if FRAG in raw:
                    found.append(run)
    if key.encode().hex()[:24] in low or urllib.parse.quote(key, safe="").lower() in low:
        found.append("encoded")
    return found


@pytest.mark.parametrize("i", range(10))
def test_every_form_is_redacted(i):
    text = f"upstream said: {forms(KEY)[i]} (rejected)"
    out = redact(text, KEY)
    assert not leaks(out), (text, out)
    assert "[api key]" in out


def test_key_like_things_are_masked_whoever_they_belong_to():
    out = redact('{"Authorization": "Bearer abcdefghijkl", "x-api-key": "zz-top-1234"} sk-proj-' + "A" * 30, None)
    assert "abcdefghijkl" not in out and "zz-top-1234" not in out and "A" * 30 not in out
    # ordinary text and kernel code pass untouched
    code = "__global__ void blockReduceSum_kernel_v2(const float* __restrict__ x) { /* task-1234 */ }"
    assert redact(code, KEY) == code


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60), st.integers(0, 9), st.text(max_size=60))
def test_fuzzed_embeddings_never_leak(before, i, after):
    text = before + forms(KEY)[i] + after
    assert not leaks(redact(text, KEY)), text
    assert not leaks(json.dumps(redact_obj({"body": {"message": text}, text: [text]}, KEY)))


def _echo_exchanges():
    dump_ = base64.b64encode(f"Authorization: Bearer {KEY}\r\n".encode()).decode()
    return [{"status": 500, "body": {"error": {"message": f"upstream rejected {KEY.lower()}; headers: {dump_}"}}},
            {"status": 401, "body": {"error": {"message": f"Incorrect API key provided: {KEY.upper()} "
                                                          f"(hex {KEY.encode().hex()}, {urllib.parse.quote(KEY)})",
                                               "type": "invalid_request_error"}}}]


def test_transformed_echo_never_in_errors_logs_or_transcripts(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    rec = tmp_path / "rec.json"
    with ReplayServer(_echo_exchanges()) as srv:
        with pytest.raises(LlmError) as ei:
            make(srv.base_url, record_path=str(rec), max_retries=1).ask("analyst", MSGS)
    e = ei.value
    assert e.kind == "auth"
    for text in (str(e), repr(e), caplog.text, rec.read_text()):
        assert not leaks(text), text


def test_transformed_echo_never_in_the_store_or_the_output(work, monkeypatch):  # noqa: F811
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("KERNTUNE_LLM_MAX_RETRIES", "1")
    with ReplayServer(_echo_exchanges()) as srv:
        r = optimize("--llm-base-url", srv.base_url, "--llm-model", "m")
    out = flat(r.output)
    assert "HTTP 401" in out
    for text in (r.output, (work / "o.json").read_text(), dump(work / "ws.sqlite")):
        assert not leaks(text), [x for x in leaks(text)]
