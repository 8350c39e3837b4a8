package config

import "fmt"

// ClusterConfig places this process in a multi-node cluster. A single-node
// run leaves it at its defaults.
type ClusterConfig struct {
	// NodeName is this node's unique name in the cluster; empty = hostname.
	NodeName string `yaml:"node_name" doc:"unique node name; empty = the hostname"`
	// Roles are the parts of the system this node runs.
	Roles []Role `yaml:"roles" doc:"parts of the system this node runs"`
	// GossipAddr is the memberlist bind address.
	GossipAddr string `yaml:"gossip_addr" doc:"membership gossip address (host:port)"`
	// GossipKeyFile holds the gossip encryption keys (cluster.LoadGossipKeys:
	// one raw 16/24/32-byte AES key, or base64 keys one a line, the first
	// primary). Required when the node's gossip address is off loopback
	// (asyncrl node --gossip); asyncrl node --gossip-key-file overrides it.
	GossipKeyFile string `yaml:"gossip_key_file" doc:"file holding the gossip (memberlist) encryption key: base64 of a 16, 24 or 32-byte AES key, one a line, the first used to send and all accepted (rotation: docs/security.md), or the raw key alone; required when --gossip is off loopback; never printed"`
	// Join lists gossip addresses of existing members; empty = start a new cluster.
	Join []string `yaml:"join" doc:"gossip addresses of existing members to join; empty = start a new cluster"`
}

// DefaultCluster is one node running everything, gossiping on loopback at
// memberlist's usual port.
func DefaultCluster() ClusterConfig {
	return ClusterConfig{
		Roles:      []Role{RoleAll},
		GossipAddr: "127.0.0.1:7946",
		Join:       []string{},
	}
}

// Validate checks the cluster section.
func (c ClusterConfig) Validate() error {
	v := checker{section: "cluster"}
	v.checkEnums(c)
	if len(c.Roles) == 0 {
		v.fail("roles", "must list at least one role")
	}
	v.hostPort("gossip_addr", c.GossipAddr, false)
	for i, a := range c.Join {
		v.hostPort(fmt.Sprintf("join[%d]", i), a, false)
	}
	return v.err()
}
