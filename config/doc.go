// Package config describes a whole asyncrl run in one YAML file.
//
// Config has one struct per component (Run, Bus, Engines, Router, Rollout,
// Filter, Trainer, Publisher, Cluster, Log, Metrics). Every field has a
// snake_case yaml key, a doc comment and a `doc` tag that `asyncrl config
// print-defaults` prints above it. Default() and the per-component
// Default…() constructors return the shipped values, sized so that `make
// run` finishes a short run on 2 CPU cores; each constructor says why.
//
// Loading is strict. Load(path) starts from Default() and overlays the
// file; keys absent from the file (or written with no value) keep their
// defaults. The file is walked as a yaml.Node tree against the structs, so
// every problem is reported with its file, line and dotted key path:
//
//	run.yaml:7: trainer.max_stalness_steps: unknown key (did you mean max_staleness_steps?)
//	run.yaml:3: router.session_ttl: want a duration such as "90s", got 7200
//	run.yaml:4: router.policy: "fastest" is not one of bounded_sticky, sticky_least_loaded, consistent_hash, round_robin, least_request
//
// Every such error is an *Error whose Kind is ErrUnknownKey, ErrType,
// ErrInvalid or ErrSyntax; a missing file wraps fs.ErrNotExist. Load and
// Validate report all problems at once, one per line. Durations are Go
// duration strings ("90s", "2h"); a bare number is refused because it would
// silently mean nanoseconds.
//
// Validate checks each field's range or allowed values and the cross-field
// rules, among them SkyRL's fully-async staleness rule
// mini_batch_size ≤ num_parallel_generation_workers ≤
// mini_batch_size·(max_staleness_steps+1).
//
// Marshal writes a Config as commented YAML that Parse reads back to an
// equal Config. The package does no I/O other than Load's one file read.
package config
