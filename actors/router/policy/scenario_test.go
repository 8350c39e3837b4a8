package policy

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/internal/golden"
)

// TestScenarios replays testdata/scenarios/*.txt against a Core and
// compares the transcript with the .golden file next to it. Commands (one
// per line, # comments; t=<duration> is time since the scenario start):
//
//	config key=value…      policy, lag, ttl, sweep, c, vnodes, versions,
//	                       maxlag, fallback (must come first)
//	replicas URL…          SetReplicas
//	add URL | remove URL
//	health URL up|down
//	state URL active|paused|updating|draining
//	version URL V | min V
//	metrics t=D URL queue=N kv=F
//	route t=D [key=K] [hashonly=1] [prompt=N] [decode=N] [prefix=N] [avoid=URL]
//	done URL tokens=N | finish t=D key=K | sweep t=D
//	show                   per-replica sessions / in-flight, and every session
func TestScenarios(t *testing.T) {
	golden.Run(t, "testdata/scenarios/*.txt", ".txt", runScenario)
}

func runScenario(t *testing.T, path string) string {
	cfg := DefaultConfig()
	var c *Core
	core := func() *Core {
		if c == nil {
			var err error
			if c, err = New(cfg, nil); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	var out strings.Builder
	for _, cmd := range golden.Commands(t, path) {
		ln, line, f := cmd.Line, cmd.Text, cmd.Fields
		kv := map[string]string{}
		var pos []string
		for _, a := range f[1:] {
			if k, v, ok := strings.Cut(a, "="); ok {
				kv[k] = v
			} else {
				pos = append(pos, a)
			}
		}
		fail := func(err error) {
			if err != nil {
				t.Fatalf("%s:%d: %s: %v", path, ln, line, err)
			}
		}
		at := func() time.Time {
			if kv["t"] == "" {
				return t0
			}
			d, err := time.ParseDuration(kv["t"])
			fail(err)
			return t0.Add(d)
		}
		num := func(k string) int {
			if kv[k] == "" {
				return 0
			}
			n, err := strconv.Atoi(kv[k])
			fail(err)
			return n
		}
		res := ""
		switch f[0] {
		case "config":
			if c != nil {
				fail(fmt.Errorf("config after the core was built"))
			}
			for k, v := range kv {
				var err error
				switch k {
				case "policy":
					cfg.Policy = v
				case "lag":
					cfg.LagRule = v
				case "ttl":
					cfg.SessionTTL, err = time.ParseDuration(v)
				case "sweep":
					cfg.SweepInterval, err = time.ParseDuration(v)
				case "c":
					cfg.LoadFactor, err = strconv.ParseFloat(v, 64)
				case "vnodes":
					cfg.VirtualNodes, err = strconv.Atoi(v)
				case "versions":
					cfg.VersionRule = v
				case "maxlag":
					cfg.MaxVersionLag, err = strconv.ParseInt(v, 10, 64)
				case "fallback":
					cfg.HashFallback = v
				default:
					err = fmt.Errorf("unknown config key %q", k)
				}
				fail(err)
			}
			fmt.Fprintf(&out, "%s\n", line)
			continue
		case "replicas":
			fail(core().SetReplicas(pos))
		case "add":
			fail(core().AddReplica(pos[0]))
		case "remove":
			fail(core().RemoveReplica(pos[0]))
		case "health":
			fail(core().SetHealth(pos[0], pos[1] == "up"))
		case "state":
			s, err := ParseState(pos[1])
			fail(err)
			fail(core().SetState(pos[0], s))
		case "version":
			v, err := strconv.ParseInt(pos[1], 10, 64)
			fail(err)
			fail(core().SetVersion(pos[0], v))
		case "min":
			v, err := strconv.ParseInt(pos[0], 10, 64)
			fail(err)
			core().SetMinVersion(v)
		case "metrics":
			kvu, err := strconv.ParseFloat(kv["kv"], 64)
			fail(err)
			fail(core().ObserveMetrics(at(), pos[0], num("queue"), kvu))
		case "route":
			req := Request{SessionKey: kv["key"], PromptTokens: num("prompt"), ExpectedDecodeTokens: num("decode"), PrefixHash: uint64(num("prefix"))}
			req.HashOnly = kv["hashonly"] == "1"
			if kv["avoid"] != "" {
				req.Avoid = []string{kv["avoid"]}
			}
			res = core().Route(at(), req).String()
		case "done":
			core().Done(at(), pos[0], int64(num("tokens")))
		case "finish":
			res = strconv.FormatBool(core().Finish(at(), kv["key"]))
		case "sweep":
			res = fmt.Sprintf("removed %d", core().Sweep(at()))
		case "show":
			var b strings.Builder
			for _, v := range core().Replicas() {
				fmt.Fprintf(&b, "\n    %s sessions=%d inflight=%d/%d healthy=%v state=%s v=%d eligible=%v",
					v.URL, v.Sessions, v.InflightRequests, v.InflightTokens, v.Healthy, v.State, v.Version, v.Eligible)
			}
			for _, s := range core().Sessions() {
				fmt.Fprintf(&b, "\n    session %s on %s", s.Key, s.Replica)
			}
			res = strings.TrimPrefix(b.String(), "\n")
			fmt.Fprintf(&out, "%s\n%s\n", line, res)
			checkInvariants(t, core())
			continue
		default:
			fail(fmt.Errorf("unknown command"))
		}
		checkInvariants(t, core())
		if res == "" {
			fmt.Fprintf(&out, "%s\n", line)
		} else {
			fmt.Fprintf(&out, "%s\n    = %s\n", line, res)
		}
	}
	return out.String()
}
