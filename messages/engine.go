package messages

// Engine telemetry consumed by the router (health gates routing, load
// drives sticky_least_loaded and the KV-pressure view).

// EngineHealth is an engine's routability state. Version: the version it serves.
type EngineHealth struct {
	Header
	Engine   string `cbor:"10,keyasint,omitempty"`
	URL      string `cbor:"11,keyasint,omitempty"`
	Healthy  bool   `cbor:"12,keyasint,omitempty"`
	Paused   bool   `cbor:"13,keyasint,omitempty"`
	Updating bool   `cbor:"14,keyasint,omitempty"`
	Draining bool   `cbor:"15,keyasint,omitempty"`
	// Reason explains an unhealthy state (probe error, …).
	Reason string `cbor:"16,keyasint,omitempty"`
}

func (EngineHealth) Kind() Kind { return KindEngineHealth }
func (m EngineHealth) String() string {
	return newLine("EngineHealth", m.Header).str("engine", m.Engine).str("url", m.URL).
		boolean("healthy", m.Healthy).boolean("paused", m.Paused).boolean("updating", m.Updating).
		boolean("draining", m.Draining).str("reason", m.Reason).done()
}

// EngineLoad is a periodic load sample (vLLM num_requests_running/waiting,
// kv_cache_usage_perc). Version: the version it serves.
type EngineLoad struct {
	Header
	Engine  string `cbor:"10,keyasint,omitempty"`
	URL     string `cbor:"11,keyasint,omitempty"`
	Running int32  `cbor:"12,keyasint,omitempty"`
	Waiting int32  `cbor:"13,keyasint,omitempty"`
	// KVUsage is the KV-cache usage fraction in [0, 1].
	KVUsage        float64 `cbor:"14,keyasint,omitempty"`
	InflightTokens int64   `cbor:"15,keyasint,omitempty"`
	// Sessions is the number of sticky sessions the router maps to it.
	Sessions int32 `cbor:"16,keyasint,omitempty"`
}

func (EngineLoad) Kind() Kind { return KindEngineLoad }
func (m EngineLoad) String() string {
	return newLine("EngineLoad", m.Header).str("engine", m.Engine).str("url", m.URL).
		i64("running", int64(m.Running)).i64("waiting", int64(m.Waiting)).f64("kv", m.KVUsage).
		i64("inflight_tokens", m.InflightTokens).i64("sessions", int64(m.Sessions)).done()
}
