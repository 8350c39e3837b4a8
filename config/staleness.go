package config

// StalenessMeasure is how a group's staleness is measured against
// trainer.max_staleness_steps.
type StalenessMeasure string

// Staleness measures.
const (
	// MeasureScheduled is SkyRL's: global_step − the step at which the
	// group was scheduled (admitted).
	MeasureScheduled StalenessMeasure = "scheduled"
	// MeasureToken is asyncrl's stricter one: the trainer's version − the
	// policy version of the group's oldest generated token; it also catches
	// an engine that served older weights than the trainer held.
	MeasureToken StalenessMeasure = "token"
)

// Values lists the staleness measures.
func (StalenessMeasure) Values() []string { return []string{"scheduled", "token"} }

// StalenessConfig configures how the staleness bound is measured (the
// bound itself, S, is trainer.max_staleness_steps; what happens to a group
// over it is trainer.stale_policy).
type StalenessConfig struct {
	// Measure picks the staleness measure the controller enforces.
	Measure StalenessMeasure `yaml:"measure" doc:"scheduled (SkyRL: global_step − the step the group was scheduled at) or token (trainer version − the group's oldest token version; stricter when an engine lags)"`
}

// DefaultStaleness measures as SkyRL does.
func DefaultStaleness() StalenessConfig { return StalenessConfig{Measure: MeasureScheduled} }

// Validate checks the staleness section.
func (c StalenessConfig) Validate() error {
	v := checker{section: "staleness"}
	v.checkEnums(c)
	return v.err()
}
