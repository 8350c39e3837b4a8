package node

import (
	"testing"

	"github.com/asyncrl/asyncrl/cluster/enginehost"
)

// The engine host reads the LoadWeights URI and the term's base with the
// scheme and prefix the holder's remote.go writes them with.
func TestEngineHostSharesTheHolderProtocol(t *testing.T) {
	if natsObjectScheme != enginehost.ObjectScheme || termBasePrefix != enginehost.BasePrefix {
		t.Fatalf("holder writes %q/%q, engine host reads %q/%q", natsObjectScheme, termBasePrefix, enginehost.ObjectScheme, enginehost.BasePrefix)
	}
}
