package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rs/zerolog"
)

// ErrBadMembershipConfig is returned for an invalid MembershipConfig.
var ErrBadMembershipConfig = errors.New("cluster: bad membership config")

// NodeMeta is what a node tells the others about itself through gossip. It
// must stay small: memberlist caps node metadata at 512 bytes.
type NodeMeta struct {
	// Roles the node runs (engine, router, rollout, filter, trainer, publisher).
	Roles []string `json:"roles,omitempty"`
	// Endpoints maps a role to the address it serves on (e.g. "engine": "http://127.0.0.1:8001").
	Endpoints map[string]string `json:"endpoints,omitempty"`
	// GPUs is the number of GPUs the node has (0 when none or no driver).
	GPUs int `json:"gpus,omitempty"`
}

// Member is one live node as seen by this node.
type Member struct {
	Name string
	Addr string
	Meta NodeMeta
}

// MembershipConfig configures gossip membership.
type MembershipConfig struct {
	// Name is this node's unique name in the cluster.
	Name string
	// BindAddr is the gossip listen address; 127.0.0.1 by default.
	BindAddr string
	// BindPort is the gossip port; 0 picks a free port.
	BindPort int
	// Join lists host:port gossip addresses of existing members (empty for the first node).
	Join []string
	// Meta is advertised to the other members.
	Meta NodeMeta
	// ProbeInterval is the failure-detection probe period; it bounds how fast a
	// dead node is noticed (about a few probe intervals).
	ProbeInterval time.Duration
	// Keys encrypt and authenticate gossip (AES-GCM, memberlist's
	// keyring): Keys[0] is used to send, every key is accepted. A member
	// without one of the keys cannot join. Empty: plaintext gossip
	// (loopback only; LoadGossipKeys reads them from a file).
	Keys [][]byte
	// OnJoin and OnLeave are called (from memberlist's goroutine) when a member
	// joins or leaves/dies. May be nil.
	OnJoin, OnLeave func(Member)
}

// DefaultMembershipConfig returns loopback defaults tuned for fast failure
// detection on a LAN.
func DefaultMembershipConfig(name string) MembershipConfig {
	return MembershipConfig{Name: name, BindAddr: "127.0.0.1", ProbeInterval: 500 * time.Millisecond}
}

// Membership is a running gossip membership (hashicorp/memberlist).
type Membership struct {
	ml   *memberlist.Memberlist
	meta []byte
	mu   sync.Mutex
	left bool
}

// JoinCluster starts gossip and joins the nodes in cfg.Join.
func JoinCluster(cfg MembershipConfig, logger zerolog.Logger) (*Membership, error) {
	if cfg.Name == "" {
		return nil, fmt.Errorf("%w: name is required", ErrBadMembershipConfig)
	}
	meta, err := json.Marshal(cfg.Meta)
	if err != nil {
		return nil, fmt.Errorf("cluster: encode node metadata: %w", err)
	}
	if len(meta) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: node metadata is %d bytes, the limit is %d", ErrBadMembershipConfig, len(meta), memberlist.MetaMaxSize)
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.BindAddr = cfg.BindAddr
	if mc.BindAddr == "" {
		mc.BindAddr = "127.0.0.1"
	}
	mc.BindPort = cfg.BindPort
	mc.AdvertisePort = cfg.BindPort
	if cfg.ProbeInterval > 0 {
		mc.ProbeInterval = cfg.ProbeInterval
		mc.ProbeTimeout = cfg.ProbeInterval / 2
		mc.GossipInterval = cfg.ProbeInterval / 5
	}
	if mc.Keyring, err = keyring(cfg.Keys); err != nil {
		return nil, err
	}
	// With a keyring memberlist already encrypts and refuses plaintext
	// (GossipVerifyIncoming/Outgoing default true); say so explicitly.
	mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	mc.Logger = log.New(zerologWriter{logger.With().Str("component", "memberlist").Logger()}, "", 0)
	m := &Membership{meta: meta}
	mc.Delegate = metaDelegate{m}
	mc.Events = eventDelegate{cfg.OnJoin, cfg.OnLeave}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("cluster: start gossip on %s:%d: %w", mc.BindAddr, cfg.BindPort, err)
	}
	m.ml = ml
	if len(cfg.Join) > 0 {
		if _, err := ml.Join(cfg.Join); err != nil {
			_ = ml.Shutdown()
			return nil, fmt.Errorf("cluster: join %v: %w", cfg.Join, err)
		}
	}
	return m, nil
}

// Addr is this node's gossip address (host:port), for others to join.
func (m *Membership) Addr() string {
	n := m.ml.LocalNode()
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// Members lists the live members (this node included), sorted by name.
func (m *Membership) Members() []Member {
	nodes := m.ml.Members()
	out := make([]Member, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, toMember(n))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Leave tells the others this node is leaving, then stops gossip.
func (m *Membership) Leave(timeout time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.left {
		return nil
	}
	m.left = true
	err := m.ml.Leave(timeout)
	if serr := m.ml.Shutdown(); err == nil {
		err = serr
	}
	return err
}

// Crash stops gossip without telling anyone, as a killed process would:
// the others declare this node dead after their failure detection (tests
// and fault injection). Leave after Crash does nothing.
func (m *Membership) Crash() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.left {
		return nil
	}
	m.left = true
	return m.ml.Shutdown()
}

func toMember(n *memberlist.Node) Member {
	mem := Member{Name: n.Name, Addr: net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))}
	_ = json.Unmarshal(n.Meta, &mem.Meta) // a peer's bad metadata leaves Meta empty
	return mem
}

type metaDelegate struct{ m *Membership }

func (d metaDelegate) NodeMeta(limit int) []byte {
	if len(d.m.meta) > limit {
		return nil
	}
	return d.m.meta
}
func (metaDelegate) NotifyMsg([]byte)                           {}
func (metaDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (metaDelegate) LocalState(join bool) []byte                { return nil }
func (metaDelegate) MergeRemoteState(buf []byte, join bool)     {}

type eventDelegate struct{ onJoin, onLeave func(Member) }

func (e eventDelegate) NotifyJoin(n *memberlist.Node) {
	if e.onJoin != nil {
		e.onJoin(toMember(n))
	}
}
func (e eventDelegate) NotifyLeave(n *memberlist.Node) {
	if e.onLeave != nil {
		e.onLeave(toMember(n))
	}
}
func (eventDelegate) NotifyUpdate(*memberlist.Node) {}

// zerologWriter turns memberlist's log lines into debug events.
type zerologWriter struct{ l zerolog.Logger }

func (w zerologWriter) Write(p []byte) (int, error) {
	w.l.Debug().Msg(string(trimNL(p)))
	return len(p), nil
}

func trimNL(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == '\r') {
		p = p[:len(p)-1]
	}
	return p
}

var _ io.Writer = zerologWriter{}
var _ memberlist.Delegate = metaDelegate{}
var _ memberlist.EventDelegate = eventDelegate{}
