package config

import (
	"reflect"
	"strings"
)

// suggest returns the known key closest to an unknown one, or "" when none
// is close enough to be a plausible typo. Keys are compared ignoring case,
// '_' and '-', so maxStalenessSteps finds max_staleness_steps.
func suggest(unknown string, known []string) string {
	u := normalizeKey(unknown)
	best, bestDist := "", -1
	for _, k := range known {
		d := editDistance(u, normalizeKey(k))
		// Allow about one edit per five characters of the candidate: a
		// typo in a long key, but not a different short word ("foo" ≠ "log").
		if d > 1+len(k)/5 {
			continue
		}
		if bestDist < 0 || d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// suggestElsewhere finds a key spelled like unknown in another section of
// the config (a key put in the wrong section) and returns its full path.
func suggestElsewhere(root reflect.Type, unknown string) string {
	u := normalizeKey(unknown)
	var found string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for _, f := range fieldsOf(t) {
			p := joinPath(prefix, f.key)
			if found == "" && prefix != "" && normalizeKey(f.key) == u {
				found = p
			}
			if f.typ.Kind() == reflect.Struct && f.typ != durationType {
				walk(f.typ, p)
			}
		}
	}
	walk(root, "")
	return found
}

func normalizeKey(s string) string {
	return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s))
}

// editDistance is the Levenshtein distance between a and b, in runes.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

func joinPath(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}
