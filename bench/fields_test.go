package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/headers"
)

func TestParsePolicies(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   []policyItem
	}{
		{
			name:   "draft example without space",
			values: []string{`"burst";q=100;w=60,"daily";q=1000;w=86400`},
			want:   []policyItem{{"burst", 100, headers.UnitRequests}, {"daily", 1000, headers.UnitRequests}},
		},
		{
			name:   "draft example with pk",
			values: []string{`"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:`},
			want:   []policyItem{{"peruser", 65535, headers.UnitContentBytes}},
		},
		{
			name:   "split across field lines",
			values: []string{`"burst";q=100;w=60`, `"inflight";q=10;qu="concurrent-requests"`},
			want:   []policyItem{{"burst", 100, headers.UnitRequests}, {"inflight", 10, headers.UnitConcurrentRequests}},
		},
		{
			name:   "malformed items skipped, others kept",
			values: []string{`token;q=1, ("a");q=1, "noq";w=1, "negq";q=-1, "decq";q=1.5, "strq";q="1", "w0";q=1;w=0, "wneg";q=1;w=-5, "wtok";q=1;w=x, "qutok";q=1;qu=requests, "pkstr";q=1;pk="x", "ok";q=0`},
			want:   []policyItem{{"ok", 0, headers.UnitRequests}},
		},
		{
			name:   "unknown parameters and units kept as comments",
			values: []string{`"a";q=5;*vendor-x=?1;comment="hi";qu="parsecs"`},
			want:   []policyItem{{"a", 5, "parsecs"}},
		},
		{
			name:   "repeated parameter: last value wins",
			values: []string{`"a";q=-1;q=7, "b";q=7;q=-1`},
			want:   []policyItem{{"a", 7, headers.UnitRequests}},
		},
		{
			name:   "escaped name",
			values: []string{`"a\"b\\c";q=1`},
			want:   []policyItem{{`a"b\c`, 1, headers.UnitRequests}},
		},
		{name: "absent", values: nil, want: nil},
		{name: "empty", values: []string{""}, want: nil},
		{name: "only bad items", values: []string{`"x";w=1`}, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parsePolicies(tt.values)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parsePolicies() = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestParseLimits(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   []limitItem
	}{
		{
			name:   "draft example",
			values: []string{`"default";r=50;t=30`},
			want:   []limitItem{{name: "default", remaining: 50, reset: 30, hasReset: true}},
		},
		{
			name:   "draft example with pk",
			values: []string{`"default";r=300000000;t=60;pk=:QXBwLTk5OQ==:`},
			want:   []limitItem{{name: "default", remaining: 300000000, reset: 60, hasReset: true, pk: []byte("App-999")}},
		},
		{
			name:   "ours, concurrency without t, empty pk",
			values: []string{`"burst";r=42;t=17, "inflight";r=3;pk=::`},
			want: []limitItem{
				{name: "burst", remaining: 42, reset: 17, hasReset: true},
				{name: "inflight", remaining: 3, pk: []byte{}},
			},
		},
		{
			name:   "malformed items skipped",
			values: []string{`"nor";t=1, "negr";r=-1, "decr";r=1.0, "boolr";r, "negt";r=1;t=-1, "dect";r=1;t=1.5, "datet";r=1;t=@5, tok;r=1, ("i");r=1, "pk";r=1;pk=?1, "t0";r=0;t=0`},
			want:   []limitItem{{name: "t0", remaining: 0, reset: 0, hasReset: true}},
		},
		{
			name:   "whitespace tolerated where RFC 9651 allows",
			values: []string{`   "a";r=1 ,	"b";r=2;  t=3   `},
			want:   []limitItem{{name: "a", remaining: 1}, {name: "b", remaining: 2, reset: 3, hasReset: true}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseLimits(tt.values)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseLimits() = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// TestParseMalformedField: a field that is not a valid List is an error, whatever items
// came before the fault.
func TestParseMalformedField(t *testing.T) {
	for _, v := range [][]string{
		{`"a";r=1,`},               // trailing comma
		{`"a";r=1`, ``},            // empty line joins to a trailing comma
		{`"a";r=1 "b";r=2`},        // missing comma
		{`"a;r=1`},                 // unterminated String
		{`"a";R=1`},                // upper-case key
		{`"a";r=1000000000000000`}, // 16 digits
		{`"a";pk=:AAA:`},           // base64 without padding
		{`"a";r=1;x=%"%C3%A9"`},    // upper-case hex in Display String
		{`"a";r=1;x=%"%ff"`},       // Display String not UTF-8
		{"\t\"a\";r=1"},            // leading tab
		{`"é";r=1`},                // non-ASCII in String
	} {
		ps, perr := parsePolicies(v)
		ls, lerr := parseLimits(v)
		if perr == nil || lerr == nil || ps != nil || ls != nil {
			t.Errorf("%q: got %v, %v, %v, %v; want errors and no items", v, ps, perr, ls, lerr)
		}
	}
}

func fieldResp(code int, policy, limit, retry string) *http.Response {
	h := http.Header{}
	if policy != "" {
		h.Set("RateLimit-Policy", policy)
	}
	if limit != "" {
		h.Set("RateLimit", limit)
	}
	if retry != "" {
		h.Set("Retry-After", retry)
	}
	return &http.Response{StatusCode: code, Header: h}
}

func TestFieldChecker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	pol := `"burst";q=10;w=60`
	type step struct {
		resp       *http.Response
		sent, recv int // ms
		client     string
	}
	for _, tc := range []struct {
		name                          string
		steps                         []step
		present, parsed, inconsistent int64
		problems                      map[FieldProblem]int64
	}{
		{
			name:  "no fields",
			steps: []step{{resp: fieldResp(200, "", "", "")}},
		},
		{
			name:    "consistent",
			steps:   []step{{resp: fieldResp(200, pol, `"burst";r=9;t=60`, "")}, {resp: fieldResp(200, pol, `"burst";r=8;t=60`, ""), sent: 2, recv: 3}},
			present: 2, parsed: 2,
		},
		{
			name:    "one field",
			steps:   []step{{resp: fieldResp(200, pol, "", "")}},
			present: 0, inconsistent: 1, problems: map[FieldProblem]int64{ProblemOneField: 1},
		},
		{
			name:    "malformed",
			steps:   []step{{resp: fieldResp(200, pol, `"burst";r=`, "")}},
			present: 1, inconsistent: 1, problems: map[FieldProblem]int64{ProblemMalformed: 1},
		},
		{
			name:    "unknown policy and r above q",
			steps:   []step{{resp: fieldResp(200, pol, `"other";r=1;t=1, "burst";r=11;t=1`, "")}},
			present: 1, parsed: 1, inconsistent: 1,
			problems: map[FieldProblem]int64{ProblemUnknownPolicy: 1, ProblemAboveQuota: 1},
		},
		{
			name: "good 429",
			steps: []step{{resp: fieldResp(429, pol+`, "daily";q=100;w=86400`,
				`"burst";r=0;t=17, "daily";r=50;t=80000`, "17")}},
			present: 1, parsed: 1,
		},
		{
			name:    "429 without Retry-After",
			steps:   []step{{resp: fieldResp(429, pol, `"burst";r=0;t=17`, "")}},
			present: 1, parsed: 1, inconsistent: 1, problems: map[FieldProblem]int64{ProblemNoRetryAfter: 1},
		},
		{
			name:    "Retry-After before t",
			steps:   []step{{resp: fieldResp(429, pol, `"burst";r=0;t=17`, "16")}},
			present: 1, parsed: 1, inconsistent: 1, problems: map[FieldProblem]int64{ProblemRetryBeforeT: 1},
		},
		{
			name:    "429 with units left",
			steps:   []step{{resp: fieldResp(429, pol, `"burst";r=3;t=17`, "17")}},
			present: 1, parsed: 1, inconsistent: 1, problems: map[FieldProblem]int64{Problem429NotExhausted: 1},
		},
		{
			name: "r rose early",
			steps: []step{
				{resp: fieldResp(200, pol, `"burst";r=2;t=10;pk=:AQID:`, ""), sent: 0, recv: 1},
				{resp: fieldResp(200, pol, `"burst";r=5;t=10;pk=:AQID:`, ""), sent: 2, recv: 3},
			},
			present: 2, parsed: 2, inconsistent: 1, problems: map[FieldProblem]int64{ProblemRoseEarly: 1},
		},
		{
			name: "r rose after t-1 s: allowed (t is rounded up)",
			steps: []step{
				{resp: fieldResp(200, pol, `"burst";r=2;t=2`, ""), sent: 0, recv: 1},
				{resp: fieldResp(200, pol, `"burst";r=5;t=2`, ""), sent: 1000, recv: 1001},
			},
			present: 2, parsed: 2,
		},
		{
			name: "concurrent requests are not compared",
			steps: []step{
				{resp: fieldResp(200, pol, `"burst";r=2;t=10`, ""), sent: 0, recv: 5},
				{resp: fieldResp(200, pol, `"burst";r=3;t=10`, ""), sent: 1, recv: 6},
			},
			present: 2, parsed: 2,
		},
		{
			name: "other partitions are not compared",
			steps: []step{
				{resp: fieldResp(200, pol, `"burst";r=2;t=10`, ""), sent: 0, recv: 1, client: "a"},
				{resp: fieldResp(200, pol, `"burst";r=9;t=10`, ""), sent: 2, recv: 3, client: "b"},
				{resp: fieldResp(200, pol, `"burst";r=2;t=10;pk=:AQID:`, ""), sent: 4, recv: 5},
				{resp: fieldResp(200, pol, `"burst";r=9;t=10;pk=:AQIE:`, ""), sent: 6, recv: 7},
			},
			present: 4, parsed: 4,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newFieldChecker()
			for _, s := range tc.steps {
				c.observe(s.resp, s.client, at(s.sent), at(s.recv), true)
			}
			st := c.stats()
			if st.Present != tc.present || st.Parsed != tc.parsed || st.Inconsistent != tc.inconsistent {
				t.Errorf("present/parsed/inconsistent = %d/%d/%d, want %d/%d/%d (problems %v)",
					st.Present, st.Parsed, st.Inconsistent, tc.present, tc.parsed, tc.inconsistent, st.Problems)
			}
			for _, p := range FieldProblems {
				if st.Problems[p] != tc.problems[p] {
					t.Errorf("problems[%s] = %d, want %d", p, st.Problems[p], tc.problems[p])
				}
			}
		})
	}
}

func TestFieldCheckerUnmeasured(t *testing.T) {
	c := newFieldChecker()
	now := time.Now()
	c.observe(fieldResp(200, `"a";q=5`, `"a";r=1;t=30`, ""), "", now, now, false)
	// Not counted, but remembered: the measured response after it is compared with it.
	c.observe(fieldResp(200, `"a";q=5`, `"a";r=4;t=30`, ""), "", now.Add(time.Millisecond), now.Add(2*time.Millisecond), true)
	st := c.stats()
	if st.Present != 1 || st.Problems[ProblemRoseEarly] != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestRespecterPacing(t *testing.T) {
	ctx := t.Context()
	p := newRespecter()
	now := time.Now()
	// Nothing known: requests go.
	for range 3 {
		if !p.acquire(ctx, "k", time.Time{}) {
			t.Fatal("acquire refused with nothing known")
		}
	}
	// An answer with r=1 while 2 others are in flight: no unit left for new requests.
	p.release("k", fieldResp(200, `"a";q=5`, `"a";r=1;t=1`, ""), now)
	if p.acquire(ctx, "k", time.Now().Add(30*time.Millisecond)) {
		t.Fatal("acquire went although r was used up by the requests in flight")
	}
	// r=0 with t=1: nothing leaves for a second, even once nothing is in flight.
	p.release("k", fieldResp(200, `"a";q=5`, `"a";r=0;t=1`, ""), time.Now())
	p.release("k", nil, time.Now()) // a failed request
	start := time.Now()
	if p.acquire(ctx, "k", start.Add(200*time.Millisecond)) {
		t.Fatal("acquire went during t")
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("gave up after %v, want the deadline (200ms)", d)
	}
	// Another key is not held back.
	if !p.acquire(ctx, "other", time.Time{}) {
		t.Fatal("another key was held back")
	}
	// A 429 with Retry-After: 2 holds the key for two seconds.
	// (Measured from the instant release is given, not from the clock: a stall on a
	// loaded machine between the two would shorten the hold seen.)
	at := time.Now()
	p.release("other", fieldResp(429, "", "", "2"), at)
	p.mu.Lock()
	until := p.keys["other"].until
	p.mu.Unlock()
	if d := until.Sub(at); d != 2*time.Second {
		t.Errorf("429 with Retry-After 2: held for %v", d)
	}
	if st := p.stats(); st.Waits != 2 || st.Waited < 150*time.Millisecond {
		t.Errorf("stats %+v", st)
	}
	// After the pause, one request goes to learn r; the next waits for its answer.
	q := newRespecter()
	q.keys["k"] = &pace{budget: 0, changed: make(chan struct{})}
	if !q.acquire(ctx, "k", time.Time{}) {
		t.Fatal("no probe")
	}
	if q.acquire(ctx, "k", time.Now().Add(20*time.Millisecond)) {
		t.Fatal("second request went before the probe's answer")
	}
	go func() {
		time.Sleep(10 * time.Millisecond)
		q.release("k", fieldResp(200, `"a";q=5`, `"a";r=4;t=1`, ""), time.Now())
	}()
	if !q.acquire(ctx, "k", time.Now().Add(2*time.Second)) {
		t.Fatal("the probe's answer did not release the key")
	}
}

// windowServer is a fixed-window limiter of q requests per second, per client address,
// that sends the RateLimit fields as h3edge does.
type windowServer struct {
	q     int64
	mu    sync.Mutex
	win   map[string]int64 // client → current window (unix seconds)
	count map[string]int64
}

func (s *windowServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	win := now.Unix()
	ip, _, _ := net.SplitHostPort(r.RemoteAddr)
	s.mu.Lock()
	if s.win[ip] != win {
		s.win[ip], s.count[ip] = win, 0
	}
	allowed := s.count[ip] < s.q
	if allowed {
		s.count[ip]++
	}
	rem := s.q - s.count[ip]
	s.mu.Unlock()
	h := w.Header()
	h.Set("RateLimit-Policy", fmt.Sprintf(`"w";q=%d;w=1`, s.q))
	h.Set("RateLimit", fmt.Sprintf(`"w";r=%d;t=1`, rem)) // t: until the next second, rounded up
	if !allowed {
		h.Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	w.Write([]byte("ok"))
}

func TestRespectLimits(t *testing.T) {
	srv := httptest.NewUnstartedServer(&windowServer{q: 5, win: map[string]int64{}, count: map[string]int64{}})
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = discardLog
	srv.StartTLS()
	defer srv.Close()
	for _, respect := range []bool{true, false} {
		t.Run(fmt.Sprint("respect=", respect), func(t *testing.T) {
			// Start just after a second boundary and run two whole windows.
			start := testkit.NextPhase(time.Now().Add(20*time.Millisecond), time.Second, 0.02)
			time.Sleep(time.Until(start))
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			res, err := Run(ctx, Config{
				URL: srv.URL + "/", Proto: H2, Connections: 1, Streams: 2, Rate: 50,
				// Ends 280 ms before the third window: room for a late start.
				Duration: 1700 * time.Millisecond, Insecure: true, RespectLimits: respect,
			})
			if err != nil {
				t.Fatal(err)
			}
			ok, denied := res.Status[200], res.Status[429]
			t.Logf("200: %d, 429: %d, unsent %d, respect %+v", ok, denied, res.Unsent, res.Respect)
			if ok < 8 || ok > 10 {
				t.Errorf("200s = %d, want 10 (5 per window, two windows; a little slack)", ok)
			}
			if res.Fields.Present != res.Responses || res.Fields.Parsed != res.Responses || res.Fields.Inconsistent != 0 {
				t.Errorf("fields %+v for %d responses", res.Fields, res.Responses)
			}
			if respect {
				if denied > 1 {
					t.Errorf("respecting clients got %d × 429", denied)
				}
				if res.Respect == nil || res.Respect.Waits == 0 {
					t.Errorf("respect stats %+v", res.Respect)
				}
				if res.Unsent == 0 {
					t.Error("no request was held back past the end")
				}
			} else {
				if denied < 60 {
					t.Errorf("ignoring clients got %d × 429, want about 75", denied)
				}
				if res.Respect != nil {
					t.Error("respect stats without RespectLimits")
				}
			}
		})
	}
}
