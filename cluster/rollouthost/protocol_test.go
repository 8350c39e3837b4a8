package rollouthost

import (
	"testing"

	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/config"
)

// The run's engines decide the rollouts' protocol: all-SGLang runs speak
// /generate, runs without SGLang /v1/completions, and a mix is refused
// (the router would send turns of one protocol to engines of the other).
func TestProtocolFromEngines(t *testing.T) {
	sg := config.ExternalEngine{URL: "http://a:1", Kind: config.EngineSGLang}
	vl := config.ExternalEngine{URL: "http://b:1", Kind: config.EngineVLLM}
	for _, tc := range []struct {
		e    config.EnginesConfig
		want rollout.Protocol
		err  bool
	}{
		{config.EnginesConfig{External: []config.ExternalEngine{sg, sg}}, rollout.ProtocolSGLang, false},
		{config.EnginesConfig{Count: 2}, rollout.ProtocolCompletions, false},
		{config.EnginesConfig{External: []config.ExternalEngine{vl}}, rollout.ProtocolCompletions, false},
		{config.EnginesConfig{Count: 1, External: []config.ExternalEngine{sg}}, "", true},
		{config.EnginesConfig{External: []config.ExternalEngine{sg}, ExternalURLs: []string{"http://c:1"}}, "", true},
	} {
		got, err := Protocol(tc.e)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%+v: %q %v", tc.e, got, err)
		}
	}
}
