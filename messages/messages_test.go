package messages

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func hdr(v int64) Header { return Header{RunID: "run-1", Sender: "node-a/actor-1", Version: v} }

// samples has one fully populated value of every registered kind.
func samples() []Message {
	ref := BatchRef{Subject: "asyncrl.batches.run-1", Seq: 42, Bytes: 1 << 20, Checksum: "xxh3-128:00ff"}
	return []Message{
		PromptAssigned{Header: hdr(3), PromptID: "p-7", GroupID: "g-7-0", Task: "arith", Text: "2+2=\"?\"",
			TokenIDs: []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, NSamples: 8, Attempt: 1},
		TurnRequest{Header: hdr(3), TrajectoryID: "t-1", GroupID: "g-7-0", TurnIndex: 2, Engine: "engine-0",
			Tokens: []int32{5, 6}, MaxTokens: 512, Temperature: 0.7, TopP: 0.95, TopK: 40, ReturnRoutes: true, RoutesPromptStart: 2},
		TurnResult{Header: hdr(4), TrajectoryID: "t-1", TurnIndex: 2, Engine: "engine-0", Tokens: []int32{9, 10},
			Logprobs: []float32{-0.5, -1.25}, FinishReason: "stop", ServingVersion: 4, TokenVersions: []int32{3, 4},
			Routes: &BatchRef{Inline: []byte{1, 2, 3}}},
		TrajectoryDone{Header: hdr(4), TrajectoryID: "t-1", GroupID: "g-7-0", PromptID: "p-7", Reward: 0.5,
			Tokens: 130, MinVersion: 3, MaxVersion: 4, Turns: 3, Aborted: true, Reason: "timeout"},
		EpisodeAborted{Header: hdr(4), TrajectoryID: "t-2", PromptID: "p-7", GroupID: "g-7-0", Reason: "engine_failed"},
		SessionFinished{Header: hdr(4), SessionID: "s-1", TrajectoryID: "t-1", Engine: "engine-0"},
		GroupReady{Header: hdr(3), GroupID: "g-7-0", PromptID: "p-7", TrajectoryIDs: []string{"t-1", "t-2"},
			Rewards: []float64{0.5, 1}, OldestVersion: 3, ScheduledStep: 3, Batch: ref, Tokens: 260, TrainedTokens: []int32{120, 0}},
		GroupAccepted{Header: hdr(3), GroupID: "g-7-0", PromptID: "p-7", Step: 5, Staleness: 2},
		GroupFiltered{Header: hdr(3), GroupID: "g-7-1", PromptID: "p-8", Reason: FilterReplaced, ReplacedBy: "g-7-0"},
		GroupRequeued{Header: hdr(3), GroupID: "g-7-2", PromptID: "p-9", Reason: RequeueStale, Attempt: 2, Detail: "lag 6 > 4"},
		CapacityChanged{Header: hdr(5), Capacity: 1, Running: 2, Accepted: 3, Filtered: 1, Submitted: 6, Step: 2},
		PromptLedger{Header: hdr(5), PromptID: "p-7", GroupID: "g-7-0", State: LedgerTrained, Step: 5, Attempt: 1},
		TrainBatch{Header: hdr(5), Step: 5, GroupIDs: []string{"g-7-0", "g-8-0"}, Tokens: 520, Trajectories: 4,
			Groups: []GroupRef{{GroupID: "g-7-0", Batch: BatchRef{Subject: "asyncrl.run-1.trajectories", Seq: 7, Bytes: 4096, Checksum: "xxh3-128:ab"}},
				{GroupID: "g-8-0", Batch: ref, ZeroMask: true}},
			Slots: []Slot{{Group: 0}, {Group: 1}, {Group: 0, Copy: true}}},
		StepDone{Header: hdr(5), Step: 5, NewVersion: 6, Loss: 0.125, RewardMean: 0.75,
			Stats: map[string]float64{"kl": 0.01, "grad_norm": 1.5, "entropy": 2.25}},
		WeightsPublished{Header: hdr(6), BaseVersion: 5, Format: WeightsDelta, URI: "file:///sync/delta-00000006",
			Checksum: "xxh3-128:abcd", Bytes: 123456, Step: 5},
		EngineVersionAck{Header: hdr(6), Engine: "engine-0", URL: "http://127.0.0.1:8001"},
		MinVersionSet{Header: hdr(6), MinVersion: 2},
		LoadWeights{Header: hdr(6), Engine: "engine-1", Format: WeightsFull, URI: "s3://ckpt/v6", BaseVersion: 6, Checksum: "sha256:01"},
		EngineHealth{Header: hdr(6), Engine: "engine-0", URL: "http://127.0.0.1:8001", Healthy: true, Paused: true,
			Updating: true, Draining: true, Reason: "weight sync"},
		EngineLoad{Header: hdr(6), Engine: "engine-0", URL: "http://127.0.0.1:8001", Running: 12, Waiting: 3,
			KVUsage: 0.8125, InflightTokens: 40960, Sessions: 9},
		TransferPlan{Header: hdr(6), TransferID: "x-1", Source: "node-a", Destinations: []string{"node-b", "node-c"},
			Ranges: []ByteRange{{Name: "model.safetensors", Offset: 0, Length: 100, Checksum: "xxh3-128:1"},
				{Name: "model.safetensors", Offset: 100, Length: 50, Checksum: "xxh3-128:2"}}, URI: "file:///sync/v6"},
		TransferDone{Header: hdr(6), TransferID: "x-1", Destination: "node-b", Bytes: 150},
		TransferFailed{Header: hdr(6), TransferID: "x-1", Destination: "node-c", Reason: "checksum mismatch", Range: 1},
		TermAnnounce{Header: hdr(7), Term: "run-1-t3", Token: 3, Router: "http://127.0.0.1:8000"},
		RolloutStatus{Header: hdr(7), GroupIDs: []string{"g-7-0", "g-8-0"}, PromptIDs: []string{"p-7", "p-8"}},
		NodeLeaving{Header: hdr(7)},
		SamplingExhausted{Header: hdr(7), Mode: "filter", Step: 7, SampleBatches: 30, MiniBatch: 4, Good: 3, Requeued: 3},
	}
}

