#!/usr/bin/env bash
# How often does a warmed-up checkpoint write a well-formed calc call, by
# sampling temperature? (issue 33; bench/results/tool-env.md.) Serves the
# checkpoint with the built-in engine (Qwen3 tokenizer and chat template),
# asks N calculator questions per temperature on /v1/chat/completions with
# the calc tool announced — the first turn of a calculator episode, the
# system message and tools of tasks/toolenv — and counts the replies whose
# text holds a Hermes call with calc and a string expr (a Python check of
# the form chatenv.ParseToolCalls reads, not the parser itself: RL's
# summary.json counts are the authority), the calls with the question's own
# expression, and the runaway expression of the demonstrations.
#
#   bench/tool-env-sample.sh SERVING_DIR [N] [TEMPS]    e.g. runs/tool-qwen3/sft/latest/serving 64 "1 0.7 0.5 0.3"
#
# SHOW=K prints the first K replies of each temperature (to stderr).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$1
n=${2:-64}
temps=${3:-"1 0.7 0.5 0.3"}
bin=${ASYNCRL_BIN:-}
if [ -z "$bin" ]; then
	bin=$(mktemp -d)/asyncrl
	"${GO:-go}" build -o "$bin" ./cmd/asyncrl
fi
port=${PORT:-18431}
log=$(mktemp)
"$bin" engine --weights "$dir" --tokenizer .cache/tokenizers/qwen3 --listen "127.0.0.1:$port" >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 120); do
	curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
	kill -0 "$pid" 2>/dev/null || { cat "$log"; exit 1; }
	sleep 1
done

/usr/bin/python3 - "$port" "$n" "${SHOW:-0}" $temps <<'EOF'
import json
import random
import re
import sys
import urllib.request

port, n, show, temps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), [float(t) for t in sys.argv[4:]]
# tasks/toolenv: DefaultConfig's system message and Tools
system = "Use the calc tool to compute, then answer with the number only."
tools = [{"type": "function", "function": {"name": "calc", "description": "Evaluate an arithmetic expression.",
          "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]}}}]
call = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
base = f"http://127.0.0.1:{port}"
model = json.load(urllib.request.urlopen(f"{base}/v1/models", timeout=30))["data"][0]["id"]
rng = random.Random(7)
qs = [f"{rng.randint(0, 99)}{rng.choice('+-')}{rng.randint(0, 99)}" for _ in range(n)]
print("| temperature | replies | with <tool_call> | well-formed calc call | question's expression | runaway | answered at once |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for t in temps:
    tagged = good = right = runaway = answered = 0
    for i, q in enumerate(qs):
        body = {"model": model, "messages": [{"role": "system", "content": system}, {"role": "user", "content": f"What is {q}?"}],
                "tools": tools, "temperature": t, "max_tokens": 64}
        req = urllib.request.Request(f"{base}/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        text = json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]["message"]["content"] or ""
        if i < show:
            print(f"T {t} {q}: {text!r}", file=sys.stderr)
        blocks = call.findall(text)
        if "<tool_call>" in text:
            tagged += 1
        else:
            answered += 1
        ok = False
        for b in blocks:
            try:
                c = json.loads(b)
                ok = c.get("name") == "calc" and isinstance(c.get("arguments", {}).get("expr"), str)
            except (ValueError, AttributeError):
                ok = False
            if not ok:
                break
        if blocks and ok:
            good += 1
            expr = json.loads(blocks[0])["arguments"]["expr"]
            right += expr == q
            runaway += expr == "9**9**9**9"
    print(f"| {t} | {n} | {tagged} | {good} = {good / n:.2f} | {right} | {runaway} | {answered} |")
EOF
