package transport

import (
	"fmt"
	"strings"
)

// SubjectRoot is the first token of every asyncrl subject. Keeping one root
// lets an operator grant or mirror a whole deployment with "asyncrl.>".
const SubjectRoot = "asyncrl"

// RootWildcard matches every subject of every run: asyncrl.>.
const RootWildcard = SubjectRoot + ".>"

// Topic is the second-level token of a subject: asyncrl.<run>.<topic>[.<more>…].
type Topic string

// Topics of the subject scheme: asyncrl.<run>.<topic>[.<more>…]. A run's
// plan (RunPlan, Plan(run)) spells every subject, stream and bucket of the
// run from them; nothing outside this package builds a subject. The plan,
// generated from RunPlan.PlanEntries (plan_test.go fails when this table
// and the code differ; `go test ./transport -run TestPlanDoc -update`
// rewrites it):
//
//	name                                   kind          messages                                         from                           to
//	asyncrl.<run>.prompts                  queue         PromptAssigned                                   controller                     rollout actors (queue "rollout")
//	asyncrl.<run>.trajectories             stream        GroupReady                                       rollout actors (batch inline)  sampling actor (GroupStream); trainer (reads by sequence)
//	asyncrl.<run>.trajectories.aborted     pub/sub       EpisodeAborted                                   rollout actors, term holder    controller
//	asyncrl.<run>.groups.kept              pub/sub       GroupReady                                       sampling actor (by reference)  controller
//	asyncrl.<run>.groups.filtered          pub/sub       GroupFiltered                                    sampling actor                 controller
//	asyncrl.<run>.groups.>                 pattern                                                                                       controller (Kept and Filtered)
//	asyncrl.<run>.train                    pub/sub       TrainBatch                                       controller (references)        trainer (fetches the groups)
//	asyncrl.<run>.steps                    pub/sub       StepDone                                         trainer                        controller, publisher, observers
//	asyncrl.<run>.weights                  pub/sub       WeightsPublished, MinVersionSet                  trainer, publisher             discovery watcher, observers
//	asyncrl.<run>.capacity                 pub/sub       CapacityChanged                                  controller                     observers
//	asyncrl.<run>.ledger                   stream        PromptLedger                                     controller, rollout, term      ledger (LedgerStream); sampling actor (deletes a settled group from GroupStream)
//	asyncrl.<run>.ledger.groups            stream        GroupAccepted, GroupRequeued, SamplingExhausted  controller                     ledger (LedgerStream)
//	asyncrl.<run>.ledger.>                 pattern                                                                                       LedgerStream (with Ledger)
//	asyncrl.<run>.engines.<id>.health      pub/sub       EngineHealth                                     engine host                    discovery watcher, router
//	asyncrl.<run>.engines.<id>.load        pub/sub       EngineLoad                                       engine host                    discovery watcher, router
//	asyncrl.<run>.engines.<id>.ack         pub/sub       EngineVersionAck                                 engine's weight-sync agent     publisher
//	asyncrl.<run>.engines.*.ack            pattern                                                                                       publisher (every engine's acks)
//	asyncrl.<run>.engines.*.*              pattern                                                                                       discovery watcher
//	asyncrl.<run>.turns.<id>               pub/sub       TurnRequest                                      router shell (simulator only)  engine
//	asyncrl.<run>.turns.results            pub/sub       TurnResult                                       engines (simulator only)       router shell
//	asyncrl.<run>.turns.*                  pattern                                                                                       simulator's message faults
//	asyncrl.<run>.control.term             pub/sub       TermAnnounce                                     trainer lease holder           rollout hosts
//	asyncrl.<run>.control.rollouts.<node>  pub/sub       RolloutStatus                                    rollout host                   term holder
//	asyncrl.<run>.control.rollouts.*       pattern                                                                                       term holder
//	asyncrl.<run>.control.engines.<node>   request       LoadWeights                                      term's publisher               engine host
//	asyncrl.<run>.control.engines.*        pattern                                                                                       NATS permissions
//	asyncrl.<run>.control.leaving          pub/sub       NodeLeaving                                      a node stopping                every node
//	asyncrl.<run>.control.ranks.<node>     request       RankRequest (start, frame, stop)                 term holder                    rank host
//	asyncrl.<run>.control.ranks.*          pattern                                                                                       NATS permissions
//	asyncrl-durable.<run>.groups           stream        GroupReady (raw)                                 cluster/ledger buffer          cluster/ledger (DurableGroupStream)
//	ledger-<run>                           stream name                                                    pipeline                       Ledger, LedgerAll
//	groups-<run>                           stream name                                                    pipeline, rollout hosts        Trajectories (consumer "sampling")
//	asyncrl_<run>_groupbuf                 stream name                                                    cluster/ledger                 DurableGroups
//	asyncrl_<run>_prompts                  KV bucket                                                      cluster/ledger                 durable prompt ledger
//	asyncrl_<run>_progress                 KV bucket                                                      cluster/ledger                 fenced trainer progress
//	asyncrl-ckpt-<run>                     object store                                                   cluster/ckpt                   trainer checkpoints
//	asyncrl-weights-<run>                  object store                                                   cluster/weightsync             a term's weights (base, deltas)
//
// Subscribers of a whole run use RunWildcard ("asyncrl.<run>.>"). The
// topics sessions and transfers are reserved: no run publishes on them
// today.
const (
	TopicPrompts      Topic = "prompts"
	TopicTurns        Topic = "turns"
	TopicTrajectories Topic = "trajectories"
	TopicGroups       Topic = "groups"
	TopicTrain        Topic = "train"
	TopicSteps        Topic = "steps"
	TopicWeights      Topic = "weights"
	TopicEngines      Topic = "engines"
	TopicSessions     Topic = "sessions"
	TopicCapacity     Topic = "capacity"
	TopicLedger       Topic = "ledger"
	TopicControl      Topic = "control"
	TopicTransfers    Topic = "transfers"
)

