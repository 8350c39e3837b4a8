package chaos

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestScheduleIsAFunctionOfTheSeed(t *testing.T) {
	cfg := DefaultConfig()
	a, b := Schedule(cfg), Schedule(cfg)
	if !reflect.DeepEqual(a, b) || len(a) == 0 {
		t.Fatalf("same seed, different schedules (%d vs %d faults)", len(a), len(b))
	}
	cfg.Seed = 2
	if reflect.DeepEqual(a, Schedule(cfg)) {
		t.Fatal("seeds 1 and 2 drew the same schedule")
	}
}

// The acceptance run (60 s, defaults) must inject at least 20 faults
// whatever the seed.
func TestDefaultScheduleHasEnoughFaults(t *testing.T) {
	for seed := int64(1); seed <= 50; seed++ {
		cfg := DefaultConfig()
		cfg.Seed = seed
		if n := len(Schedule(cfg)); n < 20 {
			t.Errorf("seed %d: %d faults in 60 s, want ≥ 20", seed, n)
		}
	}
}

func TestScheduleOnlyEnabledKinds(t *testing.T) {
	for _, tc := range []struct {
		faults []string
		want   []string
	}{
		{nil, DefaultKinds()},
		{Kinds(), Kinds()},
		{[]string{KindEngineKill}, []string{KindEngineKill}},
		{[]string{KindBlackhole, KindReset, KindBlackhole}, []string{KindReset, KindBlackhole}},
	} {
		cfg := DefaultConfig()
		cfg.Faults = tc.faults
		seen := map[string]bool{}
		for _, f := range Schedule(cfg) {
			seen[f.Kind] = true
		}
		var got []string
		for _, k := range Kinds() {
			if seen[k] {
				got = append(got, k)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("faults %v: kinds drawn %v, want %v", tc.faults, got, tc.want)
		}
	}
}

// Property: faults start in order within the duration, holds and delays
// are in their ranges, one engine never has two faults at once, and at
// least one engine is always unfaulted.
func TestScheduleProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := DefaultConfig()
		cfg.Seed = rapid.Int64().Draw(t, "seed")
		cfg.Engines = rapid.IntRange(2, 6).Draw(t, "engines")
		cfg.Duration = time.Duration(rapid.IntRange(1, 120).Draw(t, "duration_s")) * time.Second
		cfg.MeanGap = time.Duration(rapid.IntRange(10, 3000).Draw(t, "gap_ms")) * time.Millisecond
		cfg.MaxHold = time.Duration(rapid.IntRange(4, 5000).Draw(t, "hold_ms")) * time.Millisecond
		if rapid.Bool().Draw(t, "bus") {
			cfg.Faults = Kinds()
		}
		sched := Schedule(cfg)
		for i, f := range sched {
			if f.At < 0 || f.At >= cfg.Duration || i > 0 && f.At < sched[i-1].At {
				t.Fatalf("fault %d at %v out of order or outside [0, %v)", i, f.At, cfg.Duration)
			}
			if !busKind(f.Kind) && (f.Hold < cfg.MaxHold/4 || f.Hold > cfg.MaxHold) {
				t.Fatalf("hold %v outside [%v, %v]", f.Hold, cfg.MaxHold/4, cfg.MaxHold)
			}
			if f.Kind == KindLatency && (f.Delay < cfg.Latency/4 || f.Delay > cfg.Latency) {
				t.Fatalf("delay %v outside range", f.Delay)
			}
			if busKind(f.Kind) {
				if f.Engine != -1 {
					t.Fatalf("bus fault on engine %d", f.Engine)
				}
				continue
			}
			if f.Engine < 0 || f.Engine >= cfg.Engines {
				t.Fatalf("engine %d of %d", f.Engine, cfg.Engines)
			}
			active := 1
			for _, g := range sched[:i] {
				if !busKind(g.Kind) && g.At+g.Hold > f.At {
					if g.Engine == f.Engine {
						t.Fatalf("engine %d faulted twice at %v", f.Engine, f.At)
					}
					active++
				}
			}
			if active > cfg.Engines-1 {
				t.Fatalf("%d of %d engines faulted at %v", active, cfg.Engines, f.At)
			}
		}
	})
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"duration", func(c *Config) { c.Duration = 0 }, "duration: must be positive, got 0s"},
		{"engines", func(c *Config) { c.Engines = 1 }, "engines: must be ≥ 2"},
		{"gap", func(c *Config) { c.MeanGap = -1 }, "mean_gap: must be positive"},
		{"hold", func(c *Config) { c.MaxHold = 0 }, "max_hold: must be positive"},
		{"latency", func(c *Config) { c.Latency = 0 }, "latency: must be positive"},
		{"unknown kind", func(c *Config) { c.Faults = []string{"meteor"} }, `unknown kind "meteor"; want one of engine-kill, latency, reset, blackhole, bus-reconnect`},
		{"bus faults", func(c *Config) { c.Faults = []string{"bus-drop"} }, `"bus-drop" is not supported: cluster/node does not accept a transport.Bus decorator`},
	} {
		c := DefaultConfig()
		tc.edit(&c)
		err := c.Validate()
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrConfig with %q", tc.name, err, tc.want)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

func TestParseFaults(t *testing.T) {
	for in, want := range map[string][]string{
		"":                      nil,
		"all":                   nil,
		"latency":               {"latency"},
		" engine-kill, reset ,": {"engine-kill", "reset"},
	} {
		if got := ParseFaults(in); !slices.Equal(got, want) {
			t.Errorf("%q: %v, want %v", in, got, want)
		}
	}
}
