package node

import (
	"errors"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/cluster/enginehost"
	"github.com/asyncrl/asyncrl/cluster/rollouthost"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// engineHost is the engine role (cluster/enginehost) as the agent runs it.
type engineHost struct{ *enginehost.Host }

// startEngineHost starts the node's engines and subscribes to its control
// subject (enginehost.Start); a bad configuration is ErrAgentConfig.
func startEngineHost(cfg config.Config, node string, bus *natsbus.Bus, log zerolog.Logger, event func(string, ...any)) (*engineHost, error) {
	h, err := enginehost.Start(cfg, node, bus, log, event)
	if errors.Is(err, enginehost.ErrConfig) {
		return nil, fmt.Errorf("%w: %w", ErrAgentConfig, err)
	}
	if err != nil {
		return nil, err
	}
	return &engineHost{h}, nil
}

func (h *engineHost) endpoints() map[string]string { return h.Endpoints() }
func (h *engineHost) stop()                        { h.Stop() }

// engineEndpointKey is the gossip metadata key of engine i's URL.
func engineEndpointKey(i int) string { return enginehost.EndpointKey(i) }

// hostedEngineName is the cluster-wide name of a node's engine.
func hostedEngineName(node, key string) string { return enginehost.EngineName(node, key) }

// termToken is the token of a term run id <run>-t<token> (0 if malformed).
func termToken(baseRun, term string) uint64 { return enginehost.TermToken(baseRun, term) }

// rolloutHost is the rollout role (cluster/rollouthost) as the agent runs
// it.
type rolloutHost struct{ *rollouthost.Host }

// startRolloutHost starts following the holder's terms with rollout
// actors of cfg's task.
func startRolloutHost(cfg config.Config, node string, replicas int, bus *natsbus.Bus, log zerolog.Logger, event func(string, ...any)) (*rolloutHost, error) {
	task, err := buildTask(cfg)
	if err != nil {
		return nil, err
	}
	h, err := rollouthost.Start(rollouthost.Config{Run: cfg, Task: task, Node: node, Replicas: replicas, Bus: bus,
		Logger: log, Event: event})
	if err != nil {
		return nil, err
	}
	return &rolloutHost{h}, nil
}

func (h *rolloutHost) stop() { h.Stop() }