// EngineTopic is the per-engine suffix under asyncrl.<run>.engines.<id>.
type EngineTopic string

// Per-engine topics.
const (
	EngineHealth EngineTopic = "health"
	EngineLoad   EngineTopic = "load"
	EngineAck    EngineTopic = "ack"
)

// Topics lists every top-level topic, in the order of the table above.
func Topics() []Topic {
	return []Topic{TopicPrompts, TopicTurns, TopicTrajectories, TopicGroups, TopicTrain, TopicSteps,
		TopicWeights, TopicEngines, TopicSessions, TopicCapacity, TopicLedger, TopicControl, TopicTransfers}
}

func knownTopic(t Topic) bool {
	for _, k := range Topics() {
		if k == t {
			return true
		}
	}
	return false
}

// ValidToken reports whether tok can be one token of a subject, a run id, a
// node id, a stream name or a durable name: non-empty, only ASCII letters,
// digits, '-' and '_'. Dots, spaces and wildcards would change the meaning of
// a subject, so they are refused rather than escaped.
func ValidToken(tok string) error {
	if tok == "" {
		return fmt.Errorf("%w: empty token", ErrBadSubject)
	}
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return fmt.Errorf("%w: token %q has %q at %d (allowed: letters, digits, '-', '_')", ErrBadSubject, tok, c, i)
		}
	}
	return nil
}

// Subject builds asyncrl.<run>.<topic>[.<more>…] and validates every token.
func Subject(run string, topic Topic, more ...string) (string, error) {
	if err := ValidToken(run); err != nil {
		return "", fmt.Errorf("run id: %w", err)
	}
	if !knownTopic(topic) {
		return "", fmt.Errorf("%w: unknown topic %q", ErrBadSubject, topic)
	}
	if topic == TopicEngines && len(more) != 2 {
		return "", fmt.Errorf("%w: engines subjects are engines.<id>.<health|load|ack>, got %d extra tokens", ErrBadSubject, len(more))
	}
	for _, m := range more {
		if err := ValidToken(m); err != nil {
			return "", err
		}
	}
	return join(run, topic, more...), nil
}

// MustSubject is Subject for constant arguments; it panics on a bad token.
func MustSubject(run string, topic Topic, more ...string) string {
	s, err := Subject(run, topic, more...)
	if err != nil {
		panic(err)
	}
	return s
}

// EngineSubject builds asyncrl.<run>.engines.<engineID>.<kind>.
func EngineSubject(run, engineID string, kind EngineTopic) (string, error) {
	switch kind {
	case EngineHealth, EngineLoad, EngineAck:
	default:
		return "", fmt.Errorf("%w: unknown engine topic %q (allowed: health, load, ack)", ErrBadSubject, kind)
	}
	return Subject(run, TopicEngines, engineID, string(kind))
}

// RunWildcard is the pattern matching every subject of run: asyncrl.<run>.>.
func RunWildcard(run string) (string, error) {
	if err := ValidToken(run); err != nil {
		return "", fmt.Errorf("run id: %w", err)
	}
	return SubjectRoot + "." + run + ".>", nil
}

