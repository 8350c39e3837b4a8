#!/usr/bin/env python3
"""Reference chat-template renderer: Python's jinja2 in the environment
transformers renders chat templates with, so asyncrl's Go renderer
(model/chattemplate) can be compared with it byte for byte.

The environment follows transformers' _compile_jinja_template in
src/transformers/utils/chat_template_utils.py
(huggingface/transformers@5e43e2e892453b405ce6d2cb94387b3a3213f30a):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[loopcontrols]), a tojson filter that is json.dumps with
ensure_ascii=False (no HTML escaping) and the indent/separators/sort_keys
options, and the globals raise_exception and strftime_now. The render
variables follow apply_chat_template in tokenization_utils_base.py at the
same commit: messages, tools, documents, add_generation_prompt, then the
tokenizer's special tokens map overridden by the caller's extra variables
(template_kwargs = {**self.special_tokens_map, **kwargs}).

Differences from transformers, on purpose: strftime_now reads the clock given
in the input ("now", ISO 8601) instead of datetime.now(), so a render is
reproducible; transformers' {% generation %} tracking extension is not
loaded (no template of the ones asyncrl tests uses it).

Input (stdin, JSON):
  {"template": str, "special_tokens": {name: str | [str]}, "now": str?,
   "cases": [{"name": str, "messages": [...], "tools": [...] | null,
              "documents": [...] | null, "add_generation_prompt": bool,
              "vars": {...}}]}
Output (stdout, JSON): [{"name": str, "text": str} | {"name": str, "error": str}]
JSON objects keep their key order (Python dicts are ordered), as a chat
request decoded by transformers' callers does.
"""

import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def build_env(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    req = json.load(sys.stdin)
    now = datetime.fromisoformat(req.get("now") or "2025-01-02T03:04:05")
    env = build_env(now)
    tmpl = env.from_string(req["template"])
    out = []
    for case in req["cases"]:
        kwargs = dict(req.get("special_tokens") or {})
        kwargs.update(case.get("vars") or {})
        try:
            text = tmpl.render(
                messages=case["messages"],
                tools=case.get("tools"),
                documents=case.get("documents"),
                add_generation_prompt=bool(case.get("add_generation_prompt")),
                **kwargs,
            )
            out.append({"name": case["name"], "text": text})
        except Exception as e:  # a template's raise_exception, a type error, ...
            out.append({"name": case["name"], "error": f"{type(e).__name__}: {e}"})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
