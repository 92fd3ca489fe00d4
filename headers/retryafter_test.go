package headers

import (
	"net/http"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
)

func TestAppendRetryAfter(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0"},
		{0, "0"},
		{time.Nanosecond, "1"},
		{999 * time.Millisecond, "1"},
		{time.Second, "1"},
		{1001 * time.Millisecond, "2"},
		{20 * time.Second, "20"},
		{24 * time.Hour, "86400"},
	}
	for _, tt := range tests {
		if got := string(AppendRetryAfter(nil, tt.d)); got != tt.want {
			t.Errorf("AppendRetryAfter(%v) = %s; want %s", tt.d, got, tt.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		name    string
		denying []Limit
		retry   time.Duration
		want    time.Duration
	}{
		{"limiter estimate wins", []Limit{{Name: "a", Reset: 2 * time.Second}}, 5 * time.Second, 5 * time.Second},
		{"never earlier than t", []Limit{{Name: "a", Reset: 40 * time.Second}}, 20 * time.Second, 40 * time.Second},
		{"largest denying t", []Limit{{Name: "a", Reset: 3 * time.Second}, {Name: "b", Reset: 9 * time.Second}}, time.Second, 9 * time.Second},
		{"concurrency has no t", []Limit{{Name: "c", Reset: time.Hour, Concurrency: true}}, 2 * time.Second, 2 * time.Second},
		{"at least one second", nil, 0, time.Second},
		{"at least one second, negative", []Limit{{Name: "a", Reset: -time.Second}}, -time.Second, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := RetryAfter(tt.denying, tt.retry)
			if got != tt.want {
				t.Errorf("RetryAfter() = %v; want %v", got, tt.want)
			}
			// The contract of DESIGN §5: Retry-After ≥ every denying policy's t.
			ra, _ := strconv.ParseInt(string(AppendRetryAfter(nil, got)), 10, 64)
			field, err := httpsfv.UnmarshalList([]string{string(AppendLimitField(nil, tt.denying))})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range field {
				it, _ := m.(httpsfv.Item)
				tv, _ := it.Params.Get("t")
				if reset, ok := tv.(int64); ok && ra < reset {
					t.Errorf("Retry-After %d < t=%d of %v", ra, reset, it.Value)
				}
			}
			if ra < 1 {
				t.Errorf("Retry-After %d < 1", ra)
			}
		})
	}
}

func TestRetryAfterNeverBeforeT(t *testing.T) {
	// Sub-second remainders are where rounding could go wrong.
	for _, reset := range []time.Duration{1, 999 * time.Millisecond, time.Second, 1001 * time.Millisecond, 59*time.Second + 1} {
		for _, retry := range []time.Duration{0, 1, 500 * time.Millisecond, reset - 1, reset, reset + 1} {
			ls := []Limit{{Name: "a", Reset: reset}}
			ra, _ := strconv.ParseInt(string(AppendRetryAfter(nil, RetryAfter(ls, retry))), 10, 64)
			if ra < ceilSeconds(reset) {
				t.Errorf("reset %v retry %v: Retry-After %d < t %d", reset, retry, ra, ceilSeconds(reset))
			}
		}
	}
}

func TestClosest(t *testing.T) {
	tests := []struct {
		name string
		ls   []Limit
		want int
	}{
		{"empty", nil, -1},
		{"lowest remaining", []Limit{{Name: "burst", Remaining: 42}, {Name: "daily", Remaining: 913}}, 0},
		{"lowest remaining second", []Limit{{Name: "burst", Remaining: 9}, {Name: "daily", Remaining: 8}}, 1},
		{"tie goes to longer reset", []Limit{{Name: "a", Remaining: 0, Reset: time.Second}, {Name: "b", Remaining: 0, Reset: time.Hour}}, 1},
		{"negative counts as zero", []Limit{{Name: "a", Remaining: 0, Reset: time.Hour}, {Name: "b", Remaining: -4, Reset: time.Second}}, 0},
		{"concurrency last", []Limit{{Name: "c", Remaining: 0, Concurrency: true}, {Name: "a", Remaining: 5}}, 1},
		{"only concurrency", []Limit{{Name: "c", Remaining: 3, Concurrency: true}, {Name: "d", Remaining: 1, Concurrency: true}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Closest(tt.ls); got != tt.want {
				t.Errorf("Closest() = %d; want %d", got, tt.want)
			}
		})
	}
}

func TestSetLegacy(t *testing.T) {
	tests := []struct {
		name  string
		quota int64
		l     Limit
		want  http.Header
	}{
		{
			name: "rate", quota: 100, l: Limit{Name: "burst", Remaining: 42, Reset: 16*time.Second + time.Millisecond},
			want: http.Header{"X-Ratelimit-Limit": {"100"}, "X-Ratelimit-Remaining": {"42"}, "X-Ratelimit-Reset": {"17"}},
		},
		{
			name: "concurrency", quota: 10, l: Limit{Name: "c", Remaining: 0, Reset: time.Hour, Concurrency: true},
			want: http.Header{"X-Ratelimit-Limit": {"10"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"0"}},
		},
		{
			name: "clamped", quota: -1, l: Limit{Name: "a", Remaining: -3, Reset: -time.Second},
			want: http.Header{"X-Ratelimit-Limit": {"0"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"0"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"X-Ratelimit-Limit": {"stale", "values"}}
			SetLegacy(h, tt.quota, tt.l)
			if !reflect.DeepEqual(h, tt.want) {
				t.Errorf("SetLegacy() = %v; want %v", h, tt.want)
			}
			// The canonical names are what net/http itself would use.
			if h.Get("x-ratelimit-reset") != tt.want["X-Ratelimit-Reset"][0] {
				t.Errorf("Get(x-ratelimit-reset) = %q", h.Get("x-ratelimit-reset"))
			}
			// Adding to one field must not clobber the others (separate slice capacity).
			h.Add(LegacyLimitFieldName, "extra")
			if h.Get(LegacyRemainingFieldName) != tt.want["X-Ratelimit-Remaining"][0] {
				t.Errorf("Add clobbered X-Ratelimit-Remaining: %v", h)
			}
		})
	}
}

func TestFieldNamesCanonical(t *testing.T) {
	for _, n := range []string{PolicyFieldName, LimitFieldName, RetryAfterFieldName, LegacyLimitFieldName, LegacyRemainingFieldName, LegacyResetFieldName} {
		if c := http.CanonicalHeaderKey(n); c != n {
			t.Errorf("%q is not canonical (%q)", n, c)
		}
	}
}
