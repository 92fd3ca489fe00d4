package limiter

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// PenaltyConfig configures a PenaltyBox. The zero PenaltyConfig gives the defaults of
// DESIGN.md §4: abuse: for the thresholds, ip: for the prefix lengths and the bound.
type PenaltyConfig struct {
	// Rejections is how many rejections a source may earn within Within and stay
	// unbanned: the next one bans it. If zero, 50 is used. At most 1<<30.
	Rejections int
	// Within is the period rejections are counted over, in eight sub-windows of
	// Within/8 each: a source is banned only when more than Rejections of its
	// rejections lie within a span shorter than Within, and always when they lie
	// within 7/8 of Within. If zero, 10s is used; at least 8ns.
	Within time.Duration
	// Ban is the length of a source's first ban. Each further ban of the same prefix,
	// while the box remembers the last one, lasts twice as long as the one before. If
	// zero, 1m is used.
	Ban time.Duration
	// MaxBan caps the length of a ban, and is how long after a ban ends the box
	// remembers it: a source banned again within MaxBan of its last ban's end gets a
	// doubled ban, one that stays out of trouble that long starts again at Ban. If zero,
	// 1h is used; at least Ban.
	MaxBan time.Duration

	// IPv4Prefix is the prefix length IPv4 sources are counted and banned by, 1 to 32.
	// IPv4-mapped IPv6 addresses count as IPv4. If zero, 32 is used.
	IPv4Prefix int
	// IPv6Prefix is the prefix length IPv6 sources are counted and banned by, 1 to 128.
	// If zero, 64 is used.
	IPv6Prefix int

	// MaxTracked bounds the sources that have a rejection count, and separately the ban
	// records (bans in force plus ended bans still remembered). A rejection count takes
	// about 150 bytes, a ban in force about 400. If zero, 1,000,000 is used. At most 1<<31.
	MaxTracked int

	// OnBan, if not nil, is called once for every ban the box makes (Reject) or is told
	// to make or extend by Add, on the goroutine that called them, after the box's locks
	// are released: it may call the box. It is not called for Apply. The edge closes the
	// prefix's connections in it and publishes the ban to other edges.
	OnBan func(Ban)
}

// Defaults of the zero PenaltyConfig.
const (
	defaultRejections = 50
	defaultWithin     = 10 * time.Second
	defaultBan        = time.Minute
	defaultMaxBan     = time.Hour
	defaultIPv4Prefix = 32
	defaultIPv6Prefix = 64
	defaultMaxTracked = 1_000_000
)

var (
	// ErrPenaltyConfig is wrapped by the errors of PenaltyConfig.Validate.
	ErrPenaltyConfig = errors.New("limiter: invalid penalty box config")
	// ErrInvalidBan reports a Ban that Add or Apply cannot record: no valid prefix, or
	// an end that is missing, already past (Add only) or beyond the year 2200.
	ErrInvalidBan = errors.New("limiter: invalid ban")
	// ErrBanListFull reports a ban that could not be recorded because MaxTracked bans
	// are in force: a ban in force is never dropped to make room.
	ErrBanListFull = errors.New("limiter: ban list full of bans in force")
	// ErrPenaltyFixed reports a SetLimits change that only a new PenaltyBox can make.
	ErrPenaltyFixed = errors.New("limiter: a penalty box's MaxTracked and prefix lengths cannot change")
)

// Validate reports the first field out of range, wrapping ErrPenaltyConfig.
func (c PenaltyConfig) Validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("%w: %s = %v, want %s", ErrPenaltyConfig, field, v, want)
	}
	switch {
	case c.Rejections < 0 || c.Rejections > 1<<30:
		return bad("Rejections", c.Rejections, "0 to 1<<30")
	case c.Within < 0 || c.Within > 0 && c.Within < 8:
		return bad("Within", c.Within, "0 or at least 8ns")
	case c.Ban < 0:
		return bad("Ban", c.Ban, "not negative")
	case c.MaxBan < 0:
		return bad("MaxBan", c.MaxBan, "not negative")
	case c.IPv4Prefix < 0 || c.IPv4Prefix > 32:
		return bad("IPv4Prefix", c.IPv4Prefix, "0 to 32")
	case c.IPv6Prefix < 0 || c.IPv6Prefix > 128:
		return bad("IPv6Prefix", c.IPv6Prefix, "0 to 128")
	case c.MaxTracked < 0 || c.MaxTracked > 1<<31:
		return bad("MaxTracked", c.MaxTracked, "0 to 1<<31")
	}
	if d := c.withDefaults(); d.Ban > d.MaxBan {
		return bad("Ban", d.Ban, fmt.Sprintf("at most MaxBan (%v)", d.MaxBan))
	}
	return nil
}

