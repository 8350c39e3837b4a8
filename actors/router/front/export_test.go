package front

// Test hooks for package front_test (the fronts' tests run a real
// proxy.Router, which package front cannot import).

// WatchDelay is watchDelay.
const WatchDelay = watchDelay

// SetLoopMaxAnswer sets the loop front's buffered-answer limit until
// restore is called.
func SetLoopMaxAnswer(n int64) (restore func()) {
	old := loopMaxAnswer
	loopMaxAnswer = n
	return func() { loopMaxAnswer = old }
}

// OnNewServer makes f see every Server New builds until restore is called.
func OnNewServer(f func(*Server)) (restore func()) {
	newServerHook = f
	return func() { newServerHook = nil }
}
