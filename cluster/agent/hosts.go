package agent

import (
	"errors"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/cluster/enginehost"
	"github.com/asyncrl/asyncrl/cluster/node"
	"github.com/asyncrl/asyncrl/cluster/rollouthost"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// startEngineHost starts the node's engines (the engine role) and
// subscribes to its control subject (enginehost.Start); a bad
// configuration is ErrConfig.
func startEngineHost(cfg config.Config, name string, bus *natsbus.Bus, log zerolog.Logger, event func(string, ...any)) (*enginehost.Host, error) {
	h, err := enginehost.Start(cfg, name, bus, log, event)
	if errors.Is(err, enginehost.ErrConfig) {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err != nil {
		return nil, err
	}
	return h, nil
}

// startRolloutHost starts following the holder's terms with rollout
// actors of cfg's task (the rollout role, cluster/rollouthost).
func startRolloutHost(cfg config.Config, name string, bus *natsbus.Bus, log zerolog.Logger, event func(string, ...any)) (*rollouthost.Host, error) {
	task, err := node.BuildTask(cfg)
	if err != nil {
		return nil, err
	}
	h, err := rollouthost.Start(rollouthost.Config{Run: cfg, Task: task, Node: name, Bus: bus,
		Logger: log, Event: event})
	if err != nil {
		return nil, err
	}
	return h, nil
}
