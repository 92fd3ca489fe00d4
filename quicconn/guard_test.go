package quicconn

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/time/rate"
)

var t0 = time.Date(2026, 5, 23, 12, 0, 0, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

func mustNew(t testing.TB, cfg Config) *Guard {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"zero", Config{}, ""},
		{"unlimited", Config{ConnRate: -1, StreamRate: -1, MaxConnections: -1, RetryAbove: -1}, ""},
		{"NaN rate", Config{ConnRate: nanf()}, "ConnRate"},
		{"huge rate", Config{StreamRate: 2e9}, "StreamRate"},
		{"negative burst", Config{StreamBurst: -1}, "StreamBurst"},
		{"IPv4 prefix", Config{IPv4Prefix: 33}, "IPv4Prefix"},
		{"IPv6 prefix", Config{IPv6Prefix: -1}, "IPv6Prefix"},
		{"MaxTracked", Config{MaxTracked: -5}, "MaxTracked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.wantErr != "" && (!errors.Is(err, ErrConfig) || !contains(err.Error(), tc.wantErr)):
				t.Fatalf("New: %v, want ErrConfig naming %s", err, tc.wantErr)
			}
		})
	}
	d := Config{}.withDefaults()
	if d.ConnRate != 20 || d.ConnBurst != 40 || d.StreamRate != 200 || d.StreamBurst != 400 ||
		d.MaxConnections != 64 || d.RetryAbove != 1000 || d.MaxTracked != 1000000 ||
		d.IPv4Prefix != 32 || d.IPv6Prefix != 64 {
		t.Errorf("defaults %+v, want DESIGN.md §4", d)
	}
	if d := (Config{ConnRate: 0.3}).withDefaults(); d.ConnBurst != 1 {
		t.Errorf("burst for rate 0.3: %d, want 1", d.ConnBurst)
	}
}

func nanf() float64 { z := 0.0; return z / z }

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestStreamBudget is a step table on synthetic instants t0…tN.
func TestStreamBudget(t *testing.T) {
	a := netip.MustParseAddr("192.0.2.1")
	g := mustNew(t, Config{StreamRate: 2, StreamBurst: 3})
	for i, step := range []struct {
		at   int // ms after t0
		addr netip.Addr
		want bool
	}{
		{0, a, true}, {0, a, true}, {0, a, true}, // the burst
		{0, a, false},   // empty
		{499, a, false}, // 0.998 tokens
		{500, a, true},  // one token after 1/rate
		{500, a, false}, // refusals spend nothing…
		{1000, a, true}, // …so the next token is on time
		{1000, netip.MustParseAddr("192.0.2.2"), true}, // a neighbour has its own budget
		{2500, a, true}, {2500, a, true}, {2500, a, true}, // refilled to the burst, no more
		{2500, a, false},
		{2400, a, false}, // time going backwards refills nothing
	} {
		if got := g.AllowStream(step.addr, ms(step.at)); got != step.want {
			t.Fatalf("step %d (t0+%dms, %s): AllowStream = %v, want %v", i, step.at, step.addr, got, step.want)
		}
	}
	if st := g.Stats(); st.RefusedStreams != 5 || st.Tracked != 2 {
		t.Errorf("stats %+v, want 5 refused streams, 2 sources", st)
	}
}

// TestBucketOracle checks the bucket decision for decision against rate.Limiter on
// random non-decreasing instants (multiples of 1/16 s, exact in float64).
func TestBucketOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		rate  float64
		burst int
	}{{2, 3}, {4, 1}, {8, 10}, {0.5, 2}, {16, 40}} {
		t.Run(fmt.Sprintf("%v/%d", tc.rate, tc.burst), func(t *testing.T) {
			g := mustNew(t, Config{StreamRate: tc.rate, StreamBurst: tc.burst})
			lim := rate.NewLimiter(rate.Limit(tc.rate), tc.burst)
			a := netip.MustParseAddr("2001:db8::1")
			now := t0
			for i := range 5000 {
				now = now.Add(time.Duration(rng.IntN(4)) * time.Second / 16)
				if got, want := g.AllowStream(a, now), lim.AllowN(now, 1); got != want {
					t.Fatalf("event %d at %v: got %v, rate.Limiter %v", i, now.Sub(t0), got, want)
				}
			}
		})
	}
}

