package publisher

import (
	"context"

	"github.com/asyncrl/asyncrl/model"
)

// Publisher makes a new policy version live on the engines. The trainer
// actor calls it after each step (actors/trainer); cluster/weightsync's
// Sync publishes deltas or full checkpoints through the Shell, the node's
// in-process publisher pauses each engine and swaps the weights, and a
// remote worker's BusPublisher (bus.go) announces a directory and
// waits for an ack. Publish returns once version is live (routable on
// some engine) or with the error that kept it from being live; it is
// called for each version once, in order, and again with the same
// version after it failed.
type Publisher interface {
	Publish(ctx context.Context, w Weights, version int64) error
}

// Weights is one version's serving weights as a trainer's Stepper hands
// them to its Publisher: the built-in policy in memory (Model), a serving checkpoint
// directory in Hugging Face layout (Dir) — what a trainer child writes for
// any architecture (docs/models.md) — or both (a child training the
// built-in policy: its directory, loaded). A Publisher that needs bytes on
// disk uses Dir when set and writes Model otherwise; one that swaps models
// in memory uses Model when set and loads Dir otherwise.
type Weights struct {
	// Model is the built-in policy's BF16 serving copy; nil for other
	// architectures.
	Model *model.Model
	// Dir is a complete serving checkpoint (config.json, safetensors,
	// generation and tokenizer files); "" when only Model is known. The
	// Stepper owns it: a Publisher reads it and never modifies it.
	Dir string
}

// InMemory is w for the built-in policy in memory.
func InMemory(m *model.Model) Weights { return Weights{Model: m} }
