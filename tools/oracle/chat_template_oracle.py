#!/usr/bin/env python3
"""Renders chat templates with jinja2 configured the way transformers' apply_chat_template does.

Used live by tests/unit/test_chat_template.cpp (python3 + jinja2 3.x only; no transformers
needed). Input: a JSON file holding a list of cases {"template": str, "context": {...},
"now": "YYYY-MM-DDTHH:MM:SS" (optional)}. Output (stdout, ASCII JSON): a list with, per case,
{"ok": true, "text": rendered} or {"ok": false, "error": message, "kind": exception class name,
"lineno": line or null}.

The environment mirrors transformers (src/transformers/utils/chat_template_utils.py):
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the loopcontrols extension; a
`generation` block tag that renders its body (transformers' AssistantTracker); globals
raise_exception(message) -> TemplateError(message) and strftime_now(format) -> the current time
formatted; and a tojson filter that is json.dumps(x, ensure_ascii=False, indent=indent,
separators=separators, sort_keys=sort_keys). `now` freezes strftime_now for reproducible tests.
"""
import datetime
import json
import sys

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError as exc:  # the C++ test turns this into a failure with this message
    sys.stdout.write(json.dumps({"fatal": f"jinja2 is not importable: {exc}"}))
    sys.exit(2)


class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %}: output its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env(now):
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        moment = datetime.datetime.fromisoformat(now) if now else datetime.datetime.now()
        return moment.strftime(format)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(case):
    try:
        env = make_env(case.get("now"))
        text = env.from_string(case["template"]).render(**case.get("context", {}))
        return {"ok": True, "text": text}
    except Exception as exc:  # every failure is an expected outcome the C++ side must match
        return {"ok": False, "error": str(exc), "kind": type(exc).__name__,
                "lineno": getattr(exc, "lineno", None)}


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    sys.stdout.write(json.dumps([render(c) for c in cases], ensure_ascii=True))


if __name__ == "__main__":
    main()
