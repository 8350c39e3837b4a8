package rollouthost

import (
	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/config"
)

// Protocol is the generation API the run's rollouts speak through the
// router, from the run's engines: SGLang's native /generate when every
// engine is an engines.external entry of kind sglang, vLLM's
// /v1/completions when none is (built-in engines, vLLM, and the
// engines.external_urls the run only routes to, which are taken to speak
// vLLM's API); a mix is refused (rollout.ProtocolForKinds).
func Protocol(e config.EnginesConfig) (rollout.Protocol, error) {
	var kinds []string
	for range max(e.Count, 0) {
		kinds = append(kinds, string(config.EngineBuiltin))
	}
	for _, x := range e.External {
		kinds = append(kinds, string(x.Kind))
	}
	for range e.ExternalURLs {
		kinds = append(kinds, string(config.EngineVLLM))
	}
	return rollout.ProtocolForKinds(kinds)
}
