package penalty

import (
	"cmp"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/h3edge/h3edge/limiter"
)

var (
	// ErrInvalidBan reports a Ban that Add or Apply cannot record: no valid prefix, or
	// an end that is missing, already past (Add only) or beyond the year 2200.
	ErrInvalidBan = errors.New("penalty: invalid ban")
	// ErrBanListFull reports a ban that could not be recorded because MaxTracked bans
	// are in force: a ban in force is never dropped to make room.
	ErrBanListFull = errors.New("penalty: ban list full of bans in force")
	// ErrFixed reports a SetLimits change that only a new Box can make.
	ErrFixed = errors.New("penalty: a box's MaxTracked and prefix lengths cannot change")
)

// Ban is a banned address prefix.
type Ban struct {
	// Prefix is the banned prefix, masked; IPv4-mapped prefixes are given as IPv4.
	Prefix netip.Prefix
	// Until is when the ban ends.
	Until time.Time
	// Count is how many times the prefix has been banned, this ban included, as far as
	// the box remembers (see Config.MaxBan). A ban made by Reject lasts
	// Ban·2^(Count−1), at most MaxBan.
	Count int
	// Reason says why the prefix is banned, for logs and the admin API.
	Reason string
	// Shared reports a ban this box learnt through Apply (from another edge) and did
	// not make itself.
	Shared bool
}

// Stats is a snapshot of a Box, for metrics (DESIGN.md §7).
type Stats struct {
	Active     int // bans in force (bans_active)
	Remembered int // ended bans whose count is still remembered; Active+Remembered ≤ MaxTracked
	Tracked    int // sources with a rejection count, ≤ MaxTracked

	Total      uint64 // bans made by Reject, Add and Apply since the box was made (bans_total)
	Rejections uint64 // rejections counted by Reject (those of banned sources are not)
	// Evicted counts rejection counts dropped to make room for new sources while they
	// still held recent rejections. Above zero, MaxTracked is too small for the load, or
	// a flood of sources is passing through.
	Evicted uint64
}

// Box bans sources that keep being rejected, and answers, per datagram, whether a source
// is banned. It is safe for concurrent use.
//
// Reject counts one rejection (429) of a source, an address prefix (IPv4Prefix,
// IPv6Prefix). A source rejected more than Rejections times within Within is banned for
// Ban, doubling on each repeat up to MaxBan; Add bans a prefix of any length by hand,
// Apply records a ban another edge made, Lift ends one. The edge wires it as
//
//	box, err := penalty.New(penalty.Config{
//		OnBan: func(b penalty.Ban) { // a new ban, made here
//			guard.Kick(b.Prefix)   // close its QUIC connections
//			closeTCP(b.Prefix)     // and its TCP connections
//			publish(b)             // to the other edges, when abuse.share
//		},
//	})
//	guard, err := quicconn.New(quicconn.Config{Banned: box.Banned, …})
//	// at TCP accept:       if box.Banned(peerIP) { conn.Close() }
//	// on every 429 built:  box.Reject(clientIP, now)
//	// on a ban from Redis: if ok, _ := box.Apply(b); ok { guard.Kick(b.Prefix); closeTCP(b.Prefix) }
//	// on an unban from Redis, or the admin API: box.Lift(prefix)
//
// Banned takes no lock and allocates nothing: bans are kept in an immutable table,
// sharded by prefix, that writers copy and swap atomically. It compares a ban's end with
// the box's clock, which is the latest instant any method was given, pushed forward to
// the wall clock by a timer set for the next ban to end: a ban stops applying at its
// Until plus the timer's latency (well under a millisecond on an idle machine, a
// scheduling delay under load). The instants given to Reject and List must therefore be
// readings of the wall clock the box reads (time.Now, or fake time in a synctest bubble).
//
// State is bounded. Rejection counts are kept for at most MaxTracked sources, each in
// eight sub-windows (about 150 bytes a source). A new source in a full part of the table
// replaces, among a few examined, a source without recent rejections, else the one with
// the fewest, the oldest of equals: a flood of sources rejected once each evicts other
// such sources before a source close to its ban. Bans live apart, in at most MaxTracked
// records (bans in force plus ended bans remembered for MaxBan): a record that must make
// room is the remembered one that would be forgotten soonest, never a ban in force. No
// rejection count can displace a ban.
type Box struct {
	// cfg is fixed but for Rejections, Within, Ban and MaxBan, which SetLimits changes
	// under mu (Rejections and Within are read by Reject from its shard: limit, sub).
	cfg Config
	now func() time.Time

	counters []rejectShard
	ctrShift uint // a source's part of counters is the top bits of its hash

	// Read without locks by Banned.
	tables [banShards]atomic.Pointer[banTable]
	lens4  atomic.Uint64    // bit L set: some IPv4 ban has prefix length L
	lens6  [3]atomic.Uint64 // bit L%64 of word L/64: some IPv6 ban has prefix length L
	clock  atomic.Int64     // the box's clock, ns since the Unix epoch; written under mu

	mu       sync.Mutex
	records  map[boxKey]*banRecord // bans in force and remembered
	ending   banQueue              // bans in force, by end
	lapsing  banQueue              // remembered bans, by when they are forgotten
	dirty    map[uint64]*banTable  // tables copied and edited, not yet published
	lenCount [2][129]int32         // bans in force per family and prefix length
	lensSet  bool                  // lenCount changed since the masks were published
	active   int
	gen      uint64 // numbers record changes, to spot stale queue items
	total    uint64
	timer    *time.Timer
	timerAt  int64 // instant the timer is set for; 0: not set
}

