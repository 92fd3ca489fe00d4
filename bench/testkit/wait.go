package testkit

import "time"

// WaitFor polls cond every few milliseconds until it holds, and fails the test with
// "waited D for WHAT" if it still does not after d. It is for what a test cannot be told
// of (another process's state, a timer in the code under test); where a channel or a
// callback can say it, wait on that instead.
func WaitFor(t T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
