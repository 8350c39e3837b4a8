package config

import "regexp"

// RunConfig identifies a run and says how long it lasts and where its files go.
type RunConfig struct {
	// ID names the run; it becomes part of bus subjects and directory names,
	// so it is limited to letters, digits, '-' and '_' (at most 64).
	ID string `yaml:"id" doc:"run id; part of bus subjects and directory names ([A-Za-z0-9_-], at most 64 characters)"`
	// Seed seeds every random choice of the run (prompt order, sampling,
	// initial weights), so two runs with the same config and seed match.
	Seed int64 `yaml:"seed" doc:"seed for every random choice of the run (prompt order, sampling, initial weights)"`
	// Steps is the number of trainer steps (policy versions) to run.
	Steps int `yaml:"steps" doc:"number of trainer steps (policy versions) to run"`
	// ReportDir receives the run report (metrics, summary, effective config).
	ReportDir string `yaml:"report_dir" doc:"directory for the run report (metrics, summary, effective config)"`
	// DataDir holds the run's durable state (JetStream store, weights) when
	// bus.jetstream_dir or publisher.sync_dir are left empty.
	DataDir string `yaml:"data_dir" doc:"directory for durable state; default parent of bus.jetstream_dir and publisher.sync_dir"`
}

// DefaultRun is sized for `make run`: 30 steps of the tiny policy on the
// default gridwalk task finish in well under a minute on 2 CPU cores and
// are enough to see the reward rise (issue 5; measured in docs/run.md). Its
// directories are under runs/, which the repository's .gitignore ignores,
// so `make run` leaves the checkout clean.
func DefaultRun() RunConfig {
	return RunConfig{
		ID:        "local",
		Seed:      1,
		Steps:     30,
		ReportDir: "runs/report",
		DataDir:   "runs/data",
	}
}

var runIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Validate checks the run section.
func (c RunConfig) Validate() error {
	v := checker{section: "run"}
	if !runIDPattern.MatchString(c.ID) {
		v.fail("id", "%q must be 1–64 characters of A-Z, a-z, 0-9, '-' or '_'", c.ID)
	}
	v.atLeast("steps", int64(c.Steps), 1)
	v.notEmpty("report_dir", c.ReportDir)
	v.notEmpty("data_dir", c.DataDir)
	return v.err()
}