// New returns an empty Box for cfg, or an error wrapping ErrConfig.
func New(cfg Config) (*Box, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	n := 1
	for n < maxRejectShards && n*2*64 <= cfg.MaxTracked {
		n *= 2
	}
	p := &Box{
		cfg:      cfg,
		now:      time.Now,
		counters: make([]rejectShard, n),
		ctrShift: uint(64 - bits.TrailingZeros(uint(n))),
		records:  make(map[boxKey]*banRecord),
		dirty:    make(map[uint64]*banTable),
	}
	for i := range p.counters {
		sh := &p.counters[i]
		sh.max = cfg.MaxTracked / n
		if i < cfg.MaxTracked%n {
			sh.max++
		}
		sh.index = make(map[limiter.Source]int32)
		sh.limit, sh.sub = uint64(cfg.Rejections), int64(cfg.Within/subWindows)
	}
	p.clock.Store(p.now().UnixNano())
	return p, nil
}

// SetLimits replaces Rejections, Within, Ban and MaxBan, keeping every ban and every
// source's rejections: a lower Rejections bans at the next rejection a source already
// over it; a new Within moves each count into the new sub-window that holds the start
// of its old one, dropping those that fall out of the new window; Ban and MaxBan apply
// to the bans made from now on (a ban in force keeps its end, a remembered one its
// time to be forgotten). IPv4Prefix, IPv6Prefix and MaxTracked cannot change
// (ErrFixed); OnBan is ignored. Reject and Banned do not wait for it, but for
// the lock of the part of the table it is moving at that moment.
func (p *Box) SetLimits(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	if cfg.IPv4Prefix != p.cfg.IPv4Prefix || cfg.IPv6Prefix != p.cfg.IPv6Prefix || cfg.MaxTracked != p.cfg.MaxTracked {
		return ErrFixed
	}
	p.mu.Lock()
	p.cfg.Rejections, p.cfg.Within, p.cfg.Ban, p.cfg.MaxBan = cfg.Rejections, cfg.Within, cfg.Ban, cfg.MaxBan
	p.mu.Unlock()
	sub := int64(cfg.Within / subWindows)
	for i := range p.counters {
		sh := &p.counters[i]
		sh.mu.Lock()
		if sh.sub != sub {
			for j := range sh.entries {
				sh.entries[j].rebin(sh.sub, sub)
			}
		}
		sh.limit, sh.sub = uint64(cfg.Rejections), sub
		sh.mu.Unlock()
	}
	return nil
}

