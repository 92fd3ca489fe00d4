package penalty

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func mustBox(t testing.TB, cfg Config) *Box {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var (
	ip  = netip.MustParseAddr
	pfx = netip.MustParsePrefix
)

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		bad  string // the field named in the error; "" for valid
	}{
		{name: "zero", cfg: Config{}},
		{name: "all set", cfg: Config{Rejections: 1, Within: 8, Ban: time.Second, MaxBan: time.Second, IPv4Prefix: 24, IPv6Prefix: 128, MaxTracked: 1}},
		{name: "negative rejections", cfg: Config{Rejections: -1}, bad: "Rejections"},
		{name: "huge rejections", cfg: Config{Rejections: 1<<30 + 1}, bad: "Rejections"},
		{name: "within too short", cfg: Config{Within: 7}, bad: "Within"},
		{name: "negative ban", cfg: Config{Ban: -time.Second}, bad: "Ban"},
		{name: "ban over max_ban", cfg: Config{Ban: 2 * time.Hour}, bad: "Ban"},
		{name: "negative max_ban", cfg: Config{MaxBan: -1}, bad: "MaxBan"},
		{name: "ipv4 prefix", cfg: Config{IPv4Prefix: 33}, bad: "IPv4Prefix"},
		{name: "ipv6 prefix", cfg: Config{IPv6Prefix: -1}, bad: "IPv6Prefix"},
		{name: "max tracked", cfg: Config{MaxTracked: -1}, bad: "MaxTracked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			switch {
			case tc.bad == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.bad != "" && (!errors.Is(err, ErrConfig) || !containsWord(err.Error(), tc.bad+" =")):
				t.Fatalf("error %v, want ErrConfig naming %s", err, tc.bad)
			}
		})
	}
	d := Config{}.withDefaults()
	want := Config{Rejections: 50, Within: 10 * time.Second, Ban: time.Minute, MaxBan: time.Hour, IPv4Prefix: 32, IPv6Prefix: 64, MaxTracked: 1_000_000}
	if fmt.Sprint(d) != fmt.Sprint(want) {
		t.Fatalf("defaults %+v, want %+v", d, want)
	}
}

func containsWord(s, w string) bool {
	for i := 0; i+len(w) <= len(s); i++ {
		if s[i:i+len(w)] == w && (i == 0 || s[i-1] == ' ') {
			return true
		}
	}
	return false
}

