package server_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/tinker/client"
	"github.com/asyncrl/asyncrl/tinker/server"
)

// testConfig is a small run config: one built-in engine that does not
// sleep its modelled latency, data under dir.
func testConfig(dir string) config.Config {
	c := config.Default()
	c.Run.DataDir = dir
	c.Engines.Count = 1
	c.Engines.TimeScale = 0
	c.Engines.MaxNumSeqs = 64
	c.Tinker.Listen = "127.0.0.1:0"
	c.Tinker.LongPoll = 2 * time.Second
	c.Tinker.SampleConcurrency = 16
	c.Tinker.SampleQueue = 4096
	c.Tinker.DataDir = filepath.Join(dir, "tinker")
	return c
}

func start(t *testing.T, c config.Config, apiKey string) (*server.Running, *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := server.Start(ctx, c, server.Options{APIKey: apiKey, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, &client.Client{BaseURL: r.URL, APIKey: apiKey}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newModel opens a session and creates a model of the built-in base with
// LoRA rank on it through the client.
func newModel(t *testing.T, ctx context.Context, c *client.Client, rank int) (sess, model string) {
	t.Helper()
	sess, err := c.CreateSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	model, err = c.CreateModel(ctx, sess, "asyncrl-policy", 0, rank)
	if err != nil {
		t.Fatal(err)
	}
	return sess, model
}
