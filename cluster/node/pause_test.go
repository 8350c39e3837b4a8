package node

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/cluster/localengine"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/wiring"
)

// A "wait" pause cut short (its context ended while a request still ran)
// must not leave the engine paused: the update fails, and the engine goes
// on serving its current weights instead of nothing.
func TestCutShortWaitPauseResumes(t *testing.T) {
	cfg := config.Default()
	cfg.Engines.Count = 1
	cfg.Engines.TimeScale = 1 // real time: the request below runs for seconds
	m, err := wiring.InitialPolicy("", 1)
	if err != nil {
		t.Fatal(err)
	}
	es, err := localengine.Start(cfg.Engines, m, 1, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer localengine.StopAll(es)
	le := es[0]
	done := make(chan struct{})
	go func() {
		defer close(done)
		body := []byte(`{"model":"` + config.DefaultEngines().ServedModelName + `","prompt":[1,2,3],"max_tokens":250,"ignore_eos":true}`)
		resp, err := http.Post(le.URL+"/v1/completions", "application/json", bytes.NewReader(body))
		if err == nil {
			resp.Body.Close()
		}
	}()
	clustertest.WaitFor(t, 10*time.Second, "the request to run", func() bool { return le.E.Stats().Running > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	p := &inProcPublisher{mode: "wait"}
	err = p.update(ctx, le, nil, 1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("update with a wait pause cut short: %v, want DeadlineExceeded", err)
	}
	if le.E.IsPaused() {
		t.Fatal("the engine was left paused after the wait was cut short")
	}
	_ = le.Stop(context.Background())
	<-done
}
