package bridge

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Multi-node groups (trainer.exec_nodes, docs/protocol.md "Multi-node
// groups"): the Supervisor still talks to every rank, but the ranks past
// its own node's are children another process started (a rank host on
// another node) and reaches through a RankLink. The frames a link
// carries are the protocol's own bytes; the far side relays them to its
// child (Child.Relay) and back, so a remote rank fails, refuses and
// times out exactly like a local one.

// RankLink carries frames to one rank that another process started and
// owns. Calls are sequential (one in flight per link).
type RankLink interface {
	// Exchange sends one request frame body and returns the rank's reply
	// frame body, waiting at most timeout (0: none) and while ctx lives.
	// A failure of the rank itself wraps ErrChildExited, ErrDeadline or
	// ErrProtocol (RelayError rebuilds them from the far side's words);
	// any other error (the link is down) is treated like a dead rank.
	Exchange(ctx context.Context, body []byte, timeout time.Duration) ([]byte, error)
	// Kill ends the rank on the far side; safe to call more than once.
	Kill()
	// String names the rank for logs (its node and pid).
	String() string
}

// RemoteRanks starts a group's ranks on other nodes (cluster/rankhost's
// Links on a cluster term). It is the consumer's interface: the
// Supervisor decides the group (world size, rendezvous, rank numbers),
// RemoteRanks only where each rank runs.
type RemoteRanks interface {
	// StartRanks starts one rank per entry of gs (Init.group of each;
	// gs[i].Rank ascending) and returns a link per rank in the same
	// order; on error none is left running.
	StartRanks(ctx context.Context, gs []Group) ([]RankLink, error)
}

// member is one rank of a group as the Supervisor drives it: a local
// *Child or a remote rank behind a RankLink.
type member interface {
	Call(ctx context.Context, typ string, req frame, want string, timeout time.Duration) (Reply, error)
	Kill()
	Shutdown(ctx context.Context, timeout time.Duration) error
	String() string
}

var (
	_ member = (*Child)(nil)
	_ member = (*remoteRank)(nil)
)

// remoteRank is a member on another node.
type remoteRank struct {
	link   RankLink
	nextID uint64
}

func (m *remoteRank) String() string { return m.link.String() }

func (m *remoteRank) Kill() { m.link.Kill() }

// Call is Child.Call over the link.
func (m *remoteRank) Call(ctx context.Context, typ string, req frame, want string, timeout time.Duration) (Reply, error) {
	m.nextID++
	h := req.header()
	h.V, h.Type, h.ID = ProtocolVersion, typ, m.nextID
	body, err := EncodeFrame(req)
	if err != nil {
		return Reply{}, err
	}
	out, err := m.link.Exchange(ctx, body, timeout)
	if err != nil {
		if ctx.Err() != nil {
			return Reply{}, ctx.Err()
		}
		if errors.Is(err, ErrChildExited) || errors.Is(err, ErrDeadline) || errors.Is(err, ErrProtocol) {
			return Reply{}, fmt.Errorf("%s: %w", m.link, err)
		}
		return Reply{}, fmt.Errorf("%w (%s): the link to it failed: %w", ErrChildExited, m.link, err)
	}
	var rep Reply
	if err := DecodeFrame(out, &rep); err != nil {
		return Reply{}, fmt.Errorf("%w (%s): %w", ErrProtocol, m.link, err)
	}
	return checkReply(rep, h.ID, typ, want)
}

// Shutdown asks the rank to exit (Shutdown → Bye), then ends it on the
// far side whatever it answered.
func (m *remoteRank) Shutdown(ctx context.Context, timeout time.Duration) error {
	_, err := m.Call(ctx, TypeShutdown, &Shutdown{}, TypeBye, timeout)
	m.link.Kill()
	return err
}

// relayWant is the reply each request a rank host relays is answered
// with: the frames a group sends its ranks.
var relayWant = map[string]string{
	TypeInit: TypeReady, TypeTrainBatch: TypeStepResult, TypeSaveCheckpoint: TypeSaved, TypeShutdown: TypeBye,
}

// Relay is the far side of a RankLink: it sends the request frame body
// to c and returns c's reply as a frame body carrying the request's id.
// A refusal (*ChildError) is returned as the child's Error frame, so the
// Supervisor sees it as that rank's refusal; every other failure is
// returned as the error (RelayKind names it for the wire). Shutdown ends
// the child (Child.Shutdown) and answers Bye.
func (c *Child) Relay(ctx context.Context, body []byte, timeout time.Duration) ([]byte, error) {
	h, err := DecodeHeader(body)
	if err != nil {
		return nil, fmt.Errorf("%w: a relayed request: %w", ErrProtocol, err)
	}
	want, ok := relayWant[h.Type]
	if !ok {
		return nil, fmt.Errorf("%w: a rank host relays Init, TrainBatch, SaveCheckpoint and Shutdown, not %s", ErrProtocol, h.Type)
	}
	var rep Reply
	switch h.Type {
	case TypeShutdown:
		if err := c.Shutdown(ctx, timeout); err != nil {
			return nil, err
		}
		rep.Type = TypeBye
	default:
		req := map[string]frame{TypeInit: &Init{}, TypeTrainBatch: &TrainBatch{}, TypeSaveCheckpoint: &SaveCheckpoint{}}[h.Type]
		if err := DecodeFrame(body, req); err != nil {
			return nil, fmt.Errorf("%w: a relayed %s: %w", ErrProtocol, h.Type, err)
		}
		rep, err = c.Call(ctx, h.Type, req, want, timeout)
		var ce *ChildError
		switch {
		case errors.As(err, &ce):
			rep = Reply{Header: Header{Type: TypeError}, Code: ce.Code, Field: ce.Field, Message: ce.Message}
		case err != nil:
			return nil, err
		}
	}
	rep.V, rep.ID = ProtocolVersion, h.ID
	return EncodeFrame(&rep)
}

// RelayKind names err's kind for the wire: exited, deadline, protocol,
// or "" for anything else (RelayError reads it back).
func RelayKind(err error) string {
	switch {
	case errors.Is(err, ErrChildExited):
		return "exited"
	case errors.Is(err, ErrDeadline):
		return "deadline"
	case errors.Is(err, ErrProtocol):
		return "protocol"
	}
	return ""
}

// RelayError rebuilds a far side's failure from RelayKind's kind and its
// message, wrapping the same sentinel.
func RelayError(kind, msg string) error {
	switch kind {
	case "exited":
		return fmt.Errorf("%w: %s", ErrChildExited, msg)
	case "deadline":
		return fmt.Errorf("%w: %s", ErrDeadline, msg)
	case "protocol":
		return fmt.Errorf("%w: %s", ErrProtocol, msg)
	}
	return errors.New(msg)
}

// RankEnv is torch's environment contract (torchrun's names) for g, the
// rank's place local among localWorld ranks on its node: what a rank
// host adds to trainer.exec_env for a rank it starts. The names, read
// from Debian's python3-torch 1.13.1+dfsg-4 (PyTorch v1.13.1):
// torch/distributed/rendezvous.py _env_rendezvous_handler (l. 209–244)
// reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for init_method
// env://; torch/distributed/elastic/agent/server/local_elastic_agent.py
// (l. 235–240) sets LOCAL_RANK and LOCAL_WORLD_SIZE for each worker.
func RankEnv(g Group, local, localWorld int) []string {
	return []string{
		"MASTER_ADDR=" + g.Addr, "MASTER_PORT=" + strconv.Itoa(g.Port),
		"WORLD_SIZE=" + strconv.Itoa(g.WorldSize), "RANK=" + strconv.Itoa(g.Rank),
		"LOCAL_RANK=" + strconv.Itoa(local), "LOCAL_WORLD_SIZE=" + strconv.Itoa(localWorld),
	}
}