// Banned reports whether addr lies in a ban in force. It is meant for every datagram:
// it takes no lock, allocates nothing and reads no clock (see Box for how bans
// end). IPv4-mapped addresses count as IPv4; the zero Addr is never banned.
func (p *Box) Banned(addr netip.Addr) bool {
	return p.bannedAt(addr.Unmap(), p.clock.Load())
}

// bannedAt reports whether the unmapped address a lies in a ban in force at t.
func (p *Box) bannedAt(a netip.Addr, t int64) bool {
	if a.Is4() {
		m := p.lens4.Load()
		if m == 0 {
			return false
		}
		s := limiter.AddrSource(a)
		for ; m != 0; m &= m - 1 {
			if p.find(keyOf(s, bits.TrailingZeros64(m)), t) {
				return true
			}
		}
		return false
	}
	m6 := [3]uint64{p.lens6[0].Load(), p.lens6[1].Load(), p.lens6[2].Load()}
	if m6 == [3]uint64{} || !a.IsValid() {
		return false
	}
	s := limiter.AddrSource(a)
	for w := range m6 {
		for m := m6[w]; m != 0; m &= m - 1 {
			if p.find(keyOf(s, w*64+bits.TrailingZeros64(m)), t) {
				return true
			}
		}
	}
	return false
}

// find reports whether k is banned beyond t in the published tables.
func (p *Box) find(k boxKey, t int64) bool {
	h := k.hash()
	tab := p.tables[h>>banShift].Load()
	if tab == nil {
		return false
	}
	i, ok := tab.find(k, h)
	return ok && tab.slots[i].until > t
}

// Reject counts one rejection of addr's source at now, and bans the source when that
// makes more than Rejections within Within; OnBan is then called before Reject returns.
// It reports whether addr is banned: by this rejection, or already, in which case
// nothing is counted. The zero Addr is ignored.
func (p *Box) Reject(addr netip.Addr, now time.Time) (banned bool) {
	a := addr.Unmap()
	if !a.IsValid() {
		return false
	}
	t := now.UnixNano()
	if p.bannedAt(a, t) {
		return true
	}
	k := p.source(a)
	sh := &p.counters[k.src.Hash()>>p.ctrShift]
	sh.mu.Lock()
	sub := floorDiv(t, sh.sub)
	sh.rejections++
	i, ok := sh.index[k.src]
	if !ok {
		i = sh.add(k.src, sub)
	}
	n := sh.entries[i].hit(sub)
	over := n > sh.limit
	if over {
		sh.remove(i) // a banned source starts afresh when the ban ends
	}
	sh.mu.Unlock()
	if !over {
		return false
	}
	return p.banSource(k, now, n)
}

// banSource bans k, whose count has just passed Rejections with n, at now.
func (p *Box) banSource(k boxKey, now time.Time, n uint64) bool {
	t := now.UnixNano()
	p.mu.Lock()
	p.advance(t)
	rec := p.records[k]
	if rec != nil && rec.active { // banned by another goroutine meanwhile
		p.settle()
		p.mu.Unlock()
		return true
	}
	count := 1
	if rec != nil {
		count = rec.ban.Count + 1
	}
	d := p.length(count)
	b := Ban{
		Prefix: k.prefix(),
		Until:  now.Add(d),
		Count:  count,
		Reason: fmt.Sprintf("rejected %d times within %v", n, p.cfg.Within),
	}
	b, _, err := p.set(k, b, t+int64(d))
	p.settle()
	p.mu.Unlock()
	if err != nil {
		return false
	}
	if p.cfg.OnBan != nil {
		p.cfg.OnBan(b)
	}
	return true
}

// length is the length of a prefix's count-th ban.
func (p *Box) length(count int) time.Duration {
	d := p.cfg.Ban
	for i := 1; i < count && d < p.cfg.MaxBan; i++ {
		d *= 2
	}
	return min(d, p.cfg.MaxBan)
}

