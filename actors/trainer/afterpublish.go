package trainer

import "fmt"

// AfterPublishError is a Publisher's error when the version itself was
// published and what the run does after each publish failed (What: the
// cluster term's checkpoint of the version, Options.AfterStep). The step
// rule retries it as any failed publish (publisher.attempts), and the
// give-up names What instead of saying the version was not published.
type AfterPublishError struct {
	Version int64
	What    string // e.g. "checkpoint"
	Err     error
}

func (e *AfterPublishError) Error() string {
	return fmt.Sprintf("%s of version %d failed (the version is published): %v", e.What, e.Version, e.Err)
}

func (e *AfterPublishError) Unwrap() error { return e.Err }
