package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/h3edge/h3edge/limiter"
)

// call is one decision on its way to Redis: its segments, one per Redis Cluster slot
// (one in all on a single Redis).
type call struct {
	segs    []*segment
	pending atomic.Int32 // segments without a reply yet
	done    chan struct{}
	// queued is when the batcher got it; deadline when it must be answered.
	queued, deadline time.Time
	// lead is a batch handed to this call's caller to flush (see batcher).
	lead []*call

	// Storage for the common case, a decision on one slot over a few policies, so
	// that it costs one allocation.
	segBuf  [1]*segment
	seg0    segment
	itemBuf [2]item
	keyBuf  [2]string
	resBuf  [2]result
}

// segment is the part of a decision whose keys share a slot: one entry of decide.lua's
// segment list, decided all-or-nothing.
type segment struct {
	call  *call
	slot  int
	now   int64 // ns on the Redis clock
	items []item
	keys  []string // distinct keys; items index them

	replied  bool // results hold decide.lua's reply
	admitted bool
	results  []result
	err      error
}

// item is one request of a segment.
type item struct {
	req    int // index in the decision's requests
	info   *policyInfo
	key    int // index in the segment's keys
	cost   int64
	want   int64  // cost, or more in lease mode
	prefix string // concurrency: the members' prefix
}

// result is one request's reply from decide.lua.
type result struct {
	ok      bool
	granted int64
	state   limiter.State // the state read (all but sliding_log)
	log     *logResult    // sliding_log
}

// logResult is the rest of a sliding_log reply: live units after the step and in the
// stored state; the oldest live instant after the step and in the stored state, the
// instant whose leaving admits the request, and the instant its units were logged at
// ("" for none).
type logResult struct {
	live, rlive            int64
	at0, atj, rat0, logged string
}

// callPool recycles calls: with its inline storage a call is most of the memory a
// batched decision allocates.
var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// free returns c to callPool. Decide calls it last: by then every reply was received
// (done is drained), and what outlives the decision (held units, refunds, pools) was
// copied out of c.
func (c *call) free() {
	done := c.done
	*c = call{done: done}
	callPool.Put(c)
}

// newCall splits reqs into segments. Requests served from a lease (lp) are left out.
func (s *Store) newCall(t int64, reqs []limiter.Request, infos []*policyInfo, lp *leasePlan) *call {
	c := callPool.Get().(*call)
	c.segs = c.segBuf[:0]
	for i := range reqs {
		if lp != nil && lp.taken[i] {
			continue
		}
		r := &reqs[i]
		slot := 0
		if s.cluster {
			slot = slotOf(&r.Key)
		}
		var seg *segment
		for _, g := range c.segs {
			if g.slot == slot {
				seg = g
				break
			}
		}
		if seg == nil {
			if len(c.segs) == 0 {
				seg = &c.seg0
				seg.items, seg.keys, seg.results = c.itemBuf[:0], c.keyBuf[:0], c.resBuf[:0]
			} else {
				seg = new(segment)
			}
			seg.call, seg.slot, seg.now = c, slot, t
			c.segs = append(c.segs, seg)
		}
		pi := infos[i]
		key := pi.redisKey(&r.Key)
		ki := -1
		for j, k := range seg.keys {
			if k == key {
				ki = j
				break
			}
		}
		if ki < 0 {
			ki = len(seg.keys)
			seg.keys = append(seg.keys, key)
		}
		it := item{req: i, info: pi, key: ki, cost: r.Cost, want: r.Cost}
		if lp != nil {
			it.want = lp.want[i]
		}
		if pi.code == 'c' && r.Cost > 0 {
			it.prefix = s.edgeID + ":" + strconv.FormatUint(s.seq.Add(1), 36)
		}
		seg.items = append(seg.items, it)
	}
	c.pending.Store(int32(len(c.segs)))
	return c
}