// withDefaults resolves the zero values; the one place the defaults are applied.
func (c PenaltyConfig) withDefaults() PenaltyConfig {
	zero := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	zeroD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	zero(&c.Rejections, defaultRejections)
	zeroD(&c.Within, defaultWithin)
	zeroD(&c.Ban, defaultBan)
	zeroD(&c.MaxBan, defaultMaxBan)
	zero(&c.IPv4Prefix, defaultIPv4Prefix)
	zero(&c.IPv6Prefix, defaultIPv6Prefix)
	zero(&c.MaxTracked, defaultMaxTracked)
	return c
}

// Ban is a banned address prefix.
type Ban struct {
	// Prefix is the banned prefix, masked; IPv4-mapped prefixes are given as IPv4.
	Prefix netip.Prefix
	// Until is when the ban ends.
	Until time.Time
	// Count is how many times the prefix has been banned, this ban included, as far as
	// the box remembers (see PenaltyConfig.MaxBan). A ban made by Reject lasts
	// Ban·2^(Count−1), at most MaxBan.
	Count int
	// Reason says why the prefix is banned, for logs and the admin API.
	Reason string
	// Shared reports a ban this box learnt through Apply (from another edge) and did
	// not make itself.
	Shared bool
}

// PenaltyStats is a snapshot of a PenaltyBox, for metrics (DESIGN.md §7).
type PenaltyStats struct {
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

// PenaltyBox bans sources that keep being rejected, and answers, per datagram, whether
// a source is banned. It is safe for concurrent use.
//
// Reject counts one rejection (429) of a source, an address prefix (IPv4Prefix,
// IPv6Prefix). A source rejected more than Rejections times within Within is banned for
// Ban, doubling on each repeat up to MaxBan; Add bans a prefix of any length by hand,
// Apply records a ban another edge made, Lift ends one. The edge wires it as
//
//	box, err := limiter.NewPenaltyBox(limiter.PenaltyConfig{
//		OnBan: func(b limiter.Ban) { // a new ban, made here
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
type PenaltyBox struct {
	// cfg is fixed but for Rejections, Within, Ban and MaxBan, which SetLimits changes
	// under mu (Rejections and Within are read by Reject from its shard: limit, sub).
	cfg PenaltyConfig
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

// NewPenaltyBox returns an empty PenaltyBox for cfg, or an error wrapping
// ErrPenaltyConfig.
func NewPenaltyBox(cfg PenaltyConfig) (*PenaltyBox, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	n := 1
	for n < maxRejectShards && n*2*64 <= cfg.MaxTracked {
		n *= 2
	}
	p := &PenaltyBox{
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
		sh.index = make(map[addrKey]int32)
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
// (ErrPenaltyFixed); OnBan is ignored. Reject and Banned do not wait for it, but for
// the lock of the part of the table it is moving at that moment.
func (p *PenaltyBox) SetLimits(cfg PenaltyConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	if cfg.IPv4Prefix != p.cfg.IPv4Prefix || cfg.IPv6Prefix != p.cfg.IPv6Prefix || cfg.MaxTracked != p.cfg.MaxTracked {
		return ErrPenaltyFixed
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
// it takes no lock, allocates nothing and reads no clock (see PenaltyBox for how bans
// end). IPv4-mapped addresses count as IPv4; the zero Addr is never banned.
func (p *PenaltyBox) Banned(addr netip.Addr) bool {
	return p.bannedAt(addr.Unmap(), p.clock.Load())
}

// bannedAt reports whether the unmapped address a lies in a ban in force at t.
func (p *PenaltyBox) bannedAt(a netip.Addr, t int64) bool {
	if a.Is4() {
		m := p.lens4.Load()
		if m == 0 {
			return false
		}
		b := a.As4()
		lo := uint64(binary.BigEndian.Uint32(b[:]))
		for ; m != 0; m &= m - 1 {
			if p.find(key4(lo, bits.TrailingZeros64(m)), t) {
				return true
			}
		}
		return false
	}
	m6 := [3]uint64{p.lens6[0].Load(), p.lens6[1].Load(), p.lens6[2].Load()}
	if m6 == [3]uint64{} || !a.IsValid() {
		return false
	}
	hi, lo := words6(a)
	for w := range m6 {
		for m := m6[w]; m != 0; m &= m - 1 {
			if p.find(key6(hi, lo, w*64+bits.TrailingZeros64(m)), t) {
				return true
			}
		}
	}
	return false
}

// words6 returns the IPv6 address a as two big-endian words. It goes through
// AppendBinary: As16 makes the compiler copy the array with a 16-byte load that stalls
// on the two 8-byte stores just made, which doubled the cost of Banned.
func words6(a netip.Addr) (hi, lo uint64) {
	var buf [16]byte
	b, _ := a.WithZone("").AppendBinary(buf[:0])
	if len(b) != 16 {
		return 0, 0
	}
	return binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
}

// find reports whether k is banned beyond t in the published tables.
func (p *PenaltyBox) find(k boxKey, t int64) bool {
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
func (p *PenaltyBox) Reject(addr netip.Addr, now time.Time) (banned bool) {
	a := addr.Unmap()
	if !a.IsValid() {
		return false
	}
	t := now.UnixNano()
	if p.bannedAt(a, t) {
		return true
	}
	k := p.source(a)
	sh := &p.counters[k.addrKey.hash()>>p.ctrShift]
	sh.mu.Lock()
	sub := floorDiv(t, sh.sub)
	sh.rejections++
	i, ok := sh.index[k.addrKey]
	if !ok {
		i = sh.add(k.addrKey, sub)
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
func (p *PenaltyBox) banSource(k boxKey, now time.Time, n uint64) bool {
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
func (p *PenaltyBox) length(count int) time.Duration {
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
func (p *PenaltyBox) Add(b Ban) error {
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
func (p *PenaltyBox) Apply(b Ban) (changed bool, err error) {
	_, changed, err = p.put(b, true)
	return changed, err
}

func (p *PenaltyBox) put(b Ban, shared bool) (Ban, bool, error) {
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
func (p *PenaltyBox) Lift(prefix netip.Prefix) bool {
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
func (p *PenaltyBox) List(now time.Time) []Ban {
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
func (p *PenaltyBox) Stats() PenaltyStats {
	var st PenaltyStats
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

// source returns addr's source key: the unmapped address masked to the source prefix.
func (p *PenaltyBox) source(a netip.Addr) boxKey {
	b := a.As16()
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	if a.Is4() {
		return key4(lo, p.cfg.IPv4Prefix)
	}
	return key6(hi, lo, p.cfg.IPv6Prefix)
}

// Ban records, all guarded by mu.

// banRecord is a prefix's ban in force, or its last ban, remembered.
type banRecord struct {
	ban    Ban
	key    boxKey
	until  int64 // ban.Until, ns
	forget int64 // until+MaxBan: when the record is dropped once the ban has ended
	active bool  // in force: in the published tables and in ending
	gen    uint64
}

// banItem is a queued instant at which a record changes: ends (ending) or is
// forgotten (lapsing). An item whose gen is not its record's is stale and skipped.
type banItem struct {
	at  int64
	gen uint64
	key boxKey
}

// advanceNow advances the box to the wall clock and returns the instant reached.
func (p *PenaltyBox) advanceNow() int64 { return p.advance(p.now().UnixNano()) }

// advance moves the box's clock to t, if later, ends the bans due by then and forgets
// the records due. It returns the clock.
func (p *PenaltyBox) advance(t int64) int64 {
	if c := p.clock.Load(); t > c {
		p.clock.Store(t)
	} else {
		t = c
	}
	for len(p.ending) > 0 && p.ending[0].at <= t {
		it := p.ending.pop()
		if rec := p.records[it.key]; rec != nil && rec.gen == it.gen && rec.active {
			p.deactivate(rec)
			p.queue(&p.lapsing, banItem{at: rec.forget, gen: rec.gen, key: rec.key})
		}
	}
	for len(p.lapsing) > 0 && p.lapsing[0].at <= t {
		it := p.lapsing.pop()
		if rec := p.records[it.key]; rec != nil && rec.gen == it.gen && !rec.active {
			delete(p.records, it.key)
		}
	}
	return t
}

// set bans k until until with b's details, b.Count raised to a repeat of a remembered
// ban, or extends the ban in force. It reports the ban in force and whether it is new
// or ends later than before.
func (p *PenaltyBox) set(k boxKey, b Ban, until int64) (Ban, bool, error) {
	rec := p.records[k]
	if rec != nil && rec.active {
		changed := until > rec.until
		if changed {
			rec.until, rec.ban.Until, rec.forget = until, b.Until, until+int64(p.cfg.MaxBan)
			if b.Reason != "" {
				rec.ban.Reason = b.Reason
			}
			p.gen++
			rec.gen = p.gen
			p.queue(&p.ending, banItem{at: until, gen: rec.gen, key: k})
			p.edit(k).put(k, until)
		}
		rec.ban.Count = max(rec.ban.Count, b.Count)
		rec.ban.Shared = rec.ban.Shared && b.Shared
		return rec.ban, changed, nil
	}
	count := 1
	if rec != nil {
		count = rec.ban.Count + 1
	} else {
		if len(p.records) >= p.cfg.MaxTracked && !p.forgetOne() {
			return Ban{}, false, fmt.Errorf("%w: %d bans in force", ErrBanListFull, p.active)
		}
		rec = &banRecord{key: k}
		p.records[k] = rec
	}
	b.Count = max(b.Count, count)
	p.gen++
	rec.ban, rec.until, rec.forget, rec.gen = b, until, until+int64(p.cfg.MaxBan), p.gen
	rec.active = true
	p.active++
	p.lenCount[k.family()][k.bits]++
	p.lensSet = true
	p.edit(k).put(k, until)
	p.queue(&p.ending, banItem{at: until, gen: rec.gen, key: k})
	p.total++
	return rec.ban, true, nil
}

// deactivate takes rec's ban out of force; the record stays.
func (p *PenaltyBox) deactivate(rec *banRecord) {
	rec.active = false
	p.active--
	p.lenCount[rec.key.family()][rec.key.bits]--
	p.lensSet = true
	p.edit(rec.key).del(rec.key)
}

// forgetOne drops the remembered record that would be forgotten soonest, to make room.
// It reports false if no record is merely remembered.
func (p *PenaltyBox) forgetOne() bool {
	for len(p.lapsing) > 0 {
		it := p.lapsing.pop()
		if rec := p.records[it.key]; rec != nil && rec.gen == it.gen && !rec.active {
			delete(p.records, it.key)
			return true
		}
	}
	return false
}

// queue pushes it onto q, and rebuilds q from the records when stale items make up
// most of it.
func (p *PenaltyBox) queue(q *banQueue, it banItem) {
	q.push(it)
	if len(*q) <= 2*len(p.records)+64 {
		return
	}
	ending := q == &p.ending
	*q = (*q)[:0]
	for _, rec := range p.records {
		if rec.active && ending {
			q.push(banItem{at: rec.until, gen: rec.gen, key: rec.key})
		} else if !rec.active && !ending {
			q.push(banItem{at: rec.forget, gen: rec.gen, key: rec.key})
		}
	}
}

// settle ends a change: it publishes the edited tables and sets the timer.
func (p *PenaltyBox) settle() {
	p.publish()
	p.schedule()
}

// schedule sets the timer for the next ban to end, or stops it when none is in force.
func (p *PenaltyBox) schedule() {
	for len(p.ending) > 0 {
		it := p.ending[0]
		if rec := p.records[it.key]; rec != nil && rec.gen == it.gen && rec.active {
			break
		}
		p.ending.pop()
	}
	if len(p.ending) == 0 {
		if p.timerAt != 0 {
			p.timer.Stop()
			p.timerAt = 0
		}
		return
	}
	at := p.ending[0].at
	if at == p.timerAt {
		return
	}
	d := time.Duration(at - p.now().UnixNano())
	if p.timer == nil {
		p.timer = time.AfterFunc(d, p.endBans)
	} else {
		p.timer.Reset(d)
	}
	p.timerAt = at
}

// endBans is the timer's: it ends the bans due by the wall clock.
func (p *PenaltyBox) endBans() {
	p.mu.Lock()
	p.timerAt = 0
	p.advanceNow()
	p.settle()
	p.mu.Unlock()
}

// edit returns the private copy of the table that holds k, made on first use since the
// last publish.
func (p *PenaltyBox) edit(k boxKey) *banTable {
	i := k.hash() >> banShift
	tab := p.dirty[i]
	if tab == nil {
		tab = p.tables[i].Load().clone()
		p.dirty[i] = tab
	}
	return tab
}

// publish swaps in the edited tables, then the prefix-length masks: a reader that sees
// a length finds its bans.
func (p *PenaltyBox) publish() {
	for i, tab := range p.dirty {
		if tab.n == 0 {
			tab = nil
		}
		p.tables[i].Store(tab)
	}
	clear(p.dirty)
	if !p.lensSet {
		return
	}
	p.lensSet = false
	var m4 uint64
	var m6 [3]uint64
	for l, n := range p.lenCount[0][:33] {
		if n > 0 {
			m4 |= 1 << l
		}
	}
	for l, n := range p.lenCount[1] {
		if n > 0 {
			m6[l/64] |= 1 << (l % 64)
		}
	}
	p.lens4.Store(m4)
	for w := range m6 {
		p.lens6[w].Store(m6[w])
	}
}

// banQueue is a binary min-heap of items by at.
type banQueue []banItem

func (q *banQueue) push(it banItem) {
	h := append(*q, it)
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if h[parent].at <= h[i].at {
			break
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
	*q = h
}

func (q *banQueue) pop() banItem {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		small, l, r := i, 2*i+1, 2*i+2
		if l < n && h[l].at < h[small].at {
			small = l
		}
		if r < n && h[r].at < h[small].at {
			small = r
		}
		if small == i {
			break
		}
		h[i], h[small] = h[small], h[i]
		i = small
	}
	*q = h
	return top
}

// Keys.

// addrKey is an address in 16-byte form, IPv4 as IPv4-mapped: no unmapped IPv6 address
// has that form, so the two families never collide.
type addrKey struct{ hi, lo uint64 }

// boxKey is a prefix: its masked address and length, counted within the IPv4 address
// for IPv4.
type boxKey struct {
	addrKey
	bits uint8
}

const v4Mapped = 0xffff << 32 // the top of an IPv4-mapped address's low word

func key4(lo uint64, l int) boxKey {
	return boxKey{addrKey{0, v4Mapped | lo&uint64(uint32(math.MaxUint32)<<(32-l))}, uint8(l)}
}

func key6(hi, lo uint64, l int) boxKey {
	if l >= 64 {
		return boxKey{addrKey{hi, lo & (uint64(math.MaxUint64) << (128 - l))}, uint8(l)}
	}
	return boxKey{addrKey{hi & (uint64(math.MaxUint64) << (64 - l)), 0}, uint8(l)}
}

// family is 0 for IPv4, 1 for IPv6.
func (k boxKey) family() int {
	if k.hi == 0 && k.lo>>32 == 0xffff {
		return 0
	}
	return 1
}

func (k boxKey) prefix() netip.Prefix {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], k.hi)
	binary.BigEndian.PutUint64(b[8:], k.lo)
	return netip.PrefixFrom(netip.AddrFrom16(b).Unmap(), int(k.bits))
}

// prefixKey returns the key of p, with p unmapped and masked.
func prefixKey(p netip.Prefix) (boxKey, netip.Prefix, bool) {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	if !p.IsValid() {
		return boxKey{}, p, false
	}
	p = p.Masked()
	b := p.Addr().As16()
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	if p.Addr().Is4() {
		return key4(lo, p.Bits()), p, true
	}
	return key6(hi, lo, p.Bits()), p, true
}

func (k addrKey) hash() uint64 {
	h := k.hi*0x9e3779b97f4a7c15 ^ bits.RotateLeft64(k.lo, 31)*0xc2b2ae3d27d4eb4f
	h ^= h >> 32
	h *= 0xd6e8feb86659fd93
	return h ^ h>>29
}

func (k boxKey) hash() uint64 {
	return addrKey{k.hi, k.lo ^ uint64(k.bits)<<56}.hash()
}

// Published ban tables.

const (
	banShards = 1024 // a change copies one shard's table: 1/1024 of the bans
	banShift  = 64 - 10
)

// banTable is one shard of the bans in force: open addressing with linear probing, at
// most half full. Each slot has a fingerprint of its key's hash in tags, so that a miss
// usually reads one cache line of tags and no slot. Published tables are never written
// again.
type banTable struct {
	tags  []uint32 // 0: empty slot; power-of-two length
	slots []banSlot
	n     int
}

type banSlot struct {
	hi, lo uint64
	until  int64
	bits   uint8
}

func (s *banSlot) key() boxKey { return boxKey{addrKey{s.hi, s.lo}, s.bits} }

// tagOf is a key's fingerprint: hash bits that choose neither the shard nor, in
// tables under a million slots, the slot. Never 0.
func tagOf(h uint64) uint32 { return uint32(h>>20) | 1 }

// find returns k's slot, or the empty slot where it would go.
func (t *banTable) find(k boxKey, h uint64) (uint64, bool) {
	mask := uint64(len(t.tags) - 1)
	tag := tagOf(h)
	for i := h & mask; ; i = (i + 1) & mask {
		switch t.tags[i] {
		case 0:
			return i, false
		case tag:
			if s := &t.slots[i]; s.hi == k.hi && s.lo == k.lo && s.bits == k.bits {
				return i, true
			}
		}
	}
}

// clone returns a private copy of t (nil: empty) sized for what it holds.
func (t *banTable) clone() *banTable {
	size := 8
	if t != nil {
		for size < 2*(t.n+1) {
			size *= 2
		}
	}
	c := &banTable{tags: make([]uint32, size), slots: make([]banSlot, size)}
	if t != nil {
		c.insert(t)
	}
	return c
}

// insert puts every ban of from into t.
func (t *banTable) insert(from *banTable) {
	for i, tag := range from.tags {
		if tag != 0 {
			s := &from.slots[i]
			t.put(s.key(), s.until)
		}
	}
}

// put records k's end, adding k if it is new.
func (t *banTable) put(k boxKey, until int64) {
	h := k.hash()
	i, ok := t.find(k, h)
	if ok {
		t.slots[i].until = until
		return
	}
	if 2*(t.n+1) > len(t.tags) {
		old := *t
		*t = banTable{tags: make([]uint32, 2*len(old.tags)), slots: make([]banSlot, 2*len(old.slots))}
		t.insert(&old)
		i, _ = t.find(k, h)
	}
	t.tags[i] = tagOf(h)
	t.slots[i] = banSlot{hi: k.hi, lo: k.lo, until: until, bits: k.bits}
	t.n++
}

// del removes k, shifting later slots of its run back into the gap.
func (t *banTable) del(k boxKey) {
	i, ok := t.find(k, k.hash())
	if !ok {
		return
	}
	mask := uint64(len(t.tags) - 1)
	for j := (i + 1) & mask; t.tags[j] != 0; j = (j + 1) & mask {
		home := t.slots[j].key().hash() & mask
		if (j-home)&mask >= (j-i)&mask {
			t.tags[i], t.slots[i] = t.tags[j], t.slots[j]
			i = j
		}
	}
	t.tags[i], t.slots[i] = 0, banSlot{}
	t.n--
}

// Rejection counts.

const (
	subWindows      = 8 // a power of two
	maxRejectShards = 256
	// evictScan is how many entries an eviction examines; sweepScan how many an
	// insertion into a half-full shard examines for entries without recent rejections.
	evictScan = 8
	sweepScan = 2
)

// rejectShard is one independently locked part of the rejection counts.
type rejectShard struct {
	mu      sync.Mutex
	index   map[addrKey]int32 // source → position in entries
	entries []rejectCount
	hand    int // where the next sweep or eviction looks
	max     int

	// limit is PenaltyConfig.Rejections and sub the length of a counting sub-window
	// (Within/subWindows, ns): kept here so that Reject reads them under the lock it
	// takes anyway, and SetLimits changes them with the counts they apply to.
	limit uint64
	sub   int64

	rejections, evicted uint64
	_                   [64]byte // keep neighbouring shards' locks off one cache line
}

// rejectCount is a source's rejections in the last subWindows sub-windows.
type rejectCount struct {
	key  addrKey
	last int64 // the sub-window of the latest rejection
	n    [subWindows]uint32
}

// hit counts a rejection in sub-window sub and returns the rejections in the window
// ending with it. A sub-window earlier than the last one counts as the last one (a
// clock stepping back counts as no time passing).
func (c *rejectCount) hit(sub int64) uint64 {
	if sub > c.last {
		if sub-c.last >= subWindows {
			c.n = [subWindows]uint32{}
		} else {
			for s := c.last + 1; s <= sub; s++ {
				c.n[s&(subWindows-1)] = 0
			}
		}
		c.last = sub
	}
	if i := c.last & (subWindows - 1); c.n[i] < math.MaxUint32 {
		c.n[i]++
	}
	var sum uint64
	for _, v := range c.n {
		sum += uint64(v)
	}
	return sum
}

// rebin moves c from sub-windows of from ns to sub-windows of to ns: each count goes to
// the new sub-window holding the start of its old one, and counts older than the new
// window ending with the last rejection are dropped.
func (c *rejectCount) rebin(from, to int64) {
	old := c.n
	c.n = [subWindows]uint32{}
	last := floorDiv(c.last*from, to)
	for s := c.last - (subWindows - 1); s <= c.last; s++ {
		ns := floorDiv(s*from, to)
		if last-ns >= subWindows {
			continue
		}
		i := ns & (subWindows - 1)
		c.n[i] = uint32(min(uint64(c.n[i])+uint64(old[s&(subWindows-1)]), math.MaxUint32))
	}
	c.last = last
}

// live returns the rejections still inside the window that ends with sub-window sub.
func (c *rejectCount) live(sub int64) uint64 {
	var sum uint64
	for s := max(c.last, sub) - (subWindows - 1); s <= c.last; s++ {
		sum += uint64(c.n[s&(subWindows-1)])
	}
	return sum
}

// add stores a new source with no rejections and returns its position. Once the
// shard is half full it first drops a few entries without recent rejections, and when
// it is full it evicts one.
func (sh *rejectShard) add(k addrKey, sub int64) int32 {
	if 2*len(sh.entries) >= sh.max {
		for range min(sweepScan, len(sh.entries)) {
			if sh.hand >= len(sh.entries) {
				sh.hand = 0
			}
			if sh.entries[sh.hand].live(sub) == 0 {
				sh.remove(int32(sh.hand))
			} else {
				sh.hand++
			}
		}
	}
	if len(sh.entries) >= sh.max {
		sh.evict(sub)
	}
	i := int32(len(sh.entries))
	sh.entries = append(sh.entries, rejectCount{key: k, last: sub})
	sh.index[k] = i
	return i
}

// evict drops, among the next evictScan entries, one without recent rejections, else
// the one with the fewest, the oldest of equals.
func (sh *rejectShard) evict(sub int64) {
	best, bestN := -1, uint64(0)
	for range min(evictScan, len(sh.entries)) {
		if sh.hand >= len(sh.entries) {
			sh.hand = 0
		}
		n := sh.entries[sh.hand].live(sub)
		if best < 0 || n < bestN || n == bestN && sh.entries[sh.hand].last < sh.entries[best].last {
			best, bestN = sh.hand, n
		}
		if n == 0 {
			break
		}
		sh.hand++
	}
	if bestN > 0 {
		sh.evicted++
	}
	sh.remove(int32(best))
}

// remove deletes the entry at i, moving the last entry into its place.
func (sh *rejectShard) remove(i int32) {
	delete(sh.index, sh.entries[i].key)
	last := int32(len(sh.entries) - 1)
	if i != last {
		sh.entries[i] = sh.entries[last]
		sh.index[sh.entries[i].key] = i
	}
	sh.entries = sh.entries[:last]
}
