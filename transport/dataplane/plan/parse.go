package plan

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseLayout reads a layout written as comma-separated parallel sizes,
// e.g. "tp4,pp2,ep8" or "dp16,ep16"; a size not written is 1, except DP:
// when world > 0 and DP is not written, DP is world/(TP·PP) (the ranks
// left over), and when both are given they must agree.
func ParseLayout(spec string, world int) (Layout, error) {
	l := Layout{TP: 1, PP: 1, DP: 1, EP: 1}
	seen := map[string]bool{}
	for _, f := range strings.Split(spec, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		if len(f) < 3 {
			return Layout{}, fmt.Errorf("%w: %q: want items like tp4, pp2, dp2, ep8", ErrBadLayout, spec)
		}
		key := f[:2]
		n, err := strconv.Atoi(f[2:])
		if err != nil || n < 1 {
			return Layout{}, fmt.Errorf("%w: %q: %s needs a size >= 1", ErrBadLayout, spec, f)
		}
		if seen[key] {
			return Layout{}, fmt.Errorf("%w: %q: %s given twice", ErrBadLayout, spec, key)
		}
		seen[key] = true
		switch key {
		case "tp":
			l.TP = n
		case "pp":
			l.PP = n
		case "dp":
			l.DP = n
		case "ep":
			l.EP = n
		default:
			return Layout{}, fmt.Errorf("%w: %q: unknown parallelism %q (tp, pp, dp, ep)", ErrBadLayout, spec, key)
		}
	}
	if world <= 0 {
		return l, nil
	}
	if !seen["dp"] {
		if world%(l.TP*l.PP) != 0 {
			return Layout{}, fmt.Errorf("%w: %q: %d ranks are not a multiple of TP·PP = %d", ErrBadLayout, spec, world, l.TP*l.PP)
		}
		l.DP = world / (l.TP * l.PP)
	} else if l.World() != world {
		return Layout{}, fmt.Errorf("%w: %q: TP·PP·DP = %d ranks, but %d GPUs", ErrBadLayout, spec, l.World(), world)
	}
	return l, nil
}
