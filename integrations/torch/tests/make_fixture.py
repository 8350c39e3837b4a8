"""Writes tests/testdata/torch_serving/ (a BF16 serving checkpoint written by the
torch worker) and tests/testdata/torch_serving_logits.json (its next-token logits
for a few contexts), for a Go test to check model.LoadServing + NextLogits
against. Run: PYTHONPATH=integrations/torch python3 integrations/torch/tests/make_fixture.py"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from asyncrl_worker.model import WindowMLP, load_serving  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = {"vocab_size": 98, "window": 4, "embed_dim": 8, "hidden": 32, "layers": 2, "max_seq_len": 64}
CONTEXTS = [[], [1], [1, 40, 41, 42], [1, 70, 71, 72, 80, 81, 3, 4, 5]]


def expected(model):
    with torch.no_grad():
        return [{"tokens": c, "logits": [float(x) for x in model.next_logits(c)]} for c in CONTEXTS]


def main():
    m = WindowMLP(CONFIG)
    m.init_weights(2024)
    with torch.no_grad():
        m.head.weight.mul_(40)
    d = os.path.join(HERE, "testdata", "torch_serving")
    m.save_serving(d, {"version": "0"})
    with open(os.path.join(HERE, "testdata", "torch_serving_logits.json"), "w") as f:
        json.dump({"checkpoint": "torch_serving", "contexts": expected(load_serving(d))}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
