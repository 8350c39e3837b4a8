package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/tinker"
	"github.com/asyncrl/asyncrl/tinker/client"
)

// TestTrainingFuturesSurviveRestart: the server stops with training
// futures queued; a new server on the same JetStream store answers every
// one of them — done with its result, or failed naming the restart — and
// none is unknown.
// queuedData is the data of each call queueForwardBackward submits.
const queuedData = 16

// queueForwardBackward creates a session and a model and submits n
// cross-entropy forward_backward calls (seq ids 1…n) without waiting.
func queueForwardBackward(t *testing.T, ctx context.Context, c *client.Client, n int) (model string, ids []string) {
	t.Helper()
	_, model = newModel(t, ctx, c, 4)
	in := tinker.ForwardBackwardInput{LossFn: "cross_entropy"}
	for range queuedData {
		in.Data = append(in.Data, sftDatum("rev abcd=", "dcba"))
	}
	for i := range n {
		seq := int64(i + 1)
		id, err := c.Submit(ctx, "forward_backward", tinker.ForwardBackwardRequest{ModelID: model, SeqID: &seq, ForwardBackwardInput: &in})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return model, ids
}

func TestTrainingFuturesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	r1, c := start(t, cfg, "")
	ctx := ctxT(t)
	model, ids := queueForwardBackward(t, ctx, c, 40)
	// The first finishes before the stop: its result must survive as is.
	var firstOut tinker.ForwardBackwardOutput
	if err := c.Wait(ctx, ids[0], &firstOut); err != nil {
		t.Fatal(err)
	}
	r1.Close()

	_, c2 := start(t, cfg, "")
	var done, failed int
	for _, id := range ids {
		var out tinker.ForwardBackwardOutput
		err := c2.Wait(ctx, id, &out)
		var fe *client.FutureError
		switch {
		case err == nil:
			if len(out.LossFnOutputs) != queuedData {
				t.Fatalf("%s: done with %d outputs, want %d", id, len(out.LossFnOutputs), queuedData)
			}
			done++
		case errors.As(err, &fe):
			if !strings.Contains(fe.RequestFailedResponse.Error, "restarted") || fe.Category != "server" {
				t.Fatalf("%s failed without naming the restart: %v", id, err)
			}
			failed++
		default:
			t.Fatalf("%s is not answerable after the restart: %v", id, err)
		}
	}
	t.Logf("after restart: %d done, %d failed (restart)", done, failed)
	if done == 0 || failed == 0 {
		t.Fatalf("want both finished and interrupted futures, got %d done, %d failed", done, failed)
	}
	if _, err := c2.GetInfo(ctx, model); err == nil {
		t.Fatal("the model survived the restart in memory; the failure message would be wrong")
	}
}
