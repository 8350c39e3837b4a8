package config

// LogConfig configures logging; the --log-level and --log-format flags
// override it.
type LogConfig struct {
	// Level is the minimum level logged.
	Level LogLevel `yaml:"level" doc:"minimum level logged"`
	// Format is the output format (auto = console on a terminal, else JSON).
	Format LogFormat `yaml:"format" doc:"log format: auto (console on a terminal, JSON otherwise), json or console"`
}

// DefaultLog logs at info, formatted for wherever stderr goes.
func DefaultLog() LogConfig { return LogConfig{Level: LevelInfo, Format: FormatAuto} }

// Validate checks the log section.
func (c LogConfig) Validate() error {
	v := checker{section: "log"}
	v.checkEnums(c)
	return v.err()
}

// MetricsConfig configures the Prometheus endpoint.
type MetricsConfig struct {
	// Listen is the /metrics address; empty serves no metrics.
	Listen string `yaml:"listen" doc:"Prometheus /metrics address (host:port); empty = off"`
}

// DefaultMetrics serves no metrics (the run report still has them); set
// listen to scrape a long run.
func DefaultMetrics() MetricsConfig { return MetricsConfig{} }

// Validate checks the metrics section.
func (c MetricsConfig) Validate() error {
	v := checker{section: "metrics"}
	v.hostPort("listen", c.Listen, true)
	return v.err()
}