// TestThreshold is a step table on instants t0+at: each step rejects addr once
// and checks what Reject reports, then checks Banned of the addresses in banned and
// free.
func TestThreshold(t *testing.T) {
	type step struct {
		at     time.Duration
		addr   string
		want   bool     // Reject's answer
		banned []string // Banned must be true for these after the step
		free   []string // and false for these
	}
	base := Config{Rejections: 3, Within: 8 * time.Second, Ban: time.Minute}
	v4at24 := base
	v4at24.IPv4Prefix = 24
	for _, tc := range []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{name: "N+1 within Within bans", cfg: base, steps: []step{
			{at: 0, addr: "192.0.2.1"},
			{at: 1 * time.Second, addr: "192.0.2.1"},
			{at: 2 * time.Second, addr: "192.0.2.1", free: []string{"192.0.2.1"}},
			{at: 3 * time.Second, addr: "192.0.2.1", want: true, banned: []string{"192.0.2.1"}, free: []string{"192.0.2.2", "2001:db8::1"}},
			{at: 4 * time.Second, addr: "192.0.2.1", want: true}, // already banned: counted nothing
		}},
		{name: "N at one instant does not ban", cfg: base, steps: []step{
			{addr: "192.0.2.1"}, {addr: "192.0.2.1"}, {addr: "192.0.2.1", free: []string{"192.0.2.1"}},
		}},
		{name: "N+1 spread over longer than Within does not ban", cfg: base, steps: []step{
			{at: 0, addr: "192.0.2.1"},
			{at: 3 * time.Second, addr: "192.0.2.1"},
			{at: 6 * time.Second, addr: "192.0.2.1"},
			{at: 9 * time.Second, addr: "192.0.2.1", free: []string{"192.0.2.1"}},
			{at: 12 * time.Second, addr: "192.0.2.1"},
		}},
		{name: "span of exactly Within does not ban", cfg: base, steps: []step{
			{at: 0, addr: "192.0.2.1"}, {at: 0, addr: "192.0.2.1"}, {at: 0, addr: "192.0.2.1"},
			{at: 8 * time.Second, addr: "192.0.2.1", free: []string{"192.0.2.1"}},
		}},
		{name: "span under 7/8 of Within always bans", cfg: base, steps: []step{
			{at: 999 * time.Millisecond, addr: "192.0.2.1"}, // the end of sub-window 0
			{at: 4 * time.Second, addr: "192.0.2.1"},
			{at: 7 * time.Second, addr: "192.0.2.1"},
			{at: 7*time.Second + 998*time.Millisecond, addr: "192.0.2.1", want: true},
		}},
		{name: "IPv6 counted per /64", cfg: base, steps: []step{
			{addr: "2001:db8::1"},
			{addr: "2001:db8::2"},
			{addr: "2001:db8:0:1::1"}, // another /64
			{addr: "2001:db8::ffff:1"},
			{addr: "2001:db8::3", want: true, banned: []string{"2001:db8::1", "2001:db8::abcd"}, free: []string{"2001:db8:0:1::1", "192.0.2.1"}},
		}},
		{name: "IPv4-mapped counts as IPv4", cfg: base, steps: []step{
			{addr: "::ffff:192.0.2.1"},
			{addr: "192.0.2.1"},
			{addr: "::ffff:192.0.2.1"},
			{addr: "192.0.2.1", want: true, banned: []string{"192.0.2.1", "::ffff:192.0.2.1"}, free: []string{"192.0.2.2", "::ffff:192.0.2.2"}},
		}},
		{name: "IPv4 counted per configured /24", cfg: v4at24, steps: []step{
			{addr: "192.0.2.1"}, {addr: "192.0.2.200"}, {addr: "192.0.3.1"}, {addr: "192.0.2.9"},
			{addr: "192.0.2.1", want: true, banned: []string{"192.0.2.77"}, free: []string{"192.0.3.1"}},
		}},
		{name: "zero Addr ignored", cfg: base, steps: []step{
			{addr: ""}, {addr: ""}, {addr: ""}, {addr: ""}, {addr: "", free: []string{""}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := mustBox(t, tc.cfg)
				t0 := time.Now()
				parse := func(s string) netip.Addr {
					if s == "" {
						return netip.Addr{}
					}
					return ip(s)
				}
				for i, s := range tc.steps {
					if got := p.Reject(parse(s.addr), t0.Add(s.at)); got != s.want {
						t.Fatalf("step %d: Reject(%s) at %v = %v, want %v", i, s.addr, s.at, got, s.want)
					}
					for _, a := range s.banned {
						if !p.Banned(parse(a)) {
							t.Errorf("step %d: %s not banned", i, a)
						}
					}
					for _, a := range s.free {
						if p.Banned(parse(a)) {
							t.Errorf("step %d: %s banned", i, a)
						}
					}
				}
			})
		})
	}
}

