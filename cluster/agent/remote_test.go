package agent

import (
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/enginehost"
	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/syncbuf"
)

var (
	enginesRe = regexp.MustCompile(`(?m)^node \w+: engines (.+)$`)
	versionRe = regexp.MustCompile(`node \w+: step \d+ version (\d+)`)
)

// hostURLs are the engine URLs a node printed at start ("engines <url> …").
func hostURLs(t *testing.T, events string) []string {
	t.Helper()
	m := enginesRe.FindStringSubmatch(events)
	if m == nil {
		t.Fatalf("no engines line:\n%s", events)
	}
	return strings.Fields(m[1])
}

// lastVersion is the last version an agent printed with a durable step
// (-1 before the first).
func lastVersion(events string) int64 {
	m := versionRe.FindAllStringSubmatch(events, -1)
	if len(m) == 0 {
		return -1
	}
	v, _ := strconv.ParseInt(m[len(m)-1][1], 10, 64)
	return v
}

// termBases maps each term token a holder acquired to the run version its
// term started from ("resume from step S version B"): a term's versions
// are local to it (its version 0 is the run's version B).
func termBases(holderEvents string) map[string]int64 {
	re := regexp.MustCompile(`lease trainer acquired token (\d+)\n(?:.*\n)*?node \w+: resume from step \d+ version (\d+)`)
	out := map[string]int64{}
	for _, m := range re.FindAllStringSubmatch(holderEvents, -1) {
		out[m[1]], _ = strconv.ParseInt(m[2], 10, 64)
	}
	return out
}

// caughtUp maps each engine of node to the run version (term base plus
// the term's local version) of its first "caught up" line, and returns
// where each line starts in events.
func caughtUp(t *testing.T, events, node string, bases map[string]int64) (versions map[string]int64, at map[string]int) {
	t.Helper()
	re := regexp.MustCompile(`node ` + node + `: engine (` + node + `-engine-\d+) caught up to version (\d+) of term \S+-t(\d+)`)
	versions, at = map[string]int64{}, map[string]int{}
	for _, m := range re.FindAllStringSubmatchIndex(events, -1) {
		name := events[m[2]:m[3]]
		if _, ok := versions[name]; ok {
			continue
		}
		v, _ := strconv.ParseInt(events[m[4]:m[5]], 10, 64)
		base, ok := bases[events[m[6]:m[7]]]
		if !ok {
			t.Fatalf("%s caught up in term token %s, which the holder never started", name, events[m[6]:m[7]])
		}
		versions[name], at[name] = base+v, m[0]
	}
	return versions, at
}

// firstRequest is where engine name's "first request" line starts (-1 if none).
func firstRequest(events, name string) int {
	return strings.Index(events, "engine "+name+" first request at version")
}

// servedAfterCatchUp checks, on a node's events, that every engine that
// served a request had caught up first (versions and at from caughtUp),
// and returns how many served.
func servedAfterCatchUp(t *testing.T, events string, versions map[string]int64, at map[string]int) (served int) {
	t.Helper()
	for name := range versions {
		if fr := firstRequest(events, name); fr >= 0 {
			served++
			if fr < at[name] {
				t.Errorf("%s served before it caught up", name)
			}
		}
	}
	return served
}

