package natsbus

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyncrl/asyncrl/transport"
)

// TestMapErrUnavailable: JetStream's 503 answers (a stream or the meta
// leader temporarily unavailable, as after a server's death) map to
// transport.ErrUnavailable, which callers may retry; JetStream not
// enabled (10076, 10039: 503 as well) and other API errors (a 404 stream
// not found, a 400) stay as they are and are not transient.
func TestMapErrUnavailable(t *testing.T) {
	for _, c := range []struct {
		err       error
		transient bool
	}{
		{&jetstream.APIError{Code: 503, ErrorCode: jetstream.ErrorCode(10008), Description: "JetStream system temporarily unavailable"}, true},
		{fmt.Errorf("get: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008}), true},
		// 503s too, but a server without JetStream (an external NATS
		// started without -js) stays so: not transient.
		{jetstream.ErrJetStreamNotEnabled, false},
		{jetstream.ErrJetStreamNotEnabledForAccount, false},
		{&jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabled, Description: "jetstream not enabled"}, false},
		{&jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeStreamNotFound, Description: "stream not found"}, false},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeBadRequest}, false},
		{errors.New("something else"), false},
	} {
		got := mapErr(c.err)
		if errors.Is(got, transport.ErrUnavailable) != c.transient || transport.Transient(got) != c.transient {
			t.Errorf("mapErr(%v) = %v: unavailable/transient %v, %v; want %v", c.err, got,
				errors.Is(got, transport.ErrUnavailable), transport.Transient(got), c.transient)
		}
		if !errors.Is(got, c.err) {
			t.Errorf("mapErr(%v) = %v lost its cause", c.err, got)
		}
	}
}
