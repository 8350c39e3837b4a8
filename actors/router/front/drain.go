package front

import "io"

// retriedDrain is how much of an answer the router retries elsewhere (a
// 503) is read before its body is closed: a short body is read whole so
// its upstream connection is reused; a longer one is not read on (its
// connection is closed instead).
const retriedDrain = 64 << 10

// DrainRetried reads and closes the body of an answer the router retries
// elsewhere (a 503): every front drains it the same way.
func DrainRetried(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, retriedDrain))
	_ = body.Close()
}
