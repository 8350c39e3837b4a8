"""Writes tests/testdata/torch_moe/ (a BF16 serving checkpoint of a mixture of
experts written by the torch worker) and tests/testdata/torch_moe_logits.json
(its next-token logits and the routes of every position for a few contexts),
for Go's TestLoadTorchMoECheckpoint (model/moefixture_test.go).
Run: PYTHONPATH=integrations/torch python3 integrations/torch/tests/make_moe_fixture.py"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from asyncrl_worker.model import WindowMLP, load_serving  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = {"vocab_size": 98, "window": 4, "embed_dim": 8, "hidden": 16, "layers": 2, "max_seq_len": 64,
          "experts": 4, "top_k": 2}
CONTEXTS = [[1], [1, 40, 41, 42], [1, 70, 71, 72, 80, 81, 3, 4, 5]]


def main():
    m = WindowMLP(CONFIG)
    m.init_weights(2025)
    with torch.no_grad():
        m.head.weight.mul_(40)
    d = os.path.join(HERE, "testdata", "torch_moe")
    m.save_serving(d, {"version": "0"})
    m = load_serving(d)
    with torch.no_grad():
        cases = [{"tokens": c, "logits": [float(x) for x in m.next_logits(c)],
                  "routes": [int(x) for x in m.routes(c).flatten()]} for c in CONTEXTS]
    with open(os.path.join(HERE, "testdata", "torch_moe_logits.json"), "w") as f:
        json.dump({"checkpoint": "torch_moe", "contexts": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