// An engine-only node serves a trainer-only holder; it leaves gracefully
// and its engines leave the holder's routing table; a new engine node
// joins mid-run, loads the current version from the term's base and
// deltas, and only then gets traffic; the run finishes with a clean ledger.
//
// The events of all three nodes also go to one shared log, in the order
// they happened, so the test can order n3's catch-up before n1's routing
// of it: an engine the router took before its ack (a broken gate) prints
// "got a request before catching up", or is "routing ready" on n1 before
// it "caught up" on n3.
func TestRemoteEnginesJoinAndLeave(t *testing.T) {
	url := externalBus(t)
	const steps = 8
	var ev1, ev2, ev3, all syncbuf.Buffer
	var join []string
	mk := func(name string, roles []string, ev *syncbuf.Buffer) *Agent {
		return testAgent(t, url, Config{Name: name, Roles: roles, Join: join, Run: agentRunConfig(t, steps), Events: io.MultiWriter(ev, &all)})
	}
	a1 := mk("n1", []string{placement.Trainer}, &ev1)
	defer a1.Stop()
	join = []string{a1.ms.Addr()}
	a2 := mk("n2", []string{placement.Engine}, &ev2)
	defer a2.Stop()
	defer func() {
		if t.Failed() {
			t.Logf("events in order:\n%s", all.String())
		}
	}()
	urls2 := hostURLs(t, ev2.String())
	if len(urls2) != config.Default().Engines.Count {
		t.Fatalf("n2 engines %v; want engines.count = %d", urls2, config.Default().Engines.Count)
	}
	if strings.Contains(ev1.String(), "node n1: engines ") {
		t.Fatalf("n1 (trainer only) started engines:\n%s", ev1.String())
	}

	clustertest.WaitFor(t, 30*time.Second, "n1 to train 2 steps on n2's engines", func() bool { return lastStep(ev1.String()) >= 2 })
	out1, out2 := ev1.String(), ev2.String()
	for _, u := range urls2 {
		if !strings.Contains(out1, "routing add "+u) {
			t.Errorf("n1 trained without routing to n2's %s", u)
		}
	}
	v2, at2 := caughtUp(t, out2, "n2", termBases(out1))
	if len(v2) == 0 {
		t.Fatalf("no n2 engine caught up:\n%s", out2)
	}
	if servedAfterCatchUp(t, out2, v2, at2) == 0 {
		t.Errorf("n1 trained 2 steps and no n2 engine got a request:\n%s", out2)
	}

	// A graceful leave: the holder's poll of membership drops the engines.
	left := time.Now()
	a2.Stop()
	clustertest.WaitFor(t, 5*time.Second, "n1 to stop routing to n2's engines", func() bool {
		out := ev1.String()
		for _, u := range urls2 {
			if !strings.Contains(out, "routing remove "+u) {
				return false
			}
		}
		return true
	})
	t.Logf("n2 left; its engines out of n1's routing in %s", time.Since(left).Round(time.Millisecond))

	before := lastVersion(ev1.String())
	a3 := mk("n3", []string{placement.Engine}, &ev3)
	defer a3.Stop()
	// n3's catch-up is held for two announcement ticks (n1 polls
	// membership every 250ms, so it adds n3's engines well before): a
	// window in which only the gates keep n1's router off them.
	var held sync.Map // engine index -> true once its first apply was held
	a3.host.SetBeforeApply(func(i int, _ int64) {
		if _, done := held.LoadOrStore(i, true); !done {
			time.Sleep(2 * a3.host.Tick())
		}
	})
	urls3 := hostURLs(t, ev3.String())
	names3 := map[string]string{} // url -> engine name
	for k, u := range a3.host.Endpoints() {
		names3[u] = enginehost.EngineName("n3", k)
	}
	clustertest.WaitFor(t, 60*time.Second, "n1 to finish the run", func() bool {
		_, ok := a1.FinalLedger()
		return ok
	})
	out1, out3, everything := ev1.String(), ev3.String(), all.String()
	if before < 1 {
		t.Fatalf("n1 printed version %d before n3 started; want the run under way", before)
	}
	v3, at3 := caughtUp(t, out3, "n3", termBases(out1))
	if len(v3) != len(urls3) {
		t.Fatalf("n3 engines caught up: %v; want all %d:\n%s", v3, len(urls3), out3)
	}
	for name, v := range v3 {
		// Each engine starts from the run's current version, not the
		// seed's: the publisher's command to a new engine targets the
		// latest version (if the holder restarted its term meanwhile, see
		// below, the new term's version 0 is the restored current one).
		if v < before {
			t.Errorf("%s caught up to version %d; n1 was at version %d when n3 started", name, v, before)
		}
	}
	if servedAfterCatchUp(t, out3, v3, at3) == 0 {
		t.Errorf("n1 finished the run and no n3 engine got a request:\n%s", out3)
	}
	for _, u := range urls3 {
		add := strings.Index(out1, "routing add "+u)
		if add < 0 {
			t.Errorf("n1 never routed to n3's %s", u)
		}
		// Ordering across nodes: n1 calls the engine routable only after
		// n3 printed its catch-up (the engine acks before it announces
		// itself healthy).
		ready := strings.Index(everything, "node n1: routing ready "+u)
		if ready < 0 {
			t.Errorf("n1 never called n3's %s ready", u)
			continue
		}
		if add > ready {
			t.Errorf("n1 called %s ready before adding it", u)
		}
		cu := strings.Index(everything, "node n3: engine "+names3[u]+" caught up")
		if cu < 0 || cu > ready {
			t.Errorf("n1 called %s (%s) ready before it caught up", u, names3[u])
		}
	}
	// With no engine left, the holder's next publish waits for one (it
	// must not fail the step, and with it the term).
	if n := strings.Count(out1, "lease trainer acquired"); n != 1 || strings.Contains(out1, "training failed") {
		t.Errorf("n1 ran %d terms (training failed: %v); losing every engine must only make it wait",
			n, strings.Contains(out1, "training failed"))
	}
	t.Logf("n3 caught up to run versions %v (n1 at %d when n3 started)", v3, before)
	if strings.Contains(everything, "got a request before catching up") {
		t.Errorf("an engine served before catching up")
	}
	c, _ := a1.FinalLedger()
	b := config.Default().Trainer.MiniBatchSize
	if c.InFlight != 0 || c.Refused != 0 || c.Trained != steps*b {
		t.Errorf("final ledger %+v; want %d trained (B=%d per step, none twice), none in flight, none refused", c, steps*b, b)
	}
	if got := lastStep(out1); got != steps {
		t.Errorf("n1's last step %d; want %d", got, steps)
	}
}

