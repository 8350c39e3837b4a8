package front

// Test hooks for package front_test (the fronts' tests run a real
// proxy.Router, which package front cannot import).

// WatchDelay is watchDelay.
const WatchDelay = watchDelay