func TestSourcePrefix(t *testing.T) {
	g := mustNew(t, Config{StreamRate: 0.001, StreamBurst: 1, IPv4Prefix: 24, IPv6Prefix: 48})
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"198.51.100.1", true},
		{"198.51.100.200", false},      // same /24
		{"::ffff:198.51.100.7", false}, // IPv4-mapped counts as IPv4
		{"198.51.101.1", true},
		{"2001:db8:1:2::1", true},
		{"2001:db8:1:ffff::9", false}, // same /48
		{"2001:db8:2::1", true},
		{"::ffff:0:0", true}, // 0.0.0.0, not the IPv6 zero source
		{"::", true},
	} {
		if got := g.AllowStream(netip.MustParseAddr(tc.addr), t0); got != tc.want {
			t.Errorf("AllowStream(%s) = %v, want %v", tc.addr, got, tc.want)
		}
	}
}

func TestAdmit(t *testing.T) {
	a := netip.MustParseAddr("203.0.113.9")
	g := mustNew(t, Config{ConnRate: 1, ConnBurst: 2, MaxConnections: 2})
	s1, err1 := g.Admit(a, ms(0))
	s2, err2 := g.Admit(a, ms(0))
	if err1 != nil || err2 != nil {
		t.Fatalf("Admit: %v, %v", err1, err2)
	}
	if _, err := g.Admit(a, ms(5000)); !errors.Is(err, ErrMaxConns) {
		t.Fatalf("3rd concurrent: %v, want ErrMaxConns", err)
	}
	s1.Release()
	s1.Release() // idempotent
	if _, err := g.Admit(a, ms(1)); !errors.Is(err, ErrRate) {
		t.Fatalf("over budget: %v, want ErrRate", err)
	}
	s3, err := g.Admit(a, ms(1000))
	if err != nil {
		t.Fatalf("after a refill: %v", err)
	}
	s2.Release()
	s3.Release()
	if st := g.Stats(); st.Open != 0 || st.RefusedMaxConns != 1 || st.RefusedRate != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestConnContextRelease checks the slot goes back when quic-go cancels the context
// it passed in, and that the returned context carries the slot.
func TestConnContextRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var bans banList
		g := mustNew(t, Config{MaxConnections: 1, Banned: bans.banned})
		info := &quic.ClientInfo{RemoteAddr: &net.UDPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 4433}}
		parent, cancel := context.WithCancelCause(context.Background())
		ctx, err := g.ConnContext(parent, info)
		if err != nil {
			t.Fatal(err)
		}
		// quic-go derives the connection's context from ours.
		connCtx, connCancel := context.WithCancelCause(ctx)
		if _, ok := connCtx.Value(slotKey{}).(*Slot); !ok {
			t.Fatal("the connection's context carries no slot")
		}
		if _, err := g.ConnContext(context.Background(), info); !errors.Is(err, ErrMaxConns) {
			t.Fatalf("second: %v, want ErrMaxConns", err)
		}
		// quic-go cancels both when the connection ends.
		cancel(errors.New("closed"))
		connCancel(nil)
		synctest.Wait()
		if st := g.Stats(); st.Open != 0 {
			t.Fatalf("Open = %d after the connection ended", st.Open)
		}

		bans.ban(netip.MustParseAddr("192.0.2.7"), true)
		if _, err := g.ConnContext(context.Background(), info); !errors.Is(err, ErrBanned) {
			t.Fatalf("banned: %v, want ErrBanned", err)
		}
		if st := g.Stats(); st.RefusedBanned != 1 {
			t.Errorf("RefusedBanned = %d", st.RefusedBanned)
		}
	})
}

// TestConcurrent races admissions, releases, streams and kicks; run it with -race.
func TestConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := mustNew(t, Config{ConnRate: 1000, MaxConnections: 4, MaxTracked: 256})
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				now := t0
				for i := range 2000 {
					now = now.Add(time.Millisecond)
					a := netip.AddrFrom4([4]byte{10, 0, byte(w), byte(i % 64)})
					ctx, cancel := context.WithCancel(context.Background())
					info := &quic.ClientInfo{RemoteAddr: &net.UDPAddr{IP: a.AsSlice(), Port: 1}}
					if _, err := g.ConnContext(ctx, info); err == nil && i%3 == 0 {
						defer cancel() // held until the worker ends
					} else {
						cancel()
					}
					if s, err := g.Admit(a, now); err == nil {
						s.Release()
					}
					g.AllowStream(a, now)
					g.VerifySourceAddress(info.RemoteAddr)
					if i%500 == 0 {
						g.Kick(netip.PrefixFrom(a, 30))
						g.Stats()
					}
				}
			})
		}
		wg.Wait()
		synctest.Wait()
		if st := g.Stats(); st.Open != 0 || st.Tracked > 256 {
			t.Fatalf("stats %+v, want Open 0, Tracked ≤ 256", st)
		}
	})
}