// err returns the call's error: the round trip's, or the first segment's.
func (c *call) err(err error) error {
	if err == nil {
		for _, g := range c.segs {
			if g.err != nil {
				err = g.err
				break
			}
		}
	}
	if err == nil || errors.Is(err, ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// exec decides segs: one script call per slot, all in one pipeline (on a cluster,
// go-redis sends each node its part concurrently). A script missing from a node's
// cache (NOSCRIPT: Redis restarted or its cache was flushed) did not run, so it is
// loaded and the affected calls are sent again. Nothing else is retried: a call that
// failed may have run, and running it again could charge twice.
func (s *Store) exec(ctx context.Context, segs []*segment) error {
	groups := groupBySlot(segs)
	cmds := make([]*redis.Cmd, len(groups))
	send := func(which []int) error {
		if len(which) == 1 {
			g := groups[which[0]]
			keys, argv := buildDecide(g)
			cmds[which[0]] = s.rdb.EvalSha(ctx, decideScript.Hash(), keys, argv)
			return nil
		}
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range which {
				keys, argv := buildDecide(groups[i])
				cmds[i] = p.EvalSha(ctx, decideScript.Hash(), keys, argv)
			}
			return nil
		})
		return err
	}
	all := make([]int, len(groups))
	for i := range all {
		all[i] = i
	}
	err := send(all)
	var missing []int
	for i, cmd := range cmds {
		if cmd != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		if lerr := decideScript.Load(ctx, s.rdb).Err(); lerr != nil {
			return lerr
		}
		err = send(missing)
	}
	var first error
	for i, cmd := range cmds {
		cerr := cmd.Err()
		if cerr == nil {
			cerr = parseReply(cmd.Val(), groups[i])
		}
		if cerr != nil {
			for _, g := range groups[i] {
				g.err = cerr
			}
			first = cmpOr(first, cerr)
		}
	}
	if err != nil && first == nil {
		first = err
	}
	return first
}

// groupBySlot groups segments of the same slot, keeping their order.
func groupBySlot(segs []*segment) [][]*segment {
	var groups [][]*segment
next:
	for _, g := range segs {
		for i, gr := range groups {
			if gr[0].slot == g.slot {
				groups[i] = append(gr, g)
				continue next
			}
		}
		groups = append(groups, []*segment{g})
	}
	return groups
}

// buildDecide builds decide.lua's keys and arguments for segments of one slot (see
// lua/decide.lua for the layout).
func buildDecide(segs []*segment) ([]string, []string) {
	var pols []*policyInfo
	nkeys, nitems := 0, 0
	for _, g := range segs {
		nkeys += len(g.keys)
		nitems += len(g.items)
		for _, it := range g.items {
			if polIndex(pols, it.info) < 0 {
				pols = append(pols, it.info)
			}
		}
	}
	pb := policyTable(pols)
	q := blob{b: make([]byte, 0, 8*(1+5*len(segs)+11*nitems))}
	argv := make([]string, 2, 2+len(segs))
	keys := make([]string, 0, nkeys)
	q.int(int64(len(segs)))
	for _, g := range segs {
		base := len(keys)
		keys = append(keys, g.keys...)
		q.int(int64(len(g.items)))
		q.instant(g.now)
		q.int(floorDiv(g.now, int64(time.Millisecond)))
		nowIdx := 0
		for _, it := range g.items {
			if it.info.code == 'g' {
				argv = append(argv, digits20(g.now))
				nowIdx = len(argv)
				break
			}
		}
		q.int(int64(nowIdx))
		for _, it := range g.items {
			q.int(int64(polIndex(pols, it.info) + 1))
			q.int(int64(base + it.key + 1))
			q.int(min(it.cost, maxExact))
			q.int(min(it.want, maxExact))
			if s := it.info.times(&q, g.now, it.prefix); s != "" {
				argv = append(argv, s)
				q.int(int64(len(argv)))
			} else {
				q.int(0)
			}
		}
	}
	argv[0], argv[1] = string(pb), string(q.b)
	return keys, argv
}

// maxExact bounds the numbers sent to Lua, whose doubles are exact below 2^53. A
// larger cost exceeds every quota and is denied alike.
const maxExact = 1 << 53

// policyTable packs the policies for the scripts (readPolicies in lua/common.lua).
func policyTable(pols []*policyInfo) []byte {
	n := 8
	for _, pi := range pols {
		n += len(pi.blob)
	}
	q := blob{b: make([]byte, 0, n)}
	q.int(int64(len(pols)))
	for _, pi := range pols {
		q.b = append(q.b, pi.blob...)
	}
	return q.b
}

