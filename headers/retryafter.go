package headers

import (
	"net/http"
	"strconv"
	"time"
)

// AppendRetryAfter appends d as Retry-After delay-seconds: whole seconds rounded up, so
// any positive d gives at least 1 and a client never retries early; zero or negative d
// gives 0.
func AppendRetryAfter(dst []byte, d time.Duration) []byte {
	return strconv.AppendInt(dst, ceilSeconds(d), 10)
}

// RetryAfter returns the delay to announce in Retry-After when the limits in denying
// refused a request and the limiter estimated retry: the largest of retry, the Reset of
// every denying limit that sends t (all of them must allow before a retry can succeed),
// and one second. Written with AppendRetryAfter, the result is therefore never earlier
// than any denying policy's t, as the draft asks, and never tells a client to come back
// at once. Add any jitter to retry before calling; the guarantee still holds.
func RetryAfter(denying []Limit, retry time.Duration) time.Duration {
	d := max(retry, time.Second)
	for i := range denying {
		if !denying[i].Concurrency {
			d = max(d, denying[i].Reset)
		}
	}
	return d
}

// Legacy field names, canonical so they can index an http.Header directly.
const (
	LegacyLimitFieldName     = "X-Ratelimit-Limit"
	LegacyRemainingFieldName = "X-Ratelimit-Remaining"
	LegacyResetFieldName     = "X-Ratelimit-Reset"
)

// Closest returns the index in ls of the limit closest to exhaustion, the one the legacy
// fields describe: the lowest Remaining, ties going to the longer Reset. Concurrency limits
// are chosen only when nothing else is there, since they have no reset time. It returns
// -1 if ls is empty.
func Closest(ls []Limit) int {
	best := -1
	for i := range ls {
		if best < 0 || closer(&ls[i], &ls[best]) {
			best = i
		}
	}
	return best
}

func closer(a, b *Limit) bool {
	if a.Concurrency != b.Concurrency {
		return !a.Concurrency
	}
	ra, rb := max(a.Remaining, 0), max(b.Remaining, 0)
	if ra != rb {
		return ra < rb
	}
	return a.Reset > b.Reset
}

// SetLegacy sets X-RateLimit-Limit (quota), X-RateLimit-Remaining and X-RateLimit-Reset
// (seconds until Remaining rises, rounded up; 0 for concurrency limits) on h, replacing
// any earlier values. Pick l with Closest. Negative numbers are sent as 0. It costs two
// allocations: one string holding all three numbers and one backing array for the three
// value slices.
func SetLegacy(h http.Header, quota int64, l Limit) {
	var buf [3 * 20]byte
	b := strconv.AppendInt(buf[:0], max(quota, 0), 10)
	n1 := len(b)
	b = strconv.AppendInt(b, max(l.Remaining, 0), 10)
	n2 := len(b)
	var reset int64
	if !l.Concurrency {
		reset = ceilSeconds(l.Reset)
	}
	b = strconv.AppendInt(b, reset, 10)
	s := string(b)
	vs := [...]string{s[:n1], s[n1:n2], s[n2:]}
	arr := vs[:] // escapes: one allocation for all three
	h[LegacyLimitFieldName] = arr[0:1:1]
	h[LegacyRemainingFieldName] = arr[1:2:2]
	h[LegacyResetFieldName] = arr[2:3:3]
}