// TestBanLength checks bans end, a repeat lasts twice as long up to MaxBan, and a
// repeat is remembered for MaxBan after a ban ends. Each step, at t0+at, rejects the
// source until it is banned (Rejections+1 times) and checks the ban made, or only
// checks Banned and List.
func TestBanLength(t *testing.T) {
	src := ip("198.51.100.7")
	type step struct {
		at        time.Duration
		offend    bool
		wantCount int           // offend: the ban's Count
		wantLen   time.Duration // offend: Until − now
		banned    bool          // after the step
	}
	steps := []step{
		{at: 0, offend: true, wantCount: 1, wantLen: time.Minute, banned: true},
		{at: 59 * time.Second, banned: true},
		{at: 60 * time.Second, banned: false}, // ends at Until
		{at: 70 * time.Second, offend: true, wantCount: 2, wantLen: 2 * time.Minute, banned: true},
		{at: 189 * time.Second, banned: true},
		{at: 190 * time.Second, banned: false},
		{at: 200 * time.Second, offend: true, wantCount: 3, wantLen: 3 * time.Minute, banned: true}, // 4m capped
		{at: 380 * time.Second, banned: false},
		{at: 381 * time.Second, offend: true, wantCount: 4, wantLen: 3 * time.Minute, banned: true},
		// That ban ends at 561s and is remembered until 741s; after that, a first ban again.
		{at: 741 * time.Second, banned: false},
		{at: 742 * time.Second, offend: true, wantCount: 1, wantLen: time.Minute, banned: true},
	}
	synctest.Test(t, func(t *testing.T) {
		var bans []Ban
		p := mustBox(t, Config{Rejections: 2, Ban: time.Minute, MaxBan: 3 * time.Minute, OnBan: func(b Ban) { bans = append(bans, b) }})
		t0 := time.Now()
		for i, s := range steps {
			now := t0.Add(s.at)
			if s.offend {
				for j := range 3 {
					if got := p.Reject(src, now); got != (j == 2) {
						t.Fatalf("step %d: rejection %d: banned = %v", i, j, got)
					}
				}
				b := bans[len(bans)-1]
				if b.Count != s.wantCount || b.Until.Sub(now) != s.wantLen || b.Prefix != pfx("198.51.100.7/32") || b.Shared {
					t.Fatalf("step %d: ban %+v, want count %d, length %v", i, b, s.wantCount, s.wantLen)
				}
			}
			list := p.List(now)
			if got := p.Banned(src); got != s.banned || (len(list) == 1) != s.banned {
				t.Fatalf("step %d at %v: Banned = %v, List = %v, want banned %v", i, s.at, got, list, s.banned)
			}
		}
		if st := p.Stats(); st.Total != 5 || len(bans) != 5 {
			t.Fatalf("Total = %d, OnBan calls = %d, want 5", st.Total, len(bans))
		}
	})
}

// TestSetLimits is a step table on instants t0+at: each step rejects src once,
// or first sets the limits to cfg, and checks what Reject reports. Bans in force and
// the rejections counted so far survive SetLimits; the new limits apply from the next
// rejection on.
func TestSetLimits(t *testing.T) {
	src, other := ip("192.0.2.1"), ip("192.0.2.99")
	start := Config{Rejections: 5, Within: 8 * time.Second, Ban: time.Minute, MaxBan: time.Hour}
	type step struct {
		at   time.Duration
		set  *Config // SetLimits(*set) before rejecting
		want bool    // Reject's answer
	}
	for _, tc := range []struct {
		name    string
		steps   []step
		wantBan time.Duration // the length of src's ban, made at the last step
	}{
		{name: "lower rejections: the strikes count", steps: []step{
			{at: 0}, {at: time.Second}, {at: 2 * time.Second},
			{at: 3 * time.Second, set: &Config{Rejections: 3, Within: 8 * time.Second}, want: true},
		}, wantBan: time.Minute},
		{name: "higher rejections: no ban yet", steps: []step{
			{at: 0}, {at: 0}, {at: 0}, {at: 0}, {at: 0},
			{at: 0, set: &Config{Rejections: 6, Within: 8 * time.Second}},
			{at: 0, want: true},
		}, wantBan: time.Minute},
		{name: "longer within keeps the counts", steps: []step{
			{at: 0}, {at: time.Second}, {at: 2 * time.Second}, {at: 3 * time.Second},
			{at: 4 * time.Second, set: &Config{Rejections: 5, Within: 16 * time.Second}},
			{at: 12 * time.Second, want: true}, // 12 s after the first: inside 16 s, outside 8 s
		}, wantBan: time.Minute},
		{name: "shorter within drops the old counts", steps: []step{
			{at: 0}, {at: 0}, {at: 0}, {at: 0},
			{at: 3 * time.Second, set: &Config{Rejections: 1, Within: 2 * time.Second}},
			{at: 3 * time.Second, want: true}, // the four at 0 fell out: 1, then 2 > 1
		}, wantBan: time.Minute},
		{name: "ban length", steps: []step{
			{at: 0}, {at: 0}, {at: 0}, {at: 0}, {at: 0},
			{at: 0, set: &Config{Rejections: 5, Within: 8 * time.Second, Ban: 5 * time.Minute}, want: true},
		}, wantBan: 5 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var bans []Ban
				cfg := start
				cfg.OnBan = func(b Ban) { bans = append(bans, b) }
				p := mustBox(t, cfg)
				t0 := time.Now()
				if err := p.Add(Ban{Prefix: netip.PrefixFrom(other, 32), Until: t0.Add(time.Hour)}); err != nil {
					t.Fatal(err)
				}
				for i, s := range tc.steps {
					now := t0.Add(s.at)
					if s.set != nil {
						if err := p.SetLimits(*s.set); err != nil {
							t.Fatalf("step %d: SetLimits: %v", i, err)
						}
						if !p.Banned(other) {
							t.Fatalf("step %d: SetLimits lifted a ban in force", i)
						}
					}
					if got := p.Reject(src, now); got != s.want {
						t.Fatalf("step %d: Reject at %v = %v, want %v", i, s.at, got, s.want)
					}
				}
				last := t0.Add(tc.steps[len(tc.steps)-1].at)
				if len(bans) != 2 || bans[1].Prefix != pfx("192.0.2.1/32") || bans[1].Until.Sub(last) != tc.wantBan {
					t.Fatalf("bans %+v, want src's of %v", bans, tc.wantBan)
				}
			})
		})
	}

	p := mustBox(t, start)
	for _, c := range []Config{{IPv4Prefix: 24}, {IPv6Prefix: 48}, {MaxTracked: 10}} {
		if err := p.SetLimits(c); !errors.Is(err, ErrFixed) {
			t.Errorf("SetLimits(%+v) = %v, want ErrFixed", c, err)
		}
	}
	if err := p.SetLimits(Config{Rejections: -1}); !errors.Is(err, ErrConfig) {
		t.Errorf("SetLimits with Rejections -1 = %v, want ErrConfig", err)
	}
}