func polIndex(pols []*policyInfo, pi *policyInfo) int {
	for i, p := range pols {
		if p == pi {
			return i
		}
	}
	return -1
}

// times appends a request's six time fields a1…a6 (see lua/<algorithm>.lua), what
// the script needs of instant now, computed here in exact 64-bit integers, and
// returns its string field, if any.
func (pi *policyInfo) times(q *blob, now int64, prefix string) string {
	w := pi.window
	switch pi.code {
	case 'b', 'l':
		q.instant(floorDiv(now, pi.params.Tick))
		q.zeros(4)
	case 'f':
		ws := floorDiv(now, w) * w
		q.instant(ws)
		q.int(ceilMillis(ws + w - now))
		q.zeros(3)
	case 's':
		ws := floorDiv(now, w) * w
		q.instant(ws)
		q.instant(ws - w)
		q.int(pi.params.WindowTicks - (now-ws)/pi.params.Tick)
		q.int(ceilMillis(ws + 2*w - now))
	case 'g':
		q.zeros(6)
		return digits20(max(now-w, 0))
	default: // 'c'
		q.zeros(6)
		return prefix
	}
	return ""
}

// blob packs numbers as big-endian doubles, which Lua's struct.unpack reads without
// parsing text. Every number is an integer below 2^53, so exact.
type blob struct{ b []byte }

func (q *blob) int(v int64) { q.b = binary.BigEndian.AppendUint64(q.b, math.Float64bits(float64(v))) }

// instant packs an instant as hi, lo: t = hi×2^32 + lo (see lua/common.lua).
func (q *blob) instant(t int64) {
	q.int(t >> 32)
	q.int(t & 0xffffffff)
}

func (q *blob) zeros(n int) {
	for range n {
		q.b = append(q.b, 0, 0, 0, 0, 0, 0, 0, 0) // +0.0
	}
}

// digits20 writes a non-negative instant as 20 decimal digits (sliding_log's entries).
func digits20(v int64) string {
	var d [20]byte
	for i := len(d) - 1; i >= 0; i-- {
		d[i] = byte('0' + v%10)
		v /= 10
	}
	return string(d[:])
}

// parseReply fills the segments' results from decide.lua's reply, one binary string
// (see lua/decide.lua).
func parseReply(v any, segs []*segment) error {
	reply, ok := v.(string)
	if !ok {
		return fmt.Errorf("redisstore: decide.lua replied %T", v)
	}
	r := replyReader{s: reply}
	for _, g := range segs {
		g.admitted = r.byte() == 1
		if cap(g.results) >= len(g.items) {
			g.results = g.results[:len(g.items)]
		} else {
			g.results = make([]result, len(g.items))
		}
		for j := range g.items {
			res := &g.results[j]
			res.ok = r.byte() == 1
			res.granted = r.num()
			switch g.items[j].info.code {
			case 'g':
				l := &logResult{}
				l.live, l.rlive = r.num(), r.num()
				l.at0, l.atj, l.rat0, l.logged = r.str(), r.str(), r.str(), r.str()
				res.log = l
			case 'c':
				res.state.N = r.num()
			default:
				st, ok := unpackState(r.str())
				if !ok {
					r.bad = true
				}
				res.state = st
			}
		}
		g.replied = true
	}
	if r.bad || r.i != len(r.s) {
		return errors.New("redisstore: malformed decide.lua reply")
	}
	return nil
}

// replyReader reads decide.lua's binary reply.
type replyReader struct {
	s   string
	i   int
	bad bool
}

func (r *replyReader) byte() byte {
	if r.i >= len(r.s) {
		r.bad = true
		return 0
	}
	r.i++
	return r.s[r.i-1]
}

func (r *replyReader) num() int64 {
	if r.i+8 > len(r.s) {
		r.bad = true
		return 0
	}
	v := binary.BigEndian.Uint64([]byte(r.s[r.i : r.i+8]))
	r.i += 8
	return int64(math.Float64frombits(v))
}

func (r *replyReader) str() string {
	n := int(r.byte())
	if r.i+n > len(r.s) {
		r.bad = true
		return ""
	}
	r.i += n
	return r.s[r.i-n : r.i]
}

