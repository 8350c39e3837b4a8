package config

import (
	"reflect"
	"testing"
)

// FuzzParse: no input panics the loader, and every config it accepts
// survives Marshal → Parse unchanged (the printer and loader agree).
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"",
		"run:\n  steps: 3\n",
		"trainer:\n  max_stalness_steps: 4\n",
		"router:\n  session_ttl: 90s\n  policy: round_robin\n",
		"rollout:\n  dataset: 'a: #b'\n  temperature: 0.7\n",
		"cluster:\n  roles: [engine, router]\n  join: ['10.0.0.1:7946']\n",
		"a: &x {b: *x}\n",
		"run: [1, {2: 3}]\n",
		"- - -\n",
		"run:\n  id: \"\\u00e9\"\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		out, err := Marshal(c)
		if err != nil {
			t.Fatalf("Marshal of a parsed config: %v", err)
		}
		back, err := Parse("again.yaml", out)
		if err != nil {
			t.Fatalf("re-parse: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(back, c) {
			t.Fatalf("round trip differs:\n%+v\n%+v\n%s", c, back, out)
		}
	})
}
