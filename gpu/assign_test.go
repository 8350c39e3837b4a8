package gpu

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestAssign(t *testing.T) {
	cases := []struct {
		name    string
		cfg     AssignConfig
		devices int
		want    Assignment
		err     string // substring of the error; "" means success
	}{
		{"default on 8", DefaultAssignConfig(), 8, Assignment{Engines: [][]int{{0}}, Trainers: []int{1, 2, 3, 4, 5, 6, 7}}, ""},
		{"engines first, trainer rest", AssignConfig{EngineRanks: 2, DevicesPerEngine: 2}, 8,
			Assignment{Engines: [][]int{{0, 1}, {2, 3}}, Trainers: []int{4, 5, 6, 7}}, ""},
		{"fixed trainer count", AssignConfig{EngineRanks: 4, DevicesPerEngine: 1, TrainerRanks: 2}, 8,
			Assignment{Engines: [][]int{{0}, {1}, {2}, {3}}, Trainers: []int{4, 5}}, ""},
		{"all engines, no trainer here", AssignConfig{EngineRanks: 2, DevicesPerEngine: 1}, 2,
			Assignment{Engines: [][]int{{0}, {1}}, Trainers: []int{}}, ""},
		{"trainer only", AssignConfig{DevicesPerEngine: 1}, 2, Assignment{Engines: [][]int{}, Trainers: []int{0, 1}}, ""},
		{"explicit lists", AssignConfig{EngineRanks: 1, DevicesPerEngine: 2, EngineDevices: []int{6, 7}, TrainerDevices: []int{0, 1}}, 8,
			Assignment{Engines: [][]int{{6, 7}}, Trainers: []int{0, 1}}, ""},
		{"explicit engines, trainer rest", AssignConfig{EngineRanks: 2, DevicesPerEngine: 1, EngineDevices: []int{3, 1}}, 4,
			Assignment{Engines: [][]int{{3}, {1}}, Trainers: []int{0, 2}}, ""},
		{"explicit trainers set rank count", AssignConfig{EngineRanks: 1, DevicesPerEngine: 1, TrainerDevices: []int{3}}, 4,
			Assignment{Engines: [][]int{{0}}, Trainers: []int{3}}, ""},
		{"no devices, nothing asked", AssignConfig{DevicesPerEngine: 1}, 0, Assignment{Engines: [][]int{}, Trainers: []int{}}, ""},

		{"overlap", AssignConfig{EngineRanks: 1, DevicesPerEngine: 2, TrainerDevices: []int{1}}, 4, Assignment{}, "TrainerDevices: device 1 already assigned in EngineDevices"},
		{"repeat within engines", AssignConfig{EngineRanks: 2, DevicesPerEngine: 1, EngineDevices: []int{2, 2}}, 4, Assignment{}, "EngineDevices: device 2 already assigned"},
		{"out of range", AssignConfig{EngineRanks: 1, DevicesPerEngine: 1, EngineDevices: []int{8}}, 8, Assignment{}, "device 8 out of range [0, 8)"},
		{"negative index", AssignConfig{DevicesPerEngine: 1, TrainerDevices: []int{-1}}, 8, Assignment{}, "device -1 out of range"},
		{"too few for engines", AssignConfig{EngineRanks: 3, DevicesPerEngine: 2}, 4, Assignment{}, "need 6 devices, node has 4"},
		{"too few for trainers", AssignConfig{EngineRanks: 3, DevicesPerEngine: 1, TrainerRanks: 2}, 4, Assignment{}, "only 1 of 4 devices left"},
		{"engine list length", AssignConfig{EngineRanks: 2, DevicesPerEngine: 2, EngineDevices: []int{0, 1, 2}}, 8, Assignment{}, "EngineDevices has 3 entries, want EngineRanks·DevicesPerEngine = 4"},
		{"trainer list length", AssignConfig{DevicesPerEngine: 1, TrainerRanks: 2, TrainerDevices: []int{0}}, 8, Assignment{}, "TrainerDevices has 1 entries, want TrainerRanks = 2"},
		{"zero tp", AssignConfig{EngineRanks: 1}, 8, Assignment{}, "DevicesPerEngine 0"},
		{"negative engines", AssignConfig{EngineRanks: -1, DevicesPerEngine: 1}, 8, Assignment{}, "EngineRanks -1"},
		{"negative trainers", AssignConfig{DevicesPerEngine: 1, TrainerRanks: -2}, 8, Assignment{}, "TrainerRanks -2"},
		{"negative devices", DefaultAssignConfig(), -1, Assignment{}, "device count -1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Assign(c.cfg, c.devices)
			if c.err != "" {
				if !errors.Is(err, ErrAssign) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want ErrAssign containing %q", err, c.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

// TestAssignDoesNotAlias: the result owns its slices, so callers can keep
// and modify the config.
func TestAssignDoesNotAlias(t *testing.T) {
	cfg := AssignConfig{EngineRanks: 1, DevicesPerEngine: 1, EngineDevices: []int{1}, TrainerDevices: []int{0}}
	a, err := Assign(cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	cfg.EngineDevices[0], cfg.TrainerDevices[0] = 9, 9
	if a.Engines[0][0] != 1 || a.Trainers[0] != 0 {
		t.Fatalf("assignment changed with the config: %+v", a)
	}
}
