package messages

import (
	"fmt"
	"reflect"
	"sort"

	"github.com/fxamacker/cbor/v2"
)

// Header is carried by every data message. It is embedded in each message
// struct, so its fields are flattened into the message's CBOR map under the
// reserved keys 1..9 (message-specific fields start at key 10).
type Header struct {
	// RunID identifies the training run; messages of other runs are ignored by actors.
	RunID string `cbor:"1,keyasint,omitempty"`
	// Sender is the actor or node id that produced the message.
	Sender string `cbor:"2,keyasint,omitempty"`
	// Version is the policy/weight version the message concerns (see each
	// type's comment for which one).
	Version int64 `cbor:"3,keyasint,omitempty"`
	// keys 4..9 are reserved for future header fields (trace ids, timestamps).
}

// Head returns the common header; embedding Header gives every message this method.
func (h Header) Head() Header { return h }

// Message is implemented (with value receivers) by every message struct, so
// both T and *T satisfy it.
type Message interface {
	// Kind is the registry entry of the concrete type.
	Kind() Kind
	// Head is the common header.
	Head() Header
	// String is deterministic: fixed field order, sorted map keys, stable float formatting.
	String() string
}

// Kind is a message type code on the wire. Codes are grouped by concern in
// blocks of 0x100 and are never reused: a retired type keeps its code forever.
type Kind uint16

// The registry. Append new kinds at the end of their block; never renumber.
const (
	// rollout (0x01xx)
	KindPromptAssigned  Kind = 0x0101
	KindTurnRequest     Kind = 0x0102
	KindTurnResult      Kind = 0x0103
	KindTrajectoryDone  Kind = 0x0104
	KindEpisodeAborted  Kind = 0x0105
	KindSessionFinished Kind = 0x0106

	// groups, staleness, ledger (0x02xx)
	KindGroupReady        Kind = 0x0201
	KindGroupAccepted     Kind = 0x0202
	KindGroupFiltered     Kind = 0x0203
	KindGroupRequeued     Kind = 0x0204
	KindCapacityChanged   Kind = 0x0205
	KindPromptLedger      Kind = 0x0206
	KindSamplingExhausted Kind = 0x0207

	// trainer (0x03xx)
	KindTrainBatch Kind = 0x0301
	KindStepDone   Kind = 0x0302

	// weights and versions (0x04xx)
	KindWeightsPublished Kind = 0x0401
	KindEngineVersionAck Kind = 0x0402
	KindMinVersionSet    Kind = 0x0403
	KindLoadWeights      Kind = 0x0404

	// engines (0x05xx)
	KindEngineHealth Kind = 0x0501
	KindEngineLoad   Kind = 0x0502

	// data-plane transfers (0x06xx)
	KindTransferPlan   Kind = 0x0601
	KindTransferDone   Kind = 0x0602
	KindTransferFailed Kind = 0x0603

	// cluster (0x07xx)
	KindTermAnnounce  Kind = 0x0701
	KindRolloutStatus Kind = 0x0702
	KindNodeLeaving   Kind = 0x0703
)

type kindInfo struct {
	name   string
	typ    reflect.Type
	decode func(dm cbor.DecMode, payload []byte) (Message, error)
}

// entry builds a registry row; decoding yields the value type T.
func entry[T Message](name string) kindInfo {
	return kindInfo{name: name, typ: reflect.TypeFor[T](), decode: func(dm cbor.DecMode, p []byte) (Message, error) {
		var v T
		if err := dm.Unmarshal(p, &v); err != nil {
			return nil, err
		}
		return v, nil
	}}
}

var registry = map[Kind]kindInfo{
	KindPromptAssigned:  entry[PromptAssigned]("PromptAssigned"),
	KindTurnRequest:     entry[TurnRequest]("TurnRequest"),
	KindTurnResult:      entry[TurnResult]("TurnResult"),
	KindTrajectoryDone:  entry[TrajectoryDone]("TrajectoryDone"),
	KindEpisodeAborted:  entry[EpisodeAborted]("EpisodeAborted"),
	KindSessionFinished: entry[SessionFinished]("SessionFinished"),

	KindGroupReady:        entry[GroupReady]("GroupReady"),
	KindGroupAccepted:     entry[GroupAccepted]("GroupAccepted"),
	KindGroupFiltered:     entry[GroupFiltered]("GroupFiltered"),
	KindGroupRequeued:     entry[GroupRequeued]("GroupRequeued"),
	KindCapacityChanged:   entry[CapacityChanged]("CapacityChanged"),
	KindPromptLedger:      entry[PromptLedger]("PromptLedger"),
	KindSamplingExhausted: entry[SamplingExhausted]("SamplingExhausted"),

	KindTrainBatch: entry[TrainBatch]("TrainBatch"),
	KindStepDone:   entry[StepDone]("StepDone"),

	KindWeightsPublished: entry[WeightsPublished]("WeightsPublished"),
	KindEngineVersionAck: entry[EngineVersionAck]("EngineVersionAck"),
	KindMinVersionSet:    entry[MinVersionSet]("MinVersionSet"),
	KindLoadWeights:      entry[LoadWeights]("LoadWeights"),

	KindEngineHealth: entry[EngineHealth]("EngineHealth"),
	KindEngineLoad:   entry[EngineLoad]("EngineLoad"),

	KindTransferPlan:   entry[TransferPlan]("TransferPlan"),
	KindTransferDone:   entry[TransferDone]("TransferDone"),
	KindTransferFailed: entry[TransferFailed]("TransferFailed"),

	KindTermAnnounce:  entry[TermAnnounce]("TermAnnounce"),
	KindRolloutStatus: entry[RolloutStatus]("RolloutStatus"),
	KindNodeLeaving:   entry[NodeLeaving]("NodeLeaving"),
}

// String is the Go type name of the kind, or Kind(0x....) when unregistered.
func (k Kind) String() string {
	if e, ok := registry[k]; ok {
		return e.name
	}
	return fmt.Sprintf("Kind(0x%04x)", uint16(k))
}

// Known reports whether k is in the registry.
func (k Kind) Known() bool {
	_, ok := registry[k]
	return ok
}

// Kinds lists every registered kind in ascending code order.
func Kinds() []Kind {
	out := make([]Kind, 0, len(registry))
	for k := range registry {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
