package limiter

import (
	"context"
	"testing"
	"time"
)

// t0 is the synthetic instant every table starts from: a Unix day boundary, so that
// windows of a second, minute, hour or day all start there.
var t0 = time.Unix(20000*86400, 0)

const ms = time.Millisecond

// step is one row of a step table: at t0+at, ask for cost units (or give back release
// units of a concurrency policy) and expect want.
type step struct {
	at      time.Duration
	cost    int64
	release int64
	want    want
}

// want is the part of a Decision a step table checks.
type want struct {
	allowed    bool
	remaining  int64
	retryAfter time.Duration
	resetAfter time.Duration
	delay      time.Duration
}

func got(d Decision) want {
	return want{d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay}
}

func mustPolicy(t testing.TB, p Policy) *Policy {
	t.Helper()
	pol, err := NewPolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

func mustLocal(t testing.TB, cfg Config) *Local {
	t.Helper()
	s, err := NewLocal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSteps(t *testing.T) {
	tests := []struct {
		name   string
		policy Policy
		steps  []step
	}{
		{
			name:   "token_bucket 3 per 3s",
			policy: Policy{Algorithm: TokenBucket, Quota: 3, Window: 3 * time.Second},
			steps: []step{
				{at: 0, cost: 1, want: want{allowed: true, remaining: 2, resetAfter: time.Second}},
				{at: 0, cost: 1, want: want{allowed: true, remaining: 1, resetAfter: time.Second}},
				{at: 0, cost: 1, want: want{allowed: true, remaining: 0, resetAfter: time.Second}},
				{at: 0, cost: 1, want: want{remaining: 0, retryAfter: time.Second, resetAfter: time.Second}},
				{at: 0, cost: 4, want: want{remaining: 0, retryAfter: Never, resetAfter: time.Second}},
				{at: 0, cost: 0, want: want{allowed: true, remaining: 0, resetAfter: time.Second}},
				{at: time.Second - 1, cost: 1, want: want{retryAfter: 1, resetAfter: 1}},
				{at: time.Second, cost: 1, want: want{allowed: true, remaining: 0, resetAfter: time.Second}},
				{at: 2500 * ms, cost: 1, want: want{allowed: true, remaining: 0, resetAfter: 500 * ms}},
				{at: 10 * time.Second, cost: 0, want: want{allowed: true, remaining: 3}},
				{at: 10 * time.Second, cost: 3, want: want{allowed: true, remaining: 0, resetAfter: time.Second}},
			},
		},
		{
			// One token every 333,333,333⅓ ns: x/time/rate admits a request less than
			// 1 ns early, and so does token_bucket.
			name:   "token_bucket 3 per 1s, sub-nanosecond refill",
			policy: Policy{Algorithm: TokenBucket, Quota: 3, Window: time.Second},
			steps: []step{
				{at: 0, cost: 3, want: want{allowed: true, remaining: 0, resetAfter: 333333333}},
				{at: 333333332, cost: 1, want: want{retryAfter: 1, resetAfter: 1}},
				{at: 333333333, cost: 1, want: want{allowed: true, remaining: 0, resetAfter: 333333333}},
				{at: 333333333, cost: 1, want: want{retryAfter: 333333333, resetAfter: 333333333}},
			},
		},
		{
			name:   "gcra 4 per 4s, burst 2",
			policy: Policy{Algorithm: GCRA, Quota: 4, Window: 4 * time.Second, Burst: 2},
			steps: []step{
				{at: 0, cost: 1, want: want{allowed: true, remaining: 1, resetAfter: time.Second}},
				{at: 0, cost: 1, want: want{allowed: true, remaining: 0, resetAfter: time.Second}},
				{at: 0, cost: 1, want: want{retryAfter: time.Second, resetAfter: time.Second}},
				{at: 0, cost: 3, want: want{retryAfter: Never, resetAfter: time.Second}},
				{at: time.Second, cost: 1, want: want{allowed: true, remaining: 0, resetAfter: time.Second}},
				{at: 3 * time.Second, cost: 0, want: want{allowed: true, remaining: 2}},
			},
		},
		{
			name:   "fixed_window 2 per 10s",
			policy: Policy{Algorithm: FixedWindow, Quota: 2, Window: 10 * time.Second},
			steps: []step{
				{at: 0, cost: 1, want: want{allowed: true, remaining: 1, resetAfter: 10 * time.Second}},
				{at: 9 * time.Second, cost: 1, want: want{allowed: true, remaining: 0, resetAfter: time.Second}},
				{at: 9500 * ms, cost: 1, want: want{retryAfter: 500 * ms, resetAfter: 500 * ms}},
				{at: 10 * time.Second, cost: 1, want: want{allowed: true, remaining: 1, resetAfter: 10 * time.Second}},
				{at: 10 * time.Second, cost: 1, want: want{allowed: true, remaining: 0, resetAfter: 10 * time.Second}},
				{at: 10 * time.Second, cost: 3, want: want{retryAfter: Never, resetAfter: 10 * time.Second}},
				{at: 25 * time.Second, cost: 0, want: want{allowed: true, remaining: 2}},
			},
		},
		{
			name:   "sliding_window 10 per 10s",
			policy: Policy{Algorithm: SlidingWindow, Quota: 10, Window: 10 * time.Second},
			steps: []step{
				// Ten now; the estimate stays 10 for this window, then the count weighs
				// 10×(1−f) in the next: one unit frees per second.
				{at: 0, cost: 10, want: want{allowed: true, remaining: 0, resetAfter: 11 * time.Second}},
				{at: 5 * time.Second, cost: 1, want: want{retryAfter: 6 * time.Second, resetAfter: 6 * time.Second}},
				{at: 11 * time.Second, cost: 1, want: want{allowed: true, remaining: 0, resetAfter: time.Second}},
				{at: 11 * time.Second, cost: 1, want: want{retryAfter: time.Second, resetAfter: time.Second}},
				{at: 15 * time.Second, cost: 1, want: want{allowed: true, remaining: 3, resetAfter: time.Second}},
				{at: 15 * time.Second, cost: 4, want: want{remaining: 3, retryAfter: time.Second, resetAfter: time.Second}},
				{at: 15500 * ms, cost: 4, want: want{remaining: 3, retryAfter: 500 * ms, resetAfter: 500 * ms}},
				{at: 16 * time.Second, cost: 4, want: want{allowed: true, remaining: 0, resetAfter: time.Second}},
				{at: 35 * time.Second, cost: 0, want: want{allowed: true, remaining: 10}},
			},
		},
		{
			name:   "sliding_log 3 per 10s",
			policy: Policy{Algorithm: SlidingLog, Quota: 3, Window: 10 * time.Second},
			steps: []step{
				{at: 0, cost: 1, want: want{allowed: true, remaining: 2, resetAfter: 10 * time.Second}},
				{at: 2 * time.Second, cost: 2, want: want{allowed: true, remaining: 0, resetAfter: 8 * time.Second}},
				{at: 5 * time.Second, cost: 1, want: want{retryAfter: 5 * time.Second, resetAfter: 5 * time.Second}},
				{at: 5 * time.Second, cost: 2, want: want{retryAfter: 7 * time.Second, resetAfter: 5 * time.Second}},
				{at: 10 * time.Second, cost: 1, want: want{allowed: true, remaining: 0, resetAfter: 2 * time.Second}},
				{at: 10 * time.Second, cost: 4, want: want{retryAfter: Never, resetAfter: 2 * time.Second}},
				{at: 30 * time.Second, cost: 0, want: want{allowed: true, remaining: 3}},
			},
		},
		{
			name:   "leaky_bucket 4 per 4s, max delay 2s",
			policy: Policy{Algorithm: LeakyBucket, Quota: 4, Window: 4 * time.Second, MaxDelay: 2 * time.Second},
			steps: []step{
				{at: 0, cost: 1, want: want{allowed: true, remaining: 2, resetAfter: time.Second}},
				{at: 0, cost: 1, want: want{allowed: true, remaining: 1, resetAfter: time.Second, delay: time.Second}},
				{at: 0, cost: 1, want: want{allowed: true, remaining: 0, resetAfter: time.Second, delay: 2 * time.Second}},
				{at: 0, cost: 1, want: want{retryAfter: time.Second, resetAfter: time.Second}},
				{at: 500 * ms, cost: 1, want: want{retryAfter: 500 * ms, resetAfter: 500 * ms}},
				{at: time.Second, cost: 1, want: want{allowed: true, remaining: 0, resetAfter: time.Second, delay: 2 * time.Second}},
				{at: time.Second, cost: 5, want: want{retryAfter: Never, resetAfter: time.Second}},
				{at: 10 * time.Second, cost: 0, want: want{allowed: true, remaining: 3}},
			},
		},
		{
			name:   "leaky_bucket 2 per 2s, no delay",
			policy: Policy{Algorithm: LeakyBucket, Quota: 2, Window: 2 * time.Second},
			steps: []step{
				{at: 0, cost: 1, want: want{allowed: true, remaining: 0, resetAfter: time.Second}},
				{at: 0, cost: 1, want: want{retryAfter: time.Second, resetAfter: time.Second}},
				{at: time.Second, cost: 1, want: want{allowed: true, remaining: 0, resetAfter: time.Second}},
				{at: 1500 * ms, cost: 1, want: want{retryAfter: 500 * ms, resetAfter: 500 * ms}},
				{at: 2 * time.Second, cost: 0, want: want{allowed: true, remaining: 1}},
			},
		},
		{
			name:   "concurrency 2",
			policy: Policy{Algorithm: Concurrency, Quota: 2},
			steps: []step{
				{cost: 1, want: want{allowed: true, remaining: 1}},
				{cost: 1, want: want{allowed: true, remaining: 0}},
				{cost: 1, want: want{remaining: 0}},
				{cost: 3, want: want{retryAfter: Never}},
				{release: 1, cost: 0, want: want{allowed: true, remaining: 1}},
				{cost: 1, want: want{allowed: true, remaining: 0}},
				{release: 5, cost: 0, want: want{allowed: true, remaining: 2}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.policy.Name = "p"
			p := mustPolicy(t, tt.policy)
			s := mustLocal(t, Config{MaxEntries: 10})
			key := Key{1}
			for i, st := range tt.steps {
				if st.release > 0 {
					s.Release(context.Background(), []Request{{Policy: p, Key: key, Cost: st.release}})
				}
				d, err := s.Take(t0.Add(st.at), Request{Policy: p, Key: key, Cost: st.cost})
				if err != nil {
					t.Fatal(err)
				}
				if got(d) != st.want || d.Limit != p.Quota || d.Policy != p {
					t.Errorf("step %d (t0+%v, cost %d): got %+v, want %+v", i, st.at, st.cost, got(d), st.want)
				}
			}
		})
	}
}