// TestTimer checks a ban ends on time with no call giving the box an instant:
// the timer set for it moves the clock Banned reads.
func TestTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustBox(t, Config{Rejections: 1, Ban: time.Minute})
		a, b := ip("192.0.2.1"), ip("2001:db8::1")
		p.Reject(a, time.Now())
		p.Reject(a, time.Now())
		time.Sleep(30 * time.Second)
		p.Reject(b, time.Now())
		p.Reject(b, time.Now())
		if !p.Banned(a) || !p.Banned(b) {
			t.Fatal("not banned")
		}
		time.Sleep(30*time.Second - time.Nanosecond)
		synctest.Wait()
		if !p.Banned(a) {
			t.Fatal("a's ban ended early")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if p.Banned(a) || !p.Banned(b) {
			t.Fatalf("at 60s: a banned %v, b banned %v; want false, true", p.Banned(a), p.Banned(b))
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if p.Banned(b) {
			t.Fatal("b's ban did not end")
		}
		if st := p.Stats(); st.Active != 0 || st.Remembered != 2 {
			t.Fatalf("stats %+v, want 0 active, 2 remembered", st)
		}
		time.Sleep(time.Hour) // MaxBan: forgotten
		if st := p.Stats(); st.Remembered != 0 {
			t.Fatalf("stats %+v, want nothing remembered", st)
		}
	})
}

// TestOnBan checks OnBan is called exactly once per ban while many goroutines
// reject one source, outside the box's locks: it calls the box back.
func TestOnBan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p *Box
		var calls atomic.Int32
		p = mustBox(t, Config{Rejections: 10, Ban: time.Second, MaxBan: time.Second, OnBan: func(b Ban) {
			calls.Add(1)
			// Would deadlock if called with a lock held.
			if !p.Banned(b.Prefix.Addr()) || len(p.List(time.Now())) == 0 || p.Stats().Active == 0 {
				t.Errorf("OnBan(%+v): not banned yet", b)
			}
			p.Add(Ban{Prefix: pfx("203.0.113.0/24"), Until: b.Until})
		}})
		src := ip("192.0.2.1")
		const rounds = 5
		for round := range rounds {
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range 20 {
						p.Reject(src, time.Now())
					}
				})
			}
			wg.Wait()
			// Once per ban: the source's and, from the callback, the /24's.
			if got := calls.Load(); got != int32(2*(round+1)) {
				t.Fatalf("round %d: %d OnBan calls, want %d", round, got, 2*(round+1))
			}
			time.Sleep(2 * time.Second)
		}
	})
}