// TestConfigFields fails when a field is added to Config without being handled by
// withDefaults, Validate and New; add it there, then here.
func TestConfigFields(t *testing.T) {
	handled := map[string]bool{
		"ConnRate": true, "ConnBurst": true, "StreamRate": true, "StreamBurst": true,
		"MaxConnections": true, "RetryAbove": true, "MaxTracked": true,
		"IPv4Prefix": true, "IPv6Prefix": true, "Banned": true,
	}
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		if f := typ.Field(i); !handled[f.Name] {
			t.Errorf("Config.%s is not accounted for", f.Name)
		}
	}
	if typ.NumField() != len(handled) {
		t.Errorf("Config has %d fields, %d accounted for", typ.NumField(), len(handled))
	}
}

func TestVerifySourceAddress(t *testing.T) {
	g := mustNew(t, Config{ConnRate: 1, ConnBurst: 1, RetryAbove: 3, MaxTracked: 64})
	clock := t0
	g.now = func() time.Time { return clock }
	addr := func(i int) net.Addr { return &net.UDPAddr{IP: net.IPv4(10, 0, byte(i>>8), byte(i)), Port: 1} }

	for i := range 3 {
		if g.VerifySourceAddress(addr(i)) {
			t.Fatalf("Initial %d below RetryAbove: Retry", i)
		}
	}
	if !g.VerifySourceAddress(addr(3)) {
		t.Fatal("4th Initial within a second: no Retry")
	}
	clock = clock.Add(1500 * time.Millisecond) // window: half of 4 + 1 = 3, not above
	if g.VerifySourceAddress(addr(4)) {
		t.Fatal("Retry after the surge passed")
	}
	clock = clock.Add(10 * time.Second)
	// A source over its budget is asked to prove its address before the refusal.
	if _, err := g.Admit(netip.MustParseAddr("10.0.0.9"), clock); err != nil {
		t.Fatal(err)
	}
	if !g.VerifySourceAddress(addr(9)) {
		t.Fatal("source over budget: no Retry")
	}
	// A new source whose shard is full of informative entries too.
	for i := 100; i < 164; i++ {
		g.Admit(netip.MustParseAddr(fmt.Sprintf("10.1.0.%d", i)), clock)
	}
	if !g.VerifySourceAddress(addr(1000)) {
		t.Fatal("new source, full table: no Retry")
	}
	if st := g.Stats(); st.RetriesSurge != 1 || st.RetriesSource != 2 {
		t.Errorf("stats %+v", st)
	}
}

// TestEviction checks the table forgets only what carries no information.
func TestEviction(t *testing.T) {
	const max = 64 // one shard
	g := mustNew(t, Config{ConnRate: 1, ConnBurst: 1, StreamRate: -1, MaxConnections: -1, MaxTracked: max})
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)}) }
	has := func(a netip.Addr) bool {
		k := g.tab.key(a)
		sh := g.tab.shard(k)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		_, ok := sh.entries[k]
		return ok
	}

	// A holder with an open connection, and fillers whose buckets are empty until 1 s.
	holder, err := g.Admit(addr(0), ms(0))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	for i := 1; i < max; i++ {
		s, _ := g.Admit(addr(i), ms(0))
		s.Release()
	}
	if st := g.Stats(); st.Tracked != max {
		t.Fatalf("Tracked = %d, want %d", st.Tracked, max)
	}
	// Full of informative entries: newcomers share the overflow entry, one source's
	// budget.
	if _, err := g.Admit(addr(1000), ms(10)); err != nil {
		t.Fatalf("first newcomer: %v", err)
	}
	if _, err := g.Admit(addr(1001), ms(10)); !errors.Is(err, ErrRate) {
		t.Fatalf("second newcomer: %v, want ErrRate (overflow budget)", err)
	}
	if st := g.Stats(); st.Tracked != max || st.Overflowed != 2 {
		t.Fatalf("stats %+v", st)
	}
	// At 1.9 s the fillers' buckets are full again: an abuser takes a filler's place.
	if _, err := g.Admit(addr(2), ms(1900)); err != nil {
		t.Fatal(err)
	}
	abuser := addr(2)
	if _, err := g.Admit(abuser, ms(1900)); !errors.Is(err, ErrRate) {
		t.Fatalf("abuser not over budget: %v", err)
	}
	// At 2 s a crowd of newcomers replaces the uninformative fillers, not the holder
	// (open connection) nor the abuser (empty bucket).
	for i := range 3 * max {
		if s, err := g.Admit(addr(2000+i), ms(2000)); err == nil {
			s.Release()
		}
	}
	if st := g.Stats(); st.Tracked > max {
		t.Fatalf("Tracked = %d > MaxTracked", st.Tracked)
	}
	if !has(addr(0)) || !has(abuser) {
		t.Fatalf("informative entry evicted: holder kept %v, abuser kept %v", has(addr(0)), has(abuser))
	}
	if _, err := g.Admit(abuser, ms(2000)); !errors.Is(err, ErrRate) {
		t.Fatalf("abuser pardoned by eviction: %v", err)
	}
}

