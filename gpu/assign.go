package gpu

import (
	"errors"
	"fmt"
)

// ErrAssign is matched by every error from Assign.
var ErrAssign = errors.New("gpu: invalid device assignment")

// AssignConfig says how a node's devices are split between inference
// engine ranks and trainer ranks.
type AssignConfig struct {
	// EngineRanks is the number of engine ranks on this node (>= 0).
	EngineRanks int
	// DevicesPerEngine is each engine rank's device count, its
	// tensor-parallel size (>= 1).
	DevicesPerEngine int
	// TrainerRanks is the number of trainer ranks (one device each). 0 means
	// one rank per device left after the engines (none if none is left: the
	// trainer runs elsewhere).
	TrainerRanks int
	// EngineDevices, when set, lists the engine devices explicitly instead
	// of taking [0, EngineRanks·DevicesPerEngine): rank r gets entries
	// [r·DevicesPerEngine, (r+1)·DevicesPerEngine). Its length must be
	// EngineRanks·DevicesPerEngine.
	EngineDevices []int
	// TrainerDevices, when set, lists the trainer devices explicitly instead
	// of taking the ones after the engines; rank r gets entry r. With
	// TrainerRanks 0 its length sets the rank count, else it must equal it.
	TrainerDevices []int
}

// DefaultAssignConfig: one single-device engine, the trainer on the rest.
func DefaultAssignConfig() AssignConfig {
	return AssignConfig{EngineRanks: 1, DevicesPerEngine: 1}
}

// Assignment is the device indices of each rank.
type Assignment struct {
	// Engines[r] holds the devices of engine rank r.
	Engines [][]int `json:"engines"`
	// Trainers[r] is the device of trainer rank r.
	Trainers []int `json:"trainers"`
}

// Assign maps ranks to the indices of a node with devices GPUs. A device
// serves at most one rank: overlapping, repeated or out-of-range indices and
// too few devices are errors naming the field.
func Assign(cfg AssignConfig, devices int) (Assignment, error) {
	if err := cfg.checkCounts(devices); err != nil {
		return Assignment{}, err
	}
	eng, err := cfg.engineDevices(devices)
	if err != nil {
		return Assignment{}, err
	}
	c := claims{devices: devices, used: make(map[int]string, devices)}
	if err := c.claim("EngineDevices", eng); err != nil {
		return Assignment{}, err
	}
	tr, err := cfg.trainerDevices(devices, c.used)
	if err != nil {
		return Assignment{}, err
	}
	if err := c.claim("TrainerDevices", tr); err != nil {
		return Assignment{}, err
	}

	a := Assignment{Engines: make([][]int, cfg.EngineRanks), Trainers: append([]int{}, tr...)}
	for r := range a.Engines {
		a.Engines[r] = append([]int(nil), eng[r*cfg.DevicesPerEngine:(r+1)*cfg.DevicesPerEngine]...)
	}
	return a, nil
}

// checkCounts refuses negative counts and an engine without a device.
func (cfg AssignConfig) checkCounts(devices int) error {
	if devices < 0 {
		return fmt.Errorf("%w: device count %d: want >= 0", ErrAssign, devices)
	}
	if cfg.EngineRanks < 0 {
		return fmt.Errorf("%w: EngineRanks %d: want >= 0", ErrAssign, cfg.EngineRanks)
	}
	if cfg.DevicesPerEngine < 1 {
		return fmt.Errorf("%w: DevicesPerEngine %d: want >= 1", ErrAssign, cfg.DevicesPerEngine)
	}
	if cfg.TrainerRanks < 0 {
		return fmt.Errorf("%w: TrainerRanks %d: want >= 0", ErrAssign, cfg.TrainerRanks)
	}
	return nil
}

// engineDevices is EngineDevices, or the first EngineRanks·DevicesPerEngine
// devices when it is nil.
func (cfg AssignConfig) engineDevices(devices int) ([]int, error) {
	nEng := cfg.EngineRanks * cfg.DevicesPerEngine
	eng := cfg.EngineDevices
	if eng == nil {
		if nEng > devices {
			return nil, fmt.Errorf("%w: %d engine ranks × DevicesPerEngine %d need %d devices, node has %d",
				ErrAssign, cfg.EngineRanks, cfg.DevicesPerEngine, nEng, devices)
		}
		return seq(0, nEng), nil
	}
	if len(eng) != nEng {
		return nil, fmt.Errorf("%w: EngineDevices has %d entries, want EngineRanks·DevicesPerEngine = %d", ErrAssign, len(eng), nEng)
	}
	return eng, nil
}

// trainerDevices is TrainerDevices, or the devices the engines left (the
// first TrainerRanks of them when set) when it is nil.
func (cfg AssignConfig) trainerDevices(devices int, used map[int]string) ([]int, error) {
	tr := cfg.TrainerDevices
	switch {
	case tr != nil && cfg.TrainerRanks != 0 && len(tr) != cfg.TrainerRanks:
		return nil, fmt.Errorf("%w: TrainerDevices has %d entries, want TrainerRanks = %d", ErrAssign, len(tr), cfg.TrainerRanks)
	case tr == nil:
		for d := 0; d < devices; d++ {
			if _, ok := used[d]; !ok {
				tr = append(tr, d)
			}
		}
		if cfg.TrainerRanks > 0 {
			if len(tr) < cfg.TrainerRanks {
				return nil, fmt.Errorf("%w: TrainerRanks %d: only %d of %d devices left after the engines",
					ErrAssign, cfg.TrainerRanks, len(tr), devices)
			}
			tr = tr[:cfg.TrainerRanks]
		}
	}
	return tr, nil
}

// claims records which field claimed each device of a node with devices
// GPUs.
type claims struct {
	devices int
	used    map[int]string
}

// claim assigns list's devices to field, refusing one out of range or
// already claimed.
func (c claims) claim(field string, list []int) error {
	for _, d := range list {
		if d < 0 || d >= c.devices {
			return fmt.Errorf("%w: %s: device %d out of range [0, %d)", ErrAssign, field, d, c.devices)
		}
		if prev, ok := c.used[d]; ok {
			return fmt.Errorf("%w: %s: device %d already assigned in %s", ErrAssign, field, d, prev)
		}
		c.used[d] = field
	}
	return nil
}

func seq(from, to int) []int {
	out := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}