func TestAddLiftList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var bans []Ban
		p := mustBox(t, Config{Rejections: 1, OnBan: func(b Ban) { bans = append(bans, b) }})
		now := time.Now()
		later := now.Add(time.Hour)
		for _, tc := range []struct {
			name    string
			ban     Ban
			err     error
			onBan   bool
			banned  []string
			free    []string
			wantTop Ban // the first of List, when set
		}{
			{name: "v4 /24", ban: Ban{Prefix: pfx("192.0.2.77/24"), Until: later, Reason: "admin"}, onBan: true,
				banned: []string{"192.0.2.1", "::ffff:192.0.2.255"}, free: []string{"192.0.3.1"},
				wantTop: Ban{Prefix: pfx("192.0.2.0/24"), Until: later, Count: 1, Reason: "admin"}},
			{name: "same again changes nothing", ban: Ban{Prefix: pfx("192.0.2.0/24"), Until: later}},
			{name: "earlier end changes nothing", ban: Ban{Prefix: pfx("192.0.2.0/24"), Until: now.Add(time.Minute)}},
			{name: "later end extends", ban: Ban{Prefix: pfx("192.0.2.0/24"), Until: later.Add(time.Hour), Count: 3}, onBan: true,
				wantTop: Ban{Prefix: pfx("192.0.2.0/24"), Until: later.Add(time.Hour), Count: 3, Reason: "admin"}},
			{name: "mapped prefix is IPv4", ban: Ban{Prefix: pfx("::ffff:198.51.100.0/120"), Until: later}, onBan: true,
				banned: []string{"198.51.100.9"}, free: []string{"198.51.101.9"}},
			{name: "v6 /48", ban: Ban{Prefix: pfx("2001:db8:1::/48"), Until: later}, onBan: true,
				banned: []string{"2001:db8:1:ff::1"}, free: []string{"2001:db8:2::1"}},
			{name: "v6 /128", ban: Ban{Prefix: pfx("2001:db8:9::5/128"), Until: later}, onBan: true,
				banned: []string{"2001:db8:9::5"}, free: []string{"2001:db8:9::6"}},
			{name: "v4 /0", ban: Ban{Prefix: pfx("0.0.0.0/0"), Until: now.Add(time.Second)}, onBan: true,
				banned: []string{"203.0.113.1"}, free: []string{"2001:db8:3::1"}},
			{name: "past", ban: Ban{Prefix: pfx("192.0.2.0/24"), Until: now}, err: ErrInvalidBan},
			{name: "no end", ban: Ban{Prefix: pfx("192.0.2.0/24")}, err: ErrInvalidBan},
			{name: "no prefix", ban: Ban{Until: later}, err: ErrInvalidBan},
			{name: "negative count", ban: Ban{Prefix: pfx("192.0.2.0/24"), Until: later, Count: -1}, err: ErrInvalidBan},
		} {
			n := len(bans)
			if err := p.Add(tc.ban); !errors.Is(err, tc.err) {
				t.Fatalf("%s: Add = %v, want %v", tc.name, err, tc.err)
			}
			if got := len(bans) > n; got != tc.onBan {
				t.Fatalf("%s: OnBan called %v, want %v", tc.name, got, tc.onBan)
			}
			for _, a := range tc.banned {
				if !p.Banned(ip(a)) {
					t.Errorf("%s: %s not banned", tc.name, a)
				}
			}
			for _, a := range tc.free {
				if p.Banned(ip(a)) {
					t.Errorf("%s: %s banned", tc.name, a)
				}
			}
			if tc.wantTop.Prefix.IsValid() {
				if got := p.List(now)[0]; got != tc.wantTop {
					t.Errorf("%s: List()[0] = %+v, want %+v", tc.name, got, tc.wantTop)
				}
			}
		}
		var got []string
		for _, b := range p.List(now) {
			got = append(got, b.Prefix.String())
		}
		if want := "[0.0.0.0/0 192.0.2.0/24 198.51.100.0/24 2001:db8:1::/48 2001:db8:9::5/128]"; fmt.Sprint(got) != want {
			t.Fatalf("List = %v, want %v", got, want)
		}
		if p.Lift(pfx("192.0.2.1/32")) || !p.Banned(ip("192.0.2.1")) {
			t.Fatal("lifting a /32 inside a banned /24 lifted something")
		}
		if !p.Lift(pfx("::ffff:192.0.2.0/120")) || p.Lift(pfx("192.0.2.0/24")) {
			t.Fatal("Lift of the /24 (mapped) did not report exactly one lift")
		}
		if !p.Lift(pfx("0.0.0.0/0")) || p.Banned(ip("192.0.2.1")) || !p.Banned(ip("198.51.100.1")) {
			t.Fatal("Lift of /0 wrong")
		}
		if p.Lift(netip.Prefix{}) {
			t.Fatal("Lift of the zero Prefix")
		}

		// Lift forgets the count: after an automatic ban ended and was lifted, the next
		// is a first ban again; without Lift it is a second.
		src := ip("192.0.2.50")
		offend := func() Ban {
			p.Reject(src, time.Now())
			p.Reject(src, time.Now())
			return bans[len(bans)-1]
		}
		if b := offend(); b.Count != 1 {
			t.Fatalf("first: %+v", b)
		}
		time.Sleep(2 * time.Minute)
		if b := offend(); b.Count != 2 || b.Until.Sub(time.Now()) != 2*time.Minute {
			t.Fatalf("repeat: %+v", b)
		}
		if !p.Lift(pfx("192.0.2.50/32")) || p.Banned(src) {
			t.Fatal("not lifted")
		}
		if b := offend(); b.Count != 1 || b.Until.Sub(time.Now()) != time.Minute {
			t.Fatalf("after Lift: %+v", b)
		}
	})
}

