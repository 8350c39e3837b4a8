package driver

import (
	"fmt"
	"strconv"
	"strings"
)

// Release is an engine release number as the engine reports it (vLLM's
// GET /version "0.14.1", "0.11.0rc2.dev45+g…"; SGLang's version field
// "0.5.3.post1"). Only major.minor.patch take part in comparisons; a
// development or release-candidate build compares as the release it leads
// to (a main-branch build of 0.17.0.dev is treated as 0.17.0, which is
// what the feature table's "since" rows name).
type Release struct {
	Major, Minor, Patch int
	// Raw is the string the engine reported.
	Raw string
}

// ParseRelease reads a version string: an optional leading "v", then
// digits separated by dots (one to three of them), then anything (rc, dev,
// post, a local "+g<sha>" suffix), which is kept in Raw only.
func ParseRelease(s string) (Release, error) {
	raw := strings.TrimSpace(s)
	t := strings.TrimPrefix(raw, "v")
	var nums []int
	for len(nums) < 3 {
		i := 0
		for i < len(t) && t[i] >= '0' && t[i] <= '9' {
			i++
		}
		if i == 0 {
			break
		}
		n, err := strconv.Atoi(t[:i])
		if err != nil {
			return Release{}, fmt.Errorf("engine version %q: %w", raw, err)
		}
		nums = append(nums, n)
		t = t[i:]
		if !strings.HasPrefix(t, ".") {
			break
		}
		t = t[1:]
	}
	if len(nums) == 0 {
		return Release{}, fmt.Errorf("engine version %q is not a release number (want e.g. 0.14.1)", raw)
	}
	for len(nums) < 3 {
		nums = append(nums, 0)
	}
	return Release{Major: nums[0], Minor: nums[1], Patch: nums[2], Raw: raw}, nil
}

// MustRelease parses a release written in this package's tables; it
// panics on a typo (a table bug, caught by the tests).
func MustRelease(s string) Release {
	r, err := ParseRelease(s)
	if err != nil {
		panic(err)
	}
	return r
}

// Less orders releases by major, minor, patch.
func (r Release) Less(o Release) bool {
	if r.Major != o.Major {
		return r.Major < o.Major
	}
	if r.Minor != o.Minor {
		return r.Minor < o.Minor
	}
	return r.Patch < o.Patch
}

// AtLeast reports r >= o.
func (r Release) AtLeast(o Release) bool { return !r.Less(o) }

// String is major.minor.patch.
func (r Release) String() string { return fmt.Sprintf("%d.%d.%d", r.Major, r.Minor, r.Patch) }

// Feature names one thing a run may need of an engine whose presence
// depends on the engine's release (and sometimes its flags).
type Feature string

// FeatureRow says from which release an engine kind has a feature, and
// where that fact comes from upstream.
type FeatureRow struct {
	Kind    Kind
	Feature Feature
	// Since is the first release that has it.
	Since Release
	// Source cites the upstream PR, file and commit the row rests on.
	Source string
	// Note says what an engine without it does (what the driver does
	// instead, or why a run must refuse it).
	Note string
}

// Capabilities is what one engine process offers a run: its release and
// the features that release has, plus what the running server reports of
// its own configuration where it does.
type Capabilities struct {
	Kind Kind
	// Release is the engine's release; Known is false when the engine
	// would not say (no version route answered) — features are then
	// assumed present and every Check row that depends on one says so.
	Release Release
	Known   bool
	// features holds the table's verdict per feature for Release.
	features map[Feature]bool
	// Server holds what the server reports of its own configuration
	// (vLLM /server_info, SGLang /get_server_info), by key, as strings;
	// nil when it reports nothing.
	Server map[string]string
}

// Has reports whether the engine has f: true when the release is unknown
// (the engine is trusted; Check marks it), else the table's verdict.
func (c Capabilities) Has(f Feature) bool {
	if !c.Known {
		return true
	}
	return c.features[f]
}

// CapabilitiesFor derives an engine's capabilities from its release by the
// table rows of its kind.
func CapabilitiesFor(kind Kind, rel Release, table []FeatureRow) Capabilities {
	c := Capabilities{Kind: kind, Release: rel, Known: true, features: map[Feature]bool{}}
	for _, row := range table {
		if row.Kind == kind {
			c.features[row.Feature] = rel.AtLeast(row.Since)
		}
	}
	return c
}

// UnknownCapabilities is the capabilities of an engine whose release is
// unknown: every feature assumed.
func UnknownCapabilities(kind Kind) Capabilities { return Capabilities{Kind: kind} }

// Row returns the table row of (kind, f), or false when the table has none.
func Row(table []FeatureRow, kind Kind, f Feature) (FeatureRow, bool) {
	for _, r := range table {
		if r.Kind == kind && r.Feature == f {
			return r, true
		}
	}
	return FeatureRow{}, false
}

// Verdict grades one Finding.
type Verdict string

// The verdicts: Fail means a run with these needs would fail against the
// engine; Warn that it would run with a cost or a risk the Detail names.
const (
	VerdictPass Verdict = "PASS"
	VerdictWarn Verdict = "WARN"
	VerdictFail Verdict = "FAIL"
	VerdictInfo Verdict = "INFO"
)

// Finding is one checked fact about an engine: what was checked, the
// verdict, what was seen, and the flag, variable or release that fixes a
// WARN or FAIL.
type Finding struct {
	Check   string
	Verdict Verdict
	Detail  string
	Fix     string
}

// Needs is what one run asks of an engine (from its config): Check grades
// the engine against these, so `asyncrl engines check --config` and the
// run's preflight fail exactly where the run would.
type Needs struct {
	// Model is the served model name the run sends (engines.served_model_name).
	Model string
	// PauseMode is the mode weight swaps pause with (trainer.pause_mode).
	PauseMode PauseMode
	// WeightLoad is how versions reach the engine: "full", "delta" or "lora".
	WeightLoad string
	// LoRA: adapters are loaded at run time (weight_load lora, Tinker).
	LoRA bool
	// Routes: the run replays MoE routes (R3, return_routed_experts);
	// MultiTurn: episodes have more than one turn (routes then start at
	// routed_experts_prompt_start).
	Routes    bool
	MultiTurn bool
	// SupportTopK is the number of top logprobs asked per token for sample
	// support sets (support_from_logprobs); 0 when none are.
	SupportTopK int
}

// MinRelease names the first release of kind that has f, as the table
// says ("" when the table has no row): what a refusal tells the user to
// upgrade to.
func MinRelease(table []FeatureRow, kind Kind, f Feature) string {
	if r, ok := Row(table, kind, f); ok {
		return r.Since.String()
	}
	return ""
}

// ServerInt reads an integer the server reported of its configuration
// (Capabilities.Server); ok is false when it reported none or not a number.
func (c Capabilities) ServerInt(key string) (int, bool) {
	s, ok := c.Server[key]
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// Describe is the release as a finding names it: "vllm 0.14.1", or
// "vllm (release unknown)".
func (c Capabilities) Describe() string {
	switch {
	case !c.Known:
		return string(c.Kind) + " (release unknown)"
	case c.Release.Raw != "":
		return string(c.Kind) + " " + c.Release.Raw
	}
	return string(c.Kind) + " " + c.Release.String()
}