// Add bans b.Prefix until b.Until, by hand (the admin API): a prefix of any length,
// narrower or wider than a source. A prefix already banned keeps the later of the two
// ends. Count is raised to b.Count, and a new ban counts as a repeat of a remembered
// one (so a later ban by Reject doubles from there); Shared is ignored. OnBan is called
// when b makes a new ban or a later end, before Add returns. Add returns an error
// wrapping ErrInvalidBan for a ban that is not valid or ends before now, and
// ErrBanListFull when no record can be made for it.
func (p *Box) Add(b Ban) error {
	b, changed, err := p.put(b, false)
	if changed && p.cfg.OnBan != nil {
		p.cfg.OnBan(b)
	}
	return err
}

// Apply records b, a ban another edge made and published, as Add does but with Shared
// set, and without calling OnBan, so a shared ban is never published again. It reports
// whether b made a new ban or a later end; the caller then closes the prefix's
// connections. A ban that has already ended is ignored (false, nil).
func (p *Box) Apply(b Ban) (changed bool, err error) {
	_, changed, err = p.put(b, true)
	return changed, err
}

func (p *Box) put(b Ban, shared bool) (Ban, bool, error) {
	k, pfx, ok := prefixKey(b.Prefix)
	if !ok || b.Until.IsZero() || b.Count < 0 || b.Until.Year() < 1970 || b.Until.Year() > 2200 {
		return Ban{}, false, fmt.Errorf("%w: prefix %v, until %v, count %d", ErrInvalidBan, b.Prefix, b.Until, b.Count)
	}
	until := b.Until.UnixNano()
	b.Prefix, b.Shared = pfx, shared
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.settle()
	t := p.advanceNow()
	if until <= t {
		if shared {
			return Ban{}, false, nil
		}
		return Ban{}, false, fmt.Errorf("%w: %v ends %v, before now", ErrInvalidBan, pfx, b.Until)
	}
	return p.set(k, b, until)
}

// Lift ends the ban of exactly prefix (a ban of a wider or narrower prefix stays) and
// forgets its count, so the prefix's next ban is a first one again: lifting says the ban
// was a mistake. It reports whether a ban in force was lifted.
func (p *Box) Lift(prefix netip.Prefix) bool {
	k, _, ok := prefixKey(prefix)
	if !ok {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.settle()
	p.advanceNow()
	lifted := false
	if rec := p.records[k]; rec != nil {
		lifted = rec.active
		if lifted {
			p.deactivate(rec)
		}
		delete(p.records, k) // its queue items are now stale
	}
	return lifted
}

// List returns the bans in force at now, ordered by prefix.
func (p *Box) List(now time.Time) []Ban {
	p.mu.Lock()
	p.advance(now.UnixNano())
	p.settle()
	out := make([]Ban, 0, p.active)
	for _, rec := range p.records {
		if rec.active {
			out = append(out, rec.ban)
		}
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b Ban) int {
		if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Prefix.Bits(), b.Prefix.Bits())
	})
	return out
}

// Stats returns a snapshot. It locks each part of the table in turn, briefly.
func (p *Box) Stats() Stats {
	var st Stats
	p.mu.Lock()
	p.advanceNow()
	p.settle()
	st.Active, st.Remembered, st.Total = p.active, len(p.records)-p.active, p.total
	p.mu.Unlock()
	for i := range p.counters {
		sh := &p.counters[i]
		sh.mu.Lock()
		st.Tracked += len(sh.entries)
		st.Rejections += sh.rejections
		st.Evicted += sh.evicted
		sh.mu.Unlock()
	}
	return st
}

// source returns addr's source key: the unmapped address cut to the source prefix.
func (p *Box) source(a netip.Addr) boxKey {
	s := limiter.AddrSource(a)
	return keyOf(s, limiter.SourcePrefix{IPv4: p.cfg.IPv4Prefix, IPv6: p.cfg.IPv6Prefix}.Bits(s))
}
