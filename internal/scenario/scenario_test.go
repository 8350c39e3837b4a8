package scenario

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

type attempt struct {
	Prompt, Group string
	Attempt       int32
}

type progress struct {
	Step, Version int64
	Token         uint64
	Holder        string
	Prompts       []attempt
}

type claimed struct {
	Token         uint64
	Prev, Claimed progress
}

type member struct {
	Name    string
	Engines map[string]string
}

type mixed struct {
	Leader  bool
	Reward  float64
	After   time.Duration
	Groups  []string
	Members []member
	Err     string
	Attempt attempt
}

func testParser() *Parser {
	return New(Registry{"Claimed": claimed{}, "Progress": progress{}, "Mixed": mixed{}, "Attempt": attempt{}})
}

func TestLineSetsEveryKind(t *testing.T) {
	p := testParser()
	got, err := p.Line(`Mixed leader reward=0.5 after=1m30s groups=[g1 g2] err="lease: fenced off (stale token)" ` +
		`members=[(name=n1) (name=n2 engines={n2-engine-0:http://a:8000 n2-engine-1:http://b})] attempt=(prompt=t5/p1 GROUP=g1 attempt=2)`)
	if err != nil {
		t.Fatal(err)
	}
	want := mixed{Leader: true, Reward: 0.5, After: 90 * time.Second, Groups: []string{"g1", "g2"}, Err: "lease: fenced off (stale token)",
		Members: []member{{Name: "n1"}, {Name: "n2", Engines: map[string]string{"n2-engine-0": "http://a:8000", "n2-engine-1": "http://b"}}},
		Attempt: attempt{Prompt: "t5/p1", Group: "g1", Attempt: 2}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// A $name is a copy: changing it in one use leaves the definition and
// other uses alone.
func TestDefinitionsAreCopiedAndChanged(t *testing.T) {
	p := testParser()
	if err := p.Define("prev3 Progress step=3 version=3 token=4 holder=n0 prompts=[(prompt=t4/p1 group=g1) (prompt=t4/p2 group=g2 attempt=1)]"); err != nil {
		t.Fatal(err)
	}
	got, err := p.Line("Claimed token=5 prev=$prev3 claimed=$prev3(token=5 holder=n1)")
	if err != nil {
		t.Fatal(err)
	}
	c := got.(claimed)
	if c.Prev.Token != 4 || c.Prev.Holder != "n0" || c.Claimed.Token != 5 || c.Claimed.Holder != "n1" || c.Claimed.Step != 3 || len(c.Claimed.Prompts) != 2 {
		t.Errorf("got %+v", c)
	}
	again, _ := p.Line("Claimed prev=$prev3")
	if again.(claimed).Prev.Holder != "n0" {
		t.Errorf("the definition changed: %+v", again)
	}
	// A space before the brackets makes them not an override: "(" is
	// then read as the next field's name and refused.
	if _, err := p.Line("Claimed prev=$prev3 (token=9)"); err == nil {
		t.Error(`"$prev3 (token=9)" accepted`)
	}
}

func TestErrorsNameTheMistake(t *testing.T) {
	p := testParser()
	for line, want := range map[string]string{
		"Nope token=1":                    "unknown type Nope",
		"Claimed tokn=1":                  "has no field tokn",
		"Claimed token=-1":                `"-1" as uint64`,
		"Claimed token":                   "wants =value",
		"Mixed groups=[g1":                "missing ]",
		"Mixed attempt=(prompt=p":         "missing )",
		"Mixed members=[(engines={a})]":   "want key:value",
		"Claimed prev=$ghost":             "$ghost is not defined",
		"Mixed reward=(step=1)":           "is a struct, float64 is not",
		"Mixed after=5":                   "missing unit",
		`Mixed err="open`:                 "unterminated string",
		"Mixed members=[n1]":              "is not a scalar",
		"Claimed prev=(step=1) ) token=1": "want a field name",
	} {
		if _, err := p.Line(line); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want one naming %q", line, err, want)
		}
	}
	if err := p.Define("x Attempt attempt=1"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Line("Claimed prev=$x"); err == nil || !strings.Contains(err.Error(), "$x is a scenario.attempt") {
		t.Errorf("a definition of another type: %v", err)
	}
}

func TestFieldsSetsAStruct(t *testing.T) {
	p := testParser()
	var c claimed
	c.Prev.Holder = "kept"
	c.Claimed.Holder = "kept too"
	if err := p.Fields(&c, "token=7 claimed=(step=2)"); err != nil {
		t.Fatal(err)
	}
	if c.Token != 7 || c.Claimed.Step != 2 || c.Prev.Holder != "kept" || c.Claimed.Holder != "kept too" {
		t.Errorf("got %+v", c)
	}
	if err := p.Fields(c, "token=1"); err == nil {
		t.Error("a non-pointer accepted")
	}
}
