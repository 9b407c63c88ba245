"""The JSON schema of each role's answer (sent as ``response_format``) and a checker for answers, since an
endpoint may ignore the schema. Schemas are in the strict subset: every property required, no extras."""

from __future__ import annotations


def _obj(props: dict, **kw) -> dict:
    return {"type": "object", "additionalProperties": False, "required": list(props), "properties": props, **kw}


_STR = {"type": "string"}
_INT = {"type": "integer"}
_STRS = {"type": "array", "items": _STR}

TEMPLATER = _obj({
    "idea": _STR,  # one line: what this template changes and why it should be faster
    "template": _STR,  # the whole CUDA source of the template
    "entry": _STR,  # the __global__ function in the template to launch
    "params": {"type": "array", "minItems": 1, "maxItems": 8, "items": _obj({
        "name": _STR, "values": {"type": "array", "minItems": 1, "maxItems": 16, "items": _INT},
        "original": _INT, "kind": _STR, "why": _STR})},
    "constraints": _STRS,
    "launch": _obj({"grid": {**_STRS, "minItems": 1, "maxItems": 3},
                    "block": {**_STRS, "minItems": 1, "maxItems": 3}, "smem": _STR}),
})

TEST_DESIGNER = _obj({
    "sizes": {"type": "array", "maxItems": 4, "items": {"type": "array", "items": _obj({"name": _STR,
                                                                                         "value": _INT})}},
    "inits": {"type": "array", "items": _obj({"arg": _STR, "init": _STR})},
    "why": _STR,
})

BOTTLENECKS = ["memory_bandwidth", "latency", "occupancy", "compute", "launch_overhead", "correctness", "unknown"]

ANALYST = _obj({
    "diagnosis": _STR,  # plain words, a few sentences
    "bottleneck": {"type": "string", "enum": BOTTLENECKS},
    "ideas": {**_STRS, "maxItems": 5},
})

ACTIONS = ["search", "switch_template", "retemplatize", "widen", "narrow", "stop"]

PLANNER = _obj({
    "action": {"type": "string", "enum": ACTIONS},
    "reason": _STR,
    "candidate": _INT,  # index into the candidate templates (search / switch_template), else -1
    "idea": _STR,  # retemplatize: what the new template should do differently, else ""
    "changes": {"type": "array", "items": _obj({"param": _STR, "values": {"type": "array", "items": _INT}})},
    "budget": _INT,  # evaluations for the round (0: the default)
})

SCHEMAS = {"templater": TEMPLATER, "test_designer": TEST_DESIGNER, "analyst": ANALYST, "planner": PLANNER}


def check(value, schema: dict, where: str = "answer") -> list[str]:
    """What in ``value`` does not match ``schema`` (the subset used above); empty when it matches."""
    errs: list[str] = []
    t = schema.get("type")
    if t == "object":
        if not isinstance(value, dict):
            return [f"{where} must be an object, got {type(value).__name__}"]
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            if k not in value:
                errs.append(f"{where}.{k} is missing")
        if schema.get("additionalProperties") is False:
            for k in value:
                if k not in props:
                    errs.append(f"{where}.{k} is not expected")
        for k, sub in props.items():
            if k in value:
                errs += check(value[k], sub, f"{where}.{k}")
    elif t == "array":
        if not isinstance(value, list):
            return [f"{where} must be a list"]
        if "minItems" in schema and len(value) < schema["minItems"]:
            errs.append(f"{where} needs at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errs.append(f"{where} has more than {schema['maxItems']} items")
        for i, v in enumerate(value):
            errs += check(v, schema.get("items", {}), f"{where}[{i}]")
    elif t == "string":
        if not isinstance(value, str):
            errs.append(f"{where} must be a string")
        elif "enum" in schema and value not in schema["enum"]:
            errs.append(f"{where} must be one of {', '.join(schema['enum'])}, got '{value}'")
    elif t == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            errs.append(f"{where} must be an integer")
    return errs[:12]
