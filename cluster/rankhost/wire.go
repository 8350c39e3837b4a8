package rankhost

import (
	"fmt"

	"github.com/fxamacker/cbor/v2"

	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
)

// Ops of a request.
const (
	opStart = "start" // start Groups' ranks as group Group
	opFrame = "frame" // relay Body to rank Rank of Group
	opKill  = "kill"  // kill rank Rank of Group
)

// request is one request to a rank host (CBOR on RankHost(node)).
type request struct {
	Op string `cbor:"op"`
	// Owner is the holder's node name, Token its term's fencing token:
	// a request of an older token than the host has seen is refused.
	Owner string `cbor:"owner"`
	Token uint64 `cbor:"token"`
	// Group names the group instance (a restart is a new one).
	Group string `cbor:"group"`
	// Ranks are the Init.group of each rank to start (opStart).
	Ranks []bridge.Group `cbor:"ranks,omitempty"`
	Rank  int            `cbor:"rank"`
	// Body is the frame (opFrame), TimeoutNS its deadline (0: none).
	Body      []byte `cbor:"body,omitempty"`
	TimeoutNS int64  `cbor:"timeout_ns,omitempty"`
}

// reply answers a request: Body (opFrame), Pids (opStart), or the
// failure: Err with Kind (bridge.RelayKind) for a rank's own failure.
type reply struct {
	Body []byte `cbor:"body,omitempty"`
	Pids []int  `cbor:"pids,omitempty"`
	Kind string `cbor:"kind,omitempty"`
	Err  string `cbor:"err,omitempty"`
}

func encode(v any) ([]byte, error) {
	b, err := cbor.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("rankhost: encode: %w", err)
	}
	return b, nil
}

func decode(b []byte, v any) error {
	if err := cbor.Unmarshal(b, v); err != nil {
		return fmt.Errorf("rankhost: decode: %w", err)
	}
	return nil
}
