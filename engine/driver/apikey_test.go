package driver_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/engine/driver"
)

// TestDriverSendsAPIKey: against the built-in engine with an API key, a
// driver with the key pauses and resumes it; one without gets a 401
// RouteError whose hint names the setting, and neither error carries the
// key.
func TestDriverSendsAPIKey(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.TimeScale = 0
	e, err := engine.New(cfg, engine.NewHashModel(1), engine.WithAPIKey("k-secret-9"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	srv := httptest.NewServer(e.Handler())
	defer srv.Close()
	defer http.DefaultClient.CloseIdleConnections()

	bare, err := driver.New(driver.KindBuiltin, srv.URL, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = bare.Pause(ctx, driver.PauseKeep, false)
	re := routeError(t, err)
	if re.Status != http.StatusUnauthorized || !strings.Contains(re.Hint, "api_key_file") {
		t.Errorf("without the key: %v (hint %q), want 401 naming api_key_file", err, re.Hint)
	}
	if e.IsPaused() {
		t.Fatal("a refused pause paused the engine")
	}
	wrong, _ := driver.New(driver.KindBuiltin, srv.URL, driver.Options{APIKey: "k-wrong-7"})
	if err := wrong.Health(ctx); err == nil || strings.Contains(err.Error(), "k-wrong-7") {
		t.Errorf("wrong key: %v (want a 401 that does not print the key)", err)
	}
	d, err := driver.New(driver.KindBuiltin, srv.URL, driver.Options{APIKey: "k-secret-9"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Pause(ctx, driver.PauseKeep, false); err != nil {
		t.Fatalf("with the key: %v", err)
	}
	if !e.IsPaused() {
		t.Fatal("pause with the key did not pause")
	}
	if err := d.Resume(ctx); err != nil {
		t.Fatal(err)
	}
}
