package agent

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/asyncrl/asyncrl/internal/realtok"
)

// TestClusterTorchGroupChaosQwen3 (make test-cluster, make
// test-cluster-torch) is TestClusterTorchGroupChaos with the trainer group
// training a Hugging Face model: the random-initialised tiny Qwen3 of
// examples/qwen3-tiny.yaml (model kind hf, the real Qwen3 tokenizer and
// chat template, guess_chat episodes), written by every node from the
// run's seed. Its resume path differs from the built-in model's: after the
// holder's kill the standby's term starts its engines and its group from
// the durable state's config.json and F32 model.safetensors (HF layout)
// instead of model.path, with model.tokenizer's tokenizer. A short run
// (6 steps, the kill after step 2 or 3 is durable): the same checks —
// every step's prompts trained exactly once, every step durable, the
// standby resumed after a holder kill, no lease lost to a rank's or n3's
// death. A random-init model's groups have no reward variance, so
// filter.mode is none (the default filter would drop every group and no
// step would fill). Lines tagged TORCHQWEN3 go to
// bench/results/torch-chaos.md.
func TestClusterTorchGroupChaosQwen3(t *testing.T) {
	e2eEnabled(t)
	yaml := torchGroupYAML(t) + "  learning_rate: 0.0003\n  loss_reduction: sequence_mean\n" +
		fmt.Sprintf("model:\n  arch: qwen3\n  preset: tiny\n  tokenizer: %s\n", realtok.Dir(t, "qwen3")) +
		"rollout:\n  task: guess_chat\n  chat_template: true\n  chat_template_kwargs: '{\"enable_thinking\": false}'\n  n_samples_per_prompt: 4\n" +
		"filter:\n  mode: none\n"
	torchChaosMatrix(t, yaml, 6, func(rng *rand.Rand) int { return 2 + rng.Intn(2) }, "TORCHQWEN3")
}