func TestRegistryCoversEverySample(t *testing.T) {
	seen := map[Kind]bool{}
	for _, m := range samples() {
		k := m.Kind()
		if seen[k] {
			t.Fatalf("two samples of %s", k)
		}
		seen[k] = true
		if got, want := k.String(), reflect.TypeOf(m).Name(); got != want {
			t.Errorf("registry name %q for type %s", got, want)
		}
		if m.Head() != m.(interface{ Head() Header }).Head() || m.Head().RunID != "run-1" {
			t.Errorf("%s: header not promoted: %+v", k, m.Head())
		}
	}
	for _, k := range Kinds() {
		if !seen[k] {
			t.Errorf("registered kind %s has no sample: add one so its round trip is tested", k)
		}
	}
	if len(seen) != len(Kinds()) {
		t.Errorf("%d samples for %d kinds", len(seen), len(Kinds()))
	}
}

func TestRoundTripEveryKind(t *testing.T) {
	for _, m := range samples() {
		t.Run(m.Kind().String(), func(t *testing.T) {
			b, err := Encode(m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, m) {
				t.Fatalf("round trip:\n got %#v\nwant %#v", got, m)
			}
			// A pointer encodes to the same bytes.
			p := reflect.New(reflect.TypeOf(m))
			p.Elem().Set(reflect.ValueOf(m))
			b2, err := Encode(p.Interface().(Message))
			if err != nil || string(b2) != string(b) {
				t.Fatalf("pointer encode differs (err %v)", err)
			}
			k, err := DefaultCodec().PeekKind(b)
			if err != nil || k != m.Kind() {
				t.Fatalf("PeekKind = %s, %v", k, err)
			}
			// Zero value round-trips too (all keys omitted).
			z := reflect.Zero(reflect.TypeOf(m)).Interface().(Message)
			zb, err := Encode(z)
			if err != nil {
				t.Fatal(err)
			}
			zd, err := Decode(zb)
			if err != nil || !reflect.DeepEqual(zd, z) {
				t.Fatalf("zero value round trip: %#v, %v", zd, err)
			}
		})
	}
}

func TestDecodeAs(t *testing.T) {
	b, err := Encode(GroupAccepted{Header: hdr(1), GroupID: "g", Step: 2})
	if err != nil {
		t.Fatal(err)
	}
	v, err := DecodeAs[GroupAccepted](b)
	if err != nil || v.GroupID != "g" || v.Step != 2 || v.Version != 1 {
		t.Fatalf("DecodeAs value: %+v, %v", v, err)
	}
	p, err := DecodeAs[*GroupAccepted](b)
	if err != nil || p == nil || p.GroupID != "g" {
		t.Fatalf("DecodeAs pointer: %+v, %v", p, err)
	}
	if _, err := DecodeAs[GroupFiltered](b); !errors.Is(err, ErrWrongKind) {
		t.Fatalf("DecodeAs wrong type: %v, want ErrWrongKind", err)
	}
	if _, err := DecodeAs[GroupFiltered](b[:3]); !errors.Is(err, ErrTruncated) {
		t.Fatalf("DecodeAs truncated: %v", err)
	}
}

// TestUnknownFieldsIgnored: a newer sender may add keys; an older receiver
// must still decode the fields it knows (the reason keys are never reused).
func TestUnknownFieldsIgnored(t *testing.T) {
	type futureGroupAccepted struct {
		Header
		GroupID  string `cbor:"10,keyasint,omitempty"`
		NewThing string `cbor:"99,keyasint,omitempty"`
	}
	payload, err := DefaultCodec().em.Marshal(futureGroupAccepted{Header: hdr(2), GroupID: "g", NewThing: "x"})
	if err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, FrameHeaderLen, FrameHeaderLen+len(payload))
	putHeader(frame, KindGroupAccepted, len(payload))
	frame = append(frame, payload...)
	m, err := DecodeAs[GroupAccepted](frame)
	if err != nil || m.GroupID != "g" || m.Version != 2 {
		t.Fatalf("got %+v, %v", m, err)
	}
}

func TestStringDeterministic(t *testing.T) {
	m := StepDone{Header: hdr(1), Stats: map[string]float64{}}
	for i := 0; i < 50; i++ {
		m.Stats[string(rune('a'+i%26))+string(rune('a'+i/26))] = float64(i) / 3
	}
	first := m.String()
	for i := 0; i < 20; i++ {
		if s := m.String(); s != first {
			t.Fatalf("String() not deterministic:\n%s\n%s", first, s)
		}
	}
	if !strings.Contains(first, `"aa":0 "ab":8.666666666666666`) {
		t.Fatalf("stats not sorted/formatted as expected: %s", first)
	}
	long := PromptAssigned{TokenIDs: make([]int32, 20)}
	if s := long.String(); !strings.Contains(s, "tokens=[0 0 0 0 0 0 0 0 …+12]") {
		t.Fatalf("long slice not truncated: %s", s)
	}
}

func TestStringGolden(t *testing.T) {
	var sb strings.Builder
	for _, m := range samples() {
		sb.WriteString(m.String())
		sb.WriteByte('\n')
	}
	golden(t, "strings.golden", sb.String())
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("%s mismatch (go test -update rewrites it):\n got:\n%s\nwant:\n%s", name, got, want)
	}
}
