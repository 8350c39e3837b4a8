package node

import (
	"github.com/asyncrl/asyncrl/cluster/rollouthost"
	"github.com/asyncrl/asyncrl/transport"
)

// subjects is the run's subject plan (see docs/protocol.md).
type subjects struct {
	prompts     string // PromptAssigned: controller → rollout (queue "rollout")
	groupsReady string // GroupReady: rollout → sampling
	aborted     string // EpisodeAborted: rollout → controller
	groups      string // pattern of kept+filtered: sampling → controller
	kept        string // GroupReady kept by the filter
	filtered    string // GroupFiltered
	train       string // TrainBatch: controller → trainer
	steps       string // StepDone: trainer → controller, observers
	weights     string // WeightsPublished: trainer → observers
	capacity    string // CapacityChanged: controller → observers
	ledger      string // PromptLedger (JetStream)
	settled     string // GroupAccepted / GroupRequeued / SamplingExhausted (JetStream, under ledger)
	ack         string // EngineVersionAck of this node's engines
	acks        string // pattern of every EngineVersionAck
}

func subjectsFor(run string) (subjects, error) {
	if err := transport.ValidToken(run); err != nil {
		return subjects{}, err
	}
	m := transport.MustSubject
	return subjects{
		prompts:     m(run, transport.TopicPrompts),
		groupsReady: m(run, transport.TopicTrajectories),
		aborted:     m(run, transport.TopicTrajectories, "aborted"),
		groups:      m(run, transport.TopicGroups) + ".>",
		kept:        m(run, transport.TopicGroups, "kept"),
		filtered:    m(run, transport.TopicGroups, "filtered"),
		train:       m(run, transport.TopicTrain),
		steps:       m(run, transport.TopicSteps),
		weights:     m(run, transport.TopicWeights),
		capacity:    m(run, transport.TopicCapacity),
		ledger:      m(run, transport.TopicLedger),
		settled:     m(run, transport.TopicLedger, "groups"),
		ack:         m(run, transport.TopicEngines, "node", string(transport.EngineAck)),
		acks:        transport.SubjectRoot + "." + run + "." + string(transport.TopicEngines) + ".*." + string(transport.EngineAck),
	}, nil
}

// rollout are the subjects the rollout actors use.
func (s subjects) rollout() rollouthost.Subjects {
	return rollouthost.Subjects{Prompts: s.prompts, Groups: s.groupsReady, Aborted: s.aborted}
}