// unpackState reads a state as stored by lua/common.lua: t (hi, lo), n, p as four
// big-endian doubles; "" is a key never seen.
func unpackState(raw string) (limiter.State, bool) {
	if raw == "" {
		return limiter.State{}, true
	}
	if len(raw) != 32 {
		return limiter.State{}, false
	}
	f := func(i int) int64 {
		return int64(math.Float64frombits(binary.BigEndian.Uint64([]byte(raw[8*i : 8*i+8]))))
	}
	return limiter.State{T: f(0)<<32 + f(1), N: f(2), P: f(3)}, true
}

// derive fills dec (one Decision per request of the call, in order) from the replies,
// replaying the limiter's exact integer step functions on the states the script read,
// so every field is what limiter.Local would report. It returns the call's verdict.
func (s *Store) derive(c *call, reqs []limiter.Request, infos []*policyInfo, dec []limiter.Decision) bool {
	allowed := true
	for _, g := range c.segs {
		allowed = allowed && g.admitted
	}
	var chainBuf [8]limiter.State
	for _, g := range c.segs {
		chain := chainBuf[:0]
		if len(g.items) > len(chainBuf) {
			chain = make([]limiter.State, 0, len(g.items))
		}
		for j := range g.items {
			it, r := &g.items[j], &g.results[j]
			p := it.info.p
			d := &dec[it.req]
			if it.info.code == 'g' {
				logDecision(d, p, g.now, it.cost, r.ok, r.log.live, r.log.at0, r.log.atj)
				chain = append(chain, limiter.State{})
				continue
			}
			base, found := limiter.State{}, false
			for k := range j {
				if g.items[k].key == it.key {
					base, found = chain[k], true
				}
			}
			if !found {
				base = r.state
			}
			cost := it.cost
			if it.want > it.cost && r.granted == it.want {
				cost = it.want
			}
			p.Step(&base, g.now, cost, d)
			chain = append(chain, base)
			if d.Allowed != r.ok {
				s.log.Error("decide.lua and the limiter's step disagree; please report",
					"policy", p.Name, "algorithm", p.Algorithm, "script", r.ok, "step", d.Allowed)
				d.Allowed = r.ok
			}
		}
		if allowed {
			continue
		}
		// Nothing of the call is kept: requests that passed report the stored state.
		for j := range g.items {
			it, r := &g.items[j], &g.results[j]
			d := &dec[it.req]
			if !d.Allowed || it.cost == 0 {
				continue
			}
			if it.info.code == 'g' {
				logDecision(d, it.info.p, g.now, 0, true, r.log.rlive, r.log.rat0, "")
				continue
			}
			st := r.state
			it.info.p.Step(&st, g.now, 0, d)
		}
	}
	return allowed
}

// logDecision fills a sliding_log decision as limiter's log step does, from the live
// count after the step, the oldest live instant and the instant whose leaving would
// admit the request.
func logDecision(d *limiter.Decision, p *limiter.Policy, now, cost int64, ok bool, n int64, at0, atj string) {
	w := int64(p.Window)
	*d = limiter.Decision{Allowed: ok, Limit: p.Quota, Policy: p, Remaining: p.Quota - n}
	if !ok {
		if cost > p.Quota {
			d.RetryAfter = limiter.Never
		} else if t, err := strconv.ParseInt(atj, 10, 64); err == nil {
			d.RetryAfter = until(t+w, now)
		}
	}
	if t, err := strconv.ParseInt(at0, 10, 64); err == nil && n > 0 {
		d.ResetAfter = until(t+w, now)
	}
}

func until(t, now int64) time.Duration {
	if t <= now {
		return 0
	}
	return time.Duration(t - now)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// ceilMillis returns d nanoseconds in whole milliseconds, rounded up: the expiry the
// scripts give a window's key (SET … PX takes milliseconds and must not end the key
// before its window does); 0 for d ≤ 0. It is not limiter's ceilDiv, a quotient of
// units.
func ceilMillis(d int64) int64 {
	if d <= 0 {
		return 0
	}
	return (d + int64(time.Millisecond) - 1) / int64(time.Millisecond)
}