// TestApply checks a ban from another edge is recorded as Shared and never
// reaches OnBan, the publish path.
func TestApply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var published []Ban
		p := mustBox(t, Config{Rejections: 1, OnBan: func(b Ban) { published = append(published, b) }})
		now := time.Now()
		remote := Ban{Prefix: pfx("2001:db8:5::/64"), Until: now.Add(5 * time.Minute), Count: 3, Reason: "edge-b: rejected"}
		for _, tc := range []struct {
			name    string
			ban     Ban
			changed bool
			err     error
		}{
			{name: "new", ban: remote, changed: true},
			{name: "again", ban: remote},
			{name: "later", ban: Ban{Prefix: remote.Prefix, Until: now.Add(10 * time.Minute)}, changed: true},
			{name: "ended", ban: Ban{Prefix: pfx("192.0.2.0/24"), Until: now.Add(-time.Second)}},
			{name: "invalid", ban: Ban{Prefix: netip.Prefix{}, Until: now.Add(time.Minute)}, err: ErrInvalidBan},
		} {
			changed, err := p.Apply(tc.ban)
			if changed != tc.changed || !errors.Is(err, tc.err) {
				t.Fatalf("%s: Apply = %v, %v; want %v, %v", tc.name, changed, err, tc.changed, tc.err)
			}
		}
		if len(published) != 0 {
			t.Fatalf("Apply published %v", published)
		}
		list := p.List(now)
		if len(list) != 1 || !list[0].Shared || list[0].Count != 3 || !p.Banned(ip("2001:db8:5::99")) {
			t.Fatalf("List = %+v", list)
		}
		// A source learnt from another edge and then banned here continues its count.
		if lifted := p.Lift(list[0].Prefix); !lifted {
			t.Fatal("Lift")
		}
		if _, err := p.Apply(Ban{Prefix: pfx("192.0.2.9/32"), Until: now.Add(time.Second), Count: 2}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		p.Reject(ip("192.0.2.9"), time.Now())
		p.Reject(ip("192.0.2.9"), time.Now())
		if len(published) != 1 || published[0].Count != 3 || published[0].Shared || published[0].Until.Sub(time.Now()) != 4*time.Minute {
			t.Fatalf("published %+v, want one local ban, count 3, 4m", published)
		}
		// Add over a shared ban makes it this edge's own, and publishes it.
		if _, err := p.Apply(Ban{Prefix: pfx("203.0.113.0/24"), Until: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if err := p.Add(Ban{Prefix: pfx("203.0.113.0/24"), Until: now.Add(2 * time.Hour)}); err != nil || len(published) != 2 || published[1].Shared {
			t.Fatalf("Add over a shared ban: %v, published %+v", err, published)
		}
	})
}

