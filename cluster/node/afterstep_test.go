package node

import (
	"context"
	"errors"
	"testing"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/model"
)

// okPublisher publishes every version.
type okPublisher struct{}

func (okPublisher) Publish(context.Context, publisher.Weights, int64) error { return nil }

// TestAfterStepErrorNamesTheCheckpoint: the after-step hook's failure
// (the cluster term's checkpoint of a published version) reaches the
// trainer as trainer.AfterPublishError, so its give-up says the
// checkpoint failed, not the publish. (execAfterStep wraps the same way;
// it needs a started trainer child for its state directory.)
func TestAfterStepErrorNamesTheCheckpoint(t *testing.T) {
	errUpload := errors.New("upload cut")
	pubs := map[string]publisher.Publisher{
		"in-process": afterStepPublisher{Publisher: okPublisher{},
			after: func(context.Context, *model.Trainer, int64) error { return errUpload }},
	}
	for name, p := range pubs {
		err := p.Publish(context.Background(), publisher.Weights{}, 3)
		var after *trainer.AfterPublishError
		if !errors.As(err, &after) || after.Version != 3 || after.What != "checkpoint" || !errors.Is(err, errUpload) {
			t.Errorf("%s: Publish = %v, want a trainer.AfterPublishError of version 3's checkpoint wrapping %v", name, err, errUpload)
		}
	}
}
