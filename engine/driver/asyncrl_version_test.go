package driver

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// An asyncrl engine driven as kind vllm (or builtin) has every built-in
// feature whatever its release number: asyncrl's numbers are not vLLM's,
// and an unstamped build says "dev".
func TestAsyncrlEngineHasItsOwnFeatures(t *testing.T) {
	for _, ver := range []string{"dev", "0.3.0"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/version" {
				fmt.Fprintf(w, `{"version":%q,"engine":"asyncrl"}`, ver)
				return
			}
			http.NotFound(w, r)
		}))
		for _, kind := range []Kind{KindVLLM, KindBuiltin} {
			d, err := New(kind, srv.URL, Options{})
			if err != nil {
				t.Fatal(err)
			}
			c, err := d.Capabilities(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !c.Known || !c.Has(FeatureResetRunning) || !c.Has(FeaturePauseModes) || c.Kind != kind {
				t.Errorf("%s engine reporting asyncrl %q: %+v, want every built-in feature", kind, ver, c)
			}
			if !ResetsRunning(context.Background(), d) {
				t.Errorf("%s engine reporting asyncrl %q cannot reset running requests", kind, ver)
			}
		}
		srv.Close()
	}
}
