package delta

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/asyncrl/asyncrl/weights/store"
)

// Prune deletes every delta and full version below before from st (a
// publisher keeping its store bounded on a long run), and nothing else:
// other objects (a base checkpoint, LoRA adapters) stay. The caller picks
// before so that nobody needs what goes: a full checkpoint at before
// exists, and every engine already serves at least before — a receiver
// that resets later starts from that full checkpoint (its reset finds the
// deltas below it gone). It returns the number of objects deleted.
func Prune(ctx context.Context, st store.Store, before int64) (int, error) {
	keys, err := st.List(ctx, "")
	if err != nil {
		return 0, fmt.Errorf("delta: prune: %w", err)
	}
	// Manifests first: a version is committed while its manifest exists,
	// so a reader never finds a listed version whose payload is gone.
	slices.SortStableFunc(keys, func(a, b string) int {
		return cmpBool(!strings.HasSuffix(a, "/"+ManifestName), !strings.HasSuffix(b, "/"+ManifestName))
	})
	n := 0
	for _, k := range keys {
		d, _, ok := strings.Cut(k, "/")
		if !ok {
			continue
		}
		v, isDelta := parseVersionDir(d, "delta-")
		if !isDelta {
			if v, ok = parseVersionDir(d, KindFull+"-"); !ok {
				continue
			}
		}
		if v >= before {
			continue
		}
		if err := st.Delete(ctx, k); err != nil {
			return n, fmt.Errorf("delta: prune %s: %w", k, err)
		}
		n++
	}
	return n, nil
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