// TestSpoofedFlood sends 1,000,000 distinct sources through the admission path with the
// table bounded at 100,000, and checks a source over budget before the flood is still
// refused after it.
func TestSpoofedFlood(t *testing.T) {
	const maxTracked, sources = 100_000, 1_000_000
	g := mustNew(t, Config{ConnRate: 1, ConnBurst: 5, StreamRate: 10, StreamBurst: 20, MaxConnections: 2, MaxTracked: maxTracked})
	abuser := netip.MustParseAddr("198.51.100.66")
	holder := netip.MustParseAddr("2001:db8:aaaa:1::1")
	for range 5 {
		if s, err := g.Admit(abuser, t0); err == nil {
			s.Release()
		}
	}
	if _, err := g.Admit(abuser, t0); !errors.Is(err, ErrRate) {
		t.Fatalf("abuser not over budget before the flood: %v", err)
	}
	var held []*Slot
	for range 2 {
		s, err := g.Admit(holder, t0)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, s)
	}

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	now := t0
	admitted := 0
	for i := range sources {
		now = now.Add(100 * time.Nanosecond) // the flood lasts 100 ms
		var a netip.Addr
		if i%2 == 0 {
			a = netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		} else {
			var b [16]byte
			b[0], b[1], b[2], b[3] = 0x20, 0x01, 0x0d, 0xb8
			b[4], b[5], b[6], b[7] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
			a = netip.AddrFrom16(b)
		}
		// A spoofed Initial: admitted (or not), the handshake never completes.
		if s, err := g.Admit(a, now); err == nil {
			admitted++
			s.Release()
		}
		g.AllowStream(a, now)
		if i%100_000 == 0 {
			if st := g.Stats(); st.Tracked > maxTracked {
				t.Fatalf("after %d sources: Tracked = %d > %d", i, st.Tracked, maxTracked)
			}
		}
	}
	elapsed := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	st := g.Stats()
	t.Logf("%d sources in %v (%v each): %d admitted, %d tracked, %d overflowed; heap %.1f MB (live %.1f MB before)",
		sources, elapsed.Round(time.Millisecond), elapsed/sources, admitted, st.Tracked, st.Overflowed,
		float64(after.HeapAlloc)/1e6, float64(before.HeapAlloc)/1e6)
	if st.Tracked > maxTracked {
		t.Fatalf("Tracked = %d > %d", st.Tracked, maxTracked)
	}
	if _, err := g.Admit(abuser, now); !errors.Is(err, ErrRate) {
		t.Fatalf("abuser after the flood: %v, want ErrRate", err)
	}
	if _, err := g.Admit(holder, now.Add(time.Hour)); !errors.Is(err, ErrMaxConns) {
		t.Fatalf("holder after the flood: %v, want ErrMaxConns", err)
	}

	// Ten seconds on, the flood's entries carry no information: real newcomers get
	// entries of their own again, the holder still cannot exceed its cap.
	later := now.Add(10 * time.Second)
	for i := range 1000 {
		a := netip.AddrFrom4([4]byte{172, 16, byte(i >> 8), byte(i)})
		s, err := g.Admit(a, later)
		if err != nil {
			t.Fatalf("newcomer %s after the flood: %v", a, err)
		}
		s.Release()
	}
	if st2 := g.Stats(); st2.Tracked > maxTracked || st2.Overflowed != st.Overflowed {
		t.Errorf("after the flood: %+v, want no newcomer in the overflow entry", st2)
	}
	for _, s := range held {
		s.Release()
	}
}

func TestSetLimits(t *testing.T) {
	g, err := New(Config{StreamRate: 1, StreamBurst: 2})
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr("192.0.2.1")
	t0 := time.Unix(1000, 0)
	if !g.AllowStream(a, t0) || !g.AllowStream(a, t0) || g.AllowStream(a, t0) {
		t.Fatal("burst of 2 not enforced")
	}
	// A bigger burst applies at once; the source's spent tokens are remembered.
	if err := g.SetLimits(Config{StreamRate: 1, StreamBurst: 4}); err != nil {
		t.Fatal(err)
	}
	if !g.AllowStream(a, t0) || !g.AllowStream(a, t0) || g.AllowStream(a, t0) {
		t.Error("after raising the burst to 4, 2 more should pass, then none")
	}
	if err := g.SetLimits(Config{IPv4Prefix: 24}); !errors.Is(err, ErrRestartNeeded) {
		t.Errorf("changing the prefix: %v, want ErrRestartNeeded", err)
	}
}