// TestBanBound checks the ban records stay within MaxTracked: remembered records
// make room, bans in force never do.
func TestBanBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustBox(t, Config{MaxTracked: 4, Ban: time.Minute, MaxBan: time.Hour})
		now := time.Now()
		prefixes := []string{"192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32", "2001:db9::/32"}
		for i, s := range prefixes[:4] {
			if err := p.Add(Ban{Prefix: pfx(s), Until: now.Add(time.Duration(i+1) * time.Second)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Add(Ban{Prefix: pfx(prefixes[4]), Until: now.Add(time.Hour)}); !errors.Is(err, ErrBanListFull) {
			t.Fatalf("Add to a list full of bans in force: %v", err)
		}
		time.Sleep(2 * time.Second) // two bans end, remembered
		if st := p.Stats(); st.Active != 2 || st.Remembered != 2 {
			t.Fatalf("stats %+v", st)
		}
		if err := p.Add(Ban{Prefix: pfx(prefixes[4]), Until: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		// The record forgotten to make room is the one that ended first.
		if err := p.Add(Ban{Prefix: pfx(prefixes[1]), Until: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if b := p.List(time.Now()); len(b) != 4 || b[0].Prefix != pfx(prefixes[1]) || b[0].Count != 2 {
			t.Fatalf("List = %+v, want 4 bans, %s a repeat", b, prefixes[1])
		}
		if st := p.Stats(); st.Active+st.Remembered > 4 {
			t.Fatalf("stats %+v over the bound", st)
		}
	})
}

// TestEviction checks which rejection count makes room for a new source: one
// without recent rejections first, else the one with the fewest.
func TestEviction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustBox(t, Config{MaxTracked: 4, Rejections: 100, Within: 8 * time.Second})
		t0 := time.Now()
		reject := func(a string, at time.Duration, n int) {
			for range n {
				p.Reject(ip(a), t0.Add(at))
			}
		}
		count := func(a string) uint64 {
			sh := &p.counters[0]
			k := p.source(ip(a))
			if i, ok := sh.index[k.src]; ok {
				return sh.entries[i].live(floorDiv(t0.UnixNano(), sh.sub) + 9)
			}
			return 0
		}
		reject("192.0.2.1", 0, 5)              // stale by 9s
		reject("192.0.2.2", 2*time.Second, 3)  // 3 live
		reject("192.0.2.3", 2*time.Second, 1)  // 1 live
		reject("192.0.2.4", 2*time.Second, 20) // 20 live
		reject("192.0.2.5", 9*time.Second, 1)  // evicts .1, stale
		if count("192.0.2.1") != 0 || count("192.0.2.4") != 20 {
			t.Fatal("the stale count was not the one evicted")
		}
		reject("192.0.2.6", 9*time.Second, 1) // evicts .3 or .5, one rejection each; .3 is older
		if _, ok := p.counters[0].index[p.source(ip("192.0.2.3")).src]; ok {
			t.Fatal(".3 kept")
		}
		if count("192.0.2.2") != 3 || count("192.0.2.4") != 20 {
			t.Fatal("a fuller count was evicted")
		}
		if st := p.Stats(); st.Tracked != 4 || st.Evicted != 1 {
			t.Fatalf("stats %+v, want 4 tracked, 1 evicted with rejections", st)
		}
	})
}

// TestFlood sends a million distinct sources, each rejected once, through a box
// tracking far fewer: state stays bounded, a ban made before stays, and a source close
// to its ban is not pardoned by the flood.
func TestFlood(t *testing.T) {
	sources, maxTracked := 1_000_000, 100_000
	if raceEnabled || testing.Short() {
		sources, maxTracked = 100_000, 10_000
	}
	synctest.Test(t, func(t *testing.T) {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)

		p := mustBox(t, Config{MaxTracked: maxTracked})
		t0 := time.Now()
		banned, near := ip("203.0.113.66"), ip("2001:db8:abcd::1")
		for range 51 {
			p.Reject(banned, t0)
		}
		for range 50 {
			p.Reject(near, t0)
		}
		for i := range sources {
			a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
			if i%2 == 1 {
				a = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb9, byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i), 15: 1})
			}
			p.Reject(a, t0.Add(time.Duration(i)*time.Microsecond))
		}
		st := p.Stats()
		if st.Tracked > maxTracked || st.Active != 1 {
			t.Fatalf("stats %+v, want Tracked ≤ %d and the one ban", st, maxTracked)
		}
		if !p.Banned(banned) {
			t.Fatal("the flood lifted a ban")
		}
		if !p.Reject(near, t0.Add(time.Duration(sources)*time.Microsecond)) {
			t.Fatal("the flood pardoned a source at its threshold")
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		heap := float64(after.HeapAlloc) - float64(before.HeapAlloc)
		t.Logf("%d sources through MaxTracked %d: tracked %d, evicted with rejections %d, heap %.1f MB (%.0f B a tracked source)",
			sources, maxTracked, st.Tracked, st.Evicted, heap/1e6, heap/float64(st.Tracked))
		runtime.KeepAlive(p)
	})
}