// Engines that served one term serve the next: n1's engines follow n2's
// term (gossip-joined, so n2 routes to them) up to some version v > 0;
// when n2 stops, n1's own term starts again at version 0, which an engine
// serving v would refuse (versions never decrease), so the host gives
// each slot a fresh engine behind the same URL. Without that, n1's term
// waits forever for an engine to load its version 0.
//
// n2 holds first and n1 survives: with two members a graceful leave
// counts as a failure in the quorum (see the report), and the survivor
// of a 1–1 split trains only if it has the lowest name.
func TestRemoteEnginesFollowNewTerm(t *testing.T) {
	url := externalBus(t)
	const steps = 6
	var ev1, ev2 syncbuf.Buffer
	var join []string
	mk := func(name string, ev *syncbuf.Buffer) *Agent {
		return testAgent(t, url, Config{Name: name, Roles: []string{placement.Trainer, placement.Engine}, Join: join, Run: agentRunConfig(t, steps), Events: ev})
	}
	a2 := mk("n2", &ev2)
	defer a2.Stop()
	clustertest.WaitFor(t, 10*time.Second, "n2 to hold the lease", func() bool { return strings.Contains(ev2.String(), "lease trainer acquired") })
	join = []string{a2.ms.Addr()}
	a1 := mk("n1", &ev1)
	defer a1.Stop()
	defer func() {
		if t.Failed() {
			t.Logf("n1:\n%s\nn2:\n%s", ev1.String(), ev2.String())
		}
	}()
	urls1 := hostURLs(t, ev1.String())
	// n1's engines serve n2's term at a version > 0 before n2 stops.
	clustertest.WaitFor(t, 30*time.Second, "n1's engines to serve a version > 0 of n2's term", func() bool {
		for _, le := range a1.host.Current() {
			if le.E.Version() < 1 {
				return false
			}
		}
		return lastStep(ev2.String()) >= 2
	})
	a2.Stop()
	clustertest.WaitFor(t, 40*time.Second, "n1 to finish the run on its own engines", func() bool {
		_, ok := a1.FinalLedger()
		return ok
	})
	out1 := ev1.String()
	terms := regexp.MustCompile(`engines follow term (\S+)`).FindAllStringSubmatch(out1, -1)
	if len(terms) < 2 {
		t.Fatalf("n1's engines followed %d terms; want n2's and n1's", len(terms))
	}
	last := terms[len(terms)-1][1]
	if !strings.Contains(out1, "lease trainer acquired") || !strings.HasSuffix(last, "-t"+regexp.MustCompile(`lease trainer acquired token (\d+)`).FindStringSubmatch(out1)[1]) {
		t.Fatalf("n1's engines last followed %s; want n1's own term", last)
	}
	term := out1[strings.Index(out1, "engines follow term "+last):]
	for i := range urls1 {
		name := enginehost.EngineName("n1", enginehost.EndpointKey(i))
		cu := strings.Index(term, "engine "+name+" caught up to version 0 of term "+last+"\n")
		if cu < 0 {
			t.Errorf("%s never loaded version 0 of n1's term %s", name, last)
		}
		if fr := firstRequest(term, name); fr >= 0 && fr < cu {
			t.Errorf("%s served n1's term before it caught up", name)
		}
	}
	if strings.Contains(out1, "got a request before catching up") {
		t.Errorf("an engine served before catching up")
	}
	c, _ := a1.FinalLedger()
	b := config.Default().Trainer.MiniBatchSize
	if c.InFlight != 0 || c.Refused != 0 || c.Trained != steps*b {
		t.Errorf("final ledger %+v; want %d trained, none in flight, none refused", c, steps*b)
	}
}
