package discovery

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/messages"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

func health(url string, ok bool) messages.EngineHealth {
	return messages.EngineHealth{Engine: "e-" + url, URL: url, Healthy: ok}
}

func ack(url string, v int64) messages.EngineVersionAck {
	return messages.EngineVersionAck{Header: messages.Header{Version: v}, Engine: "e-" + url, URL: url}
}

func str(cs []Change) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.String())
	}
	return strings.Join(s, "; ")
}

func newCore(t *testing.T, cfg Config) *Core {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{StaleAfter: 0}, {StaleAfter: time.Second, ForgetAfter: time.Second}, {StaleAfter: time.Second, MinVersion: -1}} {
		if err := c.Validate(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: %v, want ErrBadConfig", c, err)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestAnnouncedEngineJoinsHealthy(t *testing.T) {
	c := newCore(t, DefaultConfig())
	got := str(c.Health(ms(0), "n1", health("u1", true)))
	if want := "add u1; version u1 0; state u1 0; health u1 true"; got != want {
		t.Fatalf("changes %q, want %q", got, want)
	}
	if got := str(c.Health(ms(10), "n1", health("u1", true))); got != "" {
		t.Fatalf("repeated identical announcement emitted %q", got)
	}
	if got := str(c.Health(ms(20), "n1", health("u1", false))); got != "health u1 false" {
		t.Fatalf("unhealthy announcement: %q", got)
	}
	got = str(c.Health(ms(30), "n1", messages.EngineHealth{URL: "u1", Healthy: true, Updating: true}))
	if got != "state u1 2; health u1 true" {
		t.Fatalf("updating announcement: %q", got)
	}
	if len(c.Routable()) != 0 {
		t.Fatalf("an updating engine is routable: %v", c.Routable())
	}
}

func TestStaleEngineTurnsUnhealthyAfterStaleAfter(t *testing.T) {
	c := newCore(t, Config{StaleAfter: time.Second})
	c.Health(ms(0), "n1", health("u1", true))
	c.Load(ms(500), "n1", messages.EngineLoad{URL: "u1", Running: 2, Waiting: 1, KVUsage: 0.5})
	if got := str(c.Tick(ms(1499))); got != "" {
		t.Fatalf("before StaleAfter since the last load sample: %q", got)
	}
	if got := str(c.Tick(ms(1500))); got != "health u1 false" {
		t.Fatalf("at StaleAfter: %q, want health false", got)
	}
	// A fresh announcement brings it back.
	if got := str(c.Load(ms(1600), "n1", messages.EngineLoad{URL: "u1"})); got != "health u1 true; metrics u1 q=0 kv=0" {
		t.Fatalf("fresh load: %q", got)
	}
}

func TestForgetAfterRemoves(t *testing.T) {
	c := newCore(t, Config{StaleAfter: time.Second, ForgetAfter: 5 * time.Second})
	c.Health(ms(0), "n1", health("u1", true))
	c.Tick(ms(1000))
	if got := str(c.Tick(ms(5000))); got != "remove u1" {
		t.Fatalf("at ForgetAfter: %q", got)
	}
}

func TestDeadNodesEnginesLeaveAtOnce(t *testing.T) {
	c := newCore(t, DefaultConfig())
	c.MemberJoined(ms(0), "n1", []string{"u1a", "u1b"})
	c.MemberJoined(ms(0), "n2", []string{"u2"})
	for _, u := range []string{"u1a", "u1b", "u2"} {
		c.Health(ms(10), "whoever", health(u, true)) // the advertised owner wins over the sender
	}
	if got := fmt.Sprint(c.Routable()); got != "[u1a u1b u2]" {
		t.Fatalf("routable %s", got)
	}
	if got := str(c.MemberLeft(ms(20), "n1")); got != "remove u1a; remove u1b" {
		t.Fatalf("n1 died: %q", got)
	}
	if got := fmt.Sprint(c.Routable()); got != "[u2]" {
		t.Fatalf("routable after n1 died: %s", got)
	}
	// A late announcement from the dead node's engine does not resurrect it.
	if got := str(c.Health(ms(30), "n1", health("u1a", true))); got != "" {
		t.Fatalf("late announcement from a dead node: %q", got)
	}
}

func TestAdvertisedButSilentEngineIsNotHealthy(t *testing.T) {
	c := newCore(t, DefaultConfig())
	got := str(c.MemberJoined(ms(0), "n1", []string{"u1"}))
	if got != "add u1; version u1 0; state u1 0; health u1 false" {
		t.Fatalf("advertised engine: %q", got)
	}
}

func TestRejoinRoutableOnlyAtMinVersion(t *testing.T) {
	c := newCore(t, DefaultConfig())
	c.MemberJoined(ms(0), "n1", []string{"u1"})
	c.Health(ms(0), "n1", health("u1", true))
	c.Ack(ms(0), "n1", ack("u1", 3))
	c.SetMinVersion(ms(0), 3)
	if fmt.Sprint(c.Routable()) != "[u1]" {
		t.Fatalf("routable %v", c.Routable())
	}
	c.MemberLeft(ms(100), "n1")
	c.SetMinVersion(ms(200), 5) // training went on meanwhile
	// n1 restarts: it advertises u1, announces healthy, but serves version 3.
	got := str(c.MemberJoined(ms(300), "n1", []string{"u1"}))
	if got != "add u1; version u1 0; state u1 0; health u1 false" {
		t.Fatalf("rejoin: %q", got)
	}
	c.Health(ms(310), "n1", health("u1", true))
	if got := str(c.Ack(ms(320), "n1", ack("u1", 4))); got != "version u1 4" {
		t.Fatalf("ack below the minimum: %q", got)
	}
	if len(c.Routable()) != 0 {
		t.Fatalf("engine at v4 < min v5 is routable")
	}
	if got := str(c.Ack(ms(330), "n1", ack("u1", 5))); got != "version u1 5; health u1 true" {
		t.Fatalf("caught up: %q", got)
	}
	if fmt.Sprint(c.Routable()) != "[u1]" {
		t.Fatalf("caught-up engine not routable")
	}
	// Raising the minimum again takes it out until the next ack.
	if got := str(c.SetMinVersion(ms(400), 6)); got != "min_version 6; health u1 false" {
		t.Fatalf("min version raised: %q", got)
	}
	if got := str(c.SetMinVersion(ms(410), 2)); got != "" {
		t.Fatalf("lower min version: %q (the minimum never goes back)", got)
	}
}

func TestUnmanagedEnginesCountAsAlive(t *testing.T) {
	c := newCore(t, DefaultConfig())
	c.Health(ms(0), "", health("u9", true))
	if fmt.Sprint(c.Routable()) != "[u9]" {
		t.Fatalf("an engine without membership is not routable: %v", c.Routable())
	}
	if !strings.Contains(c.Table(), "u9 node= v=0 healthy=true") {
		t.Fatalf("table %q", c.Table())
	}
	if got := str(c.Health(ms(0), "", messages.EngineHealth{Healthy: true})); got != "" {
		t.Fatalf("announcement without URL: %q", got)
	}
}

func TestEngineURLs(t *testing.T) {
	got := EngineURLs(map[string]string{"engine": "http://a", "engine-1": "http://b", "router": "http://r", "engines": "x", "engine-2": ""})
	if fmt.Sprint(got) != "[http://a http://b]" {
		t.Fatalf("EngineURLs = %v", got)
	}
}

// A node restarted on new ports advertises a new set of engines: the old
// URLs leave the table for good (they are not back, unhealthy, forever).
func TestRejoinWithNewEnginesRetiresTheOld(t *testing.T) {
	c := newCore(t, DefaultConfig())
	if got, want := str(c.MemberJoined(ms(0), "n3", []string{"a", "b"})), "add a; version a 0; state a 0; health a false; add b; version b 0; state b 0; health b false"; got != want {
		t.Fatalf("join: %q, want %q", got, want)
	}
	c.Health(ms(10), "n3", health("a", true))
	c.Ack(ms(10), "n3", ack("a", 0))
	if got := c.Routable(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("routable %v, want [a]", got)
	}
	if got, want := str(c.MemberLeft(ms(20), "n3")), "remove a; remove b"; got != want {
		t.Fatalf("death: %q, want %q", got, want)
	}
	if got, want := str(c.MemberJoined(ms(30), "n3", []string{"c", "d"})), "add c; version c 0; state c 0; health c false; add d; version d 0; state d 0; health d false"; got != want {
		t.Fatalf("rejoin on new ports: %q, want %q (a and b must stay out)", got, want)
	}
	// Still alive but advertising only d: c leaves the table.
	if got, want := str(c.MemberJoined(ms(40), "n3", []string{"d"})), "remove c"; got != want {
		t.Fatalf("narrowed advertisement: %q, want %q", got, want)
	}
	if got := str(c.Tick(ms(50))); got != "" {
		t.Fatalf("retired engines came back: %q", got)
	}
}