// TestConcurrent races Reject, Banned, Add, Apply, Lift, List, Stats and the
// timer ending bans; run it with -race. A ban never lifted must read as banned
// throughout. It runs in fake time, then in real time with bans of milliseconds.
func TestConcurrent(t *testing.T) {
	t.Run("fake time", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) { penaltyRace(t, time.Second, 100*time.Millisecond) })
	})
	t.Run("real time", func(t *testing.T) { penaltyRace(t, time.Millisecond, 0) })
}

func penaltyRace(t *testing.T, ban, pause time.Duration) {
	p := mustBox(t, Config{Rejections: 5, Ban: ban, MaxBan: 4 * ban, MaxTracked: 512})
	keep := ip("192.0.2.200")
	if err := p.Add(Ban{Prefix: netip.PrefixFrom(keep, 32), Until: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	iters := 3000
	if raceEnabled {
		iters = 1000
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range iters {
				a := netip.AddrFrom4([4]byte{10, byte(w), byte(i % 7), byte(i % 3)})
				now := time.Now()
				p.Reject(a, now)
				if i%100 == 0 {
					p.Lift(netip.PrefixFrom(a, 32))
					p.Add(Ban{Prefix: netip.PrefixFrom(a, 24), Until: now.Add(ban)})
					p.Apply(Ban{Prefix: pfx("2001:db8::/48"), Until: now.Add(ban)})
					p.List(now)
					p.Stats()
					// Within alternates, so the counts move between sub-window lengths.
					p.SetLimits(Config{Rejections: 4 + i/100%2, Within: time.Duration(10+i/100%2*10) * time.Second,
						Ban: ban, MaxBan: 4 * ban, MaxTracked: 512})
					time.Sleep(pause)
				}
			}
		})
		wg.Go(func() {
			for i := range 4 * iters {
				if !p.Banned(keep) {
					t.Error("a ban in force read as not banned")
					return
				}
				p.Banned(netip.AddrFrom4([4]byte{10, byte(w), byte(i % 7), 0}))
				if i%500 == 0 {
					time.Sleep(pause / 10)
				}
			}
		})
	}
	wg.Wait()
	if st := p.Stats(); st.Tracked > 512 || st.Active < 1 || st.Total < 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestBannedLockFree checks Banned answers while every lock of the box is held
// (it would block forever if it took one) and allocates nothing.
func TestBannedLockFree(t *testing.T) {
	p := mustBox(t, Config{})
	p.Add(Ban{Prefix: pfx("192.0.2.0/24"), Until: time.Now().Add(time.Hour)})
	p.Add(Ban{Prefix: pfx("2001:db8::/64"), Until: time.Now().Add(time.Hour)})
	p.mu.Lock()
	for i := range p.counters {
		p.counters[i].mu.Lock()
	}
	for _, tc := range []struct {
		addr   netip.Addr
		banned bool
	}{
		{ip("192.0.2.1"), true}, {ip("::ffff:192.0.2.1"), true}, {ip("192.0.3.1"), false},
		{ip("2001:db8::1"), true}, {ip("2001:db8::1%eth0"), true}, {ip("2001:db9::1"), false}, {netip.Addr{}, false},
	} {
		if got := p.Banned(tc.addr); got != tc.banned {
			t.Errorf("Banned(%v) = %v, want %v", tc.addr, got, tc.banned)
		}
		if n := testing.AllocsPerRun(100, func() { p.Banned(tc.addr) }); n != 0 {
			t.Errorf("Banned(%v) allocates %v", tc.addr, n)
		}
	}
	for i := range p.counters {
		p.counters[i].mu.Unlock()
	}
	p.mu.Unlock()
}
