package node

import (
	"net"
	"net/http"
	"time"

	"github.com/asyncrl/asyncrl/internal/inproc"
)

// Connections per host when a hop does go over the network (an external
// engine, a router on another node): requests beyond them wait for a free
// connection instead of each opening a socket (issue 22: ~16k
// trajectories in flight exhausted the process's file descriptors).
const maxConnsPerHost = 1024

// routerUpstream is the router's transport to the engines: this process's
// built-in engines (registered in inproc.Default by cluster/localengine)
// in process without a socket, the others over a bounded pool with the
// settings of the router's own default transport.
func routerUpstream() *inproc.Transport {
	return &inproc.Transport{Base: &http.Transport{
		Proxy:                 nil, // never route engine traffic through an env proxy
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          maxConnsPerHost,
		MaxIdleConnsPerHost:   256,
		MaxConnsPerHost:       maxConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true, // pass Accept-Encoding through untouched
		ExpectContinueTimeout: time.Second,
	}}
}

// rolloutTransport is the rollout actors' transport to the router: the
// node's own router in process, another over a bounded pool.
func rolloutTransport() *inproc.Transport {
	return &inproc.Transport{Base: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256, MaxConnsPerHost: maxConnsPerHost}}
}