// EngineWildcard is the pattern matching one kind of announcement from every
// engine of run, asyncrl.<run>.engines.*.<kind>, or every kind,
// asyncrl.<run>.engines.*.*, when kind is "". Subscribers (discovery, the
// publisher's ack listener) use it instead of splicing the scheme by hand.
func EngineWildcard(run string, kind EngineTopic) (string, error) {
	if err := ValidToken(run); err != nil {
		return "", fmt.Errorf("run id: %w", err)
	}
	switch kind {
	case "":
		kind = "*"
	case EngineHealth, EngineLoad, EngineAck:
	default:
		return "", fmt.Errorf("%w: unknown engine topic %q (allowed: health, load, ack, or \"\" for all)", ErrBadSubject, kind)
	}
	return SubjectRoot + "." + run + "." + string(TopicEngines) + ".*." + string(kind), nil
}

// ParsedSubject is a subject split into the parts of the scheme.
type ParsedSubject struct {
	Run   string
	Topic Topic
	// More holds the tokens after the topic (engines: id and kind).
	More []string
}

// ParseSubject validates a concrete (wildcard-free) asyncrl subject and
// splits it into its parts.
func ParseSubject(s string) (ParsedSubject, error) {
	toks := strings.Split(s, ".")
	if len(toks) < 3 || toks[0] != SubjectRoot {
		return ParsedSubject{}, fmt.Errorf("%w: %q is not %s.<run>.<topic>[.<more>…]", ErrBadSubject, s, SubjectRoot)
	}
	p := ParsedSubject{Run: toks[1], Topic: Topic(toks[2]), More: toks[3:]}
	if _, err := Subject(p.Run, p.Topic, p.More...); err != nil {
		return ParsedSubject{}, fmt.Errorf("subject %q: %w", s, err)
	}
	if p.Topic == TopicEngines {
		switch EngineTopic(p.More[1]) {
		case EngineHealth, EngineLoad, EngineAck:
		default:
			return ParsedSubject{}, fmt.Errorf("%w: subject %q: unknown engine topic %q", ErrBadSubject, s, p.More[1])
		}
	}
	return p, nil
}

// ValidateSubject checks a subject a message is published on: dot-separated
// tokens, none empty, no wildcards, no whitespace. It does not require the
// asyncrl scheme (inboxes and foreign subjects are legal on the bus); use
// ParseSubject for that.
func ValidateSubject(s string) error {
	return validate(s, false)
}

// ValidatePattern checks a subscription subject: like ValidateSubject, but
// '*' may stand for one whole token and '>' for the last one or more tokens.
func ValidatePattern(s string) error {
	return validate(s, true)
}

func validate(s string, wildcards bool) error {
	if s == "" {
		return fmt.Errorf("%w: empty subject", ErrBadSubject)
	}
	// Token by token with strings.Cut, not strings.Split: every publish
	// validates its subject, and this allocates nothing.
	for rest := s; ; {
		t, next, more := strings.Cut(rest, ".")
		if t == "" {
			return fmt.Errorf("%w: %q has an empty token", ErrBadSubject, s)
		}
		if t == "*" || t == ">" {
			if !wildcards {
				return fmt.Errorf("%w: %q: wildcards are not allowed when publishing", ErrBadSubject, s)
			}
			if t == ">" && more {
				return fmt.Errorf("%w: %q: '>' must be the last token", ErrBadSubject, s)
			}
		} else {
			for j := 0; j < len(t); j++ {
				c := t[j]
				if c <= ' ' || c == 0x7f || c == '*' || c == '>' {
					return fmt.Errorf("%w: %q: token %q has %q", ErrBadSubject, s, t, c)
				}
			}
		}
		if !more {
			return nil
		}
		rest = next
	}
}

// SubjectMatches reports whether subject matches pattern with NATS wildcard
// rules: '*' matches exactly one token, a final '>' one or more tokens.
func SubjectMatches(pattern, subject string) bool {
	for {
		pt, prest, pmore := strings.Cut(pattern, ".")
		st, srest, smore := strings.Cut(subject, ".")
		switch {
		case pt == ">":
			return st != ""
		case pt == "*":
			if st == "" {
				return false
			}
		case pt != st:
			return false
		}
		if !pmore || !smore {
			return pmore == smore
		}
		pattern, subject = prest, srest
	}
}
