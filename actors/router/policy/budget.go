package policy

// RetryBudget bounds retries to a fraction of requests plus a burst (a
// token bucket refilled by requests, not by time): every request earns
// Ratio tokens up to Burst, every retry spends one. When a whole fleet
// fails, retries stop at Ratio × requests instead of multiplying the
// load (a retry storm). Like Core it is not safe for concurrent use.
type RetryBudget struct {
	ratio, burst, tokens float64
}

// NewRetryBudget returns a full budget.
func NewRetryBudget(ratio float64, burst int) *RetryBudget {
	return &RetryBudget{ratio: ratio, burst: float64(burst), tokens: float64(burst)}
}

// Request records one request, earning Ratio tokens.
func (b *RetryBudget) Request() { b.tokens = min(b.tokens+b.ratio, b.burst) }

// Retry spends a token and reports whether a retry is allowed.
func (b *RetryBudget) Retry() bool {
	if b.tokens < 1-1e-9 { // ten earnings of 0.1 are one token, float or not
		return false
	}
	b.tokens = max(b.tokens-1, 0)
	return true
}
