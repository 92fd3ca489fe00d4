package redisstore

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/h3edge/h3edge/limiter"
)

// held is one acquisition of global concurrency units: members prefix:1…prefix:cost
// of the key's sorted set.
type held struct {
	info   *policyInfo
	slot   int
	prefix string
	cost   int64
}

// hold records the concurrency units an admitted call acquired, for renewal and
// release.
func (s *Store) hold(c *call) {
	for _, g := range c.segs {
		for j := range g.items {
			it := &g.items[j]
			if it.info.code != 'c' || g.results[j].granted == 0 {
				continue
			}
			key := g.keys[it.key]
			s.heldMu.Lock()
			s.held[key] = append(s.held[key], held{info: it.info, slot: g.slot, prefix: it.prefix, cost: it.cost})
			s.heldMu.Unlock()
		}
	}
}

// Release implements limiter.Store: it gives back the global concurrency units of the
// concurrency requests in reqs that this store holds (others are skipped), removing
// their leases from Redis. The units stop being renewed at once, so if Redis cannot be
// told, they still return within ConcurrencyTTL; the error then wraps ErrUnavailable.
func (s *Store) Release(ctx context.Context, reqs []limiter.Request) error {
	var items []refundItem
	for i := range reqs {
		r := &reqs[i]
		if r.Policy == nil || r.Policy.Algorithm != limiter.Concurrency || r.Cost <= 0 {
			continue
		}
		pi, ok := s.pol.get(r.Policy, s.cfg.Lease, s.cfg.ConcurrencyTTL)
		if !ok {
			continue
		}
		key := pi.redisKey(&r.Key)
		s.heldMu.Lock()
		hs := s.held[key]
		pick := -1
		for j, h := range hs {
			if pick < 0 || h.cost == r.Cost {
				pick = j
			}
			if h.cost == r.Cost {
				break
			}
		}
		var h held
		if pick >= 0 {
			h = hs[pick]
			hs[pick] = hs[len(hs)-1]
			hs = hs[:len(hs)-1]
			if len(hs) == 0 {
				delete(s.held, key)
			} else {
				s.held[key] = hs
			}
		}
		s.heldMu.Unlock()
		if pick >= 0 {
			items = append(items, refundItem{info: pi, key: key, slot: h.slot, units: h.cost, s: h.prefix})
		}
	}
	if len(items) == 0 {
		return nil
	}
	if s.closed.Load() {
		return ErrClosed
	}
	if !s.br.allow() {
		return ErrCircuitOpen
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(s.timeout, 50*time.Millisecond))
	defer cancel()
	err := s.refund(ctx, items)
	if err != nil {
		return (&call{}).err(err)
	}
	return nil
}

// Held returns how many global concurrency units this store holds.
func (s *Store) Held() int64 {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	var n int64
	for _, hs := range s.held {
		for _, h := range hs {
			n += h.cost
		}
	}
	return n
}

// renewLoop extends the held leases every third of ConcurrencyTTL, all keys of a slot
// in one script call, all slots in one pipeline.
func (s *Store) renewLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.ConcurrencyTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if !s.br.allow() {
			continue
		}
		type group struct {
			keys []string
			argv []string
		}
		exp := strconv.FormatInt(s.redisNow()/int64(time.Millisecond)+s.cfg.ConcurrencyTTL.Milliseconds(), 10)
		keyTTL := strconv.FormatInt(s.cfg.ConcurrencyTTL.Milliseconds()+1000, 10)
		groups := map[int]*group{}
		s.heldMu.Lock()
		for key, hs := range s.held {
			g := groups[hs[0].slot]
			if g == nil {
				g = &group{argv: []string{exp, keyTTL}}
				groups[hs[0].slot] = g
			}
			g.keys = append(g.keys, key)
			var n int64
			for _, h := range hs {
				n += h.cost
			}
			g.argv = append(g.argv, strconv.FormatInt(n, 10))
			for _, h := range hs {
				for i := range h.cost {
					g.argv = append(g.argv, h.prefix+":"+strconv.FormatInt(i+1, 10))
				}
			}
		}
		s.heldMu.Unlock()
		if len(groups) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		cmds, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, g := range groups {
				p.EvalSha(ctx, renewScript.Hash(), g.keys, g.argv)
			}
			return nil
		})
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			renewScript.Load(ctx, s.rdb)
		}
		gone := int64(0)
		for _, c := range cmds {
			if n, err := c.(*redis.Cmd).Int64(); err == nil {
				gone += n
			}
		}
		cancel()
		if gone > 0 {
			s.log.Warn("concurrency leases expired before renewal (redis unreachable too long?)", "units", gone)
		}
	}
}

// refundItem gives back units of one key (see refund.lua).
type refundItem struct {
	info  *policyInfo
	key   string
	slot  int
	units int64
	a     [4]int64 // the charge's instants, hi and lo (fixed_window, sliding_window)
	s     string   // the logged instant (sliding_log), the members' prefix (concurrency)
}

// refund sends refund.lua calls, one per slot, in one pipeline; a call that found its
// script missing did not run and is sent again after loading it.
func (s *Store) refund(ctx context.Context, items []refundItem) error {
	var slots []int
	for _, it := range items {
		found := false
		for _, sl := range slots {
			found = found || sl == it.slot
		}
		if !found {
			slots = append(slots, it.slot)
		}
	}
	build := func(slot int) ([]string, []string) {
		var pols []*policyInfo
		var keys []string
		n := 0
		for _, it := range items {
			if it.slot != slot {
				continue
			}
			n++
			if polIndex(pols, it.info) < 0 {
				pols = append(pols, it.info)
			}
		}
		pb := policyTable(pols)
		argv := []string{"", ""}
		q := blob{b: make([]byte, 0, 8*(1+8*n))}
		q.int(int64(n))
		for _, it := range items {
			if it.slot != slot {
				continue
			}
			ki := -1
			for j, k := range keys {
				if k == it.key {
					ki = j
				}
			}
			if ki < 0 {
				ki = len(keys)
				keys = append(keys, it.key)
			}
			q.int(int64(polIndex(pols, it.info) + 1))
			q.int(int64(ki + 1))
			q.int(min(it.units, maxExact))
			for _, a := range it.a {
				q.int(a)
			}
			if it.s != "" {
				argv = append(argv, it.s)
				q.int(int64(len(argv)))
			} else {
				q.int(0)
			}
		}
		argv[0], argv[1] = string(pb), string(q.b)
		return keys, argv
	}
	// Only calls that found the script missing are sent again: they did not run, while
	// running another twice would give its units back twice.
	todo := slots
	for range 2 {
		cmds := make([]*redis.Cmd, len(todo))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, sl := range todo {
				keys, argv := build(sl)
				cmds[i] = p.EvalSha(ctx, refundScript.Hash(), keys, argv)
			}
			return nil
		})
		var again []int
		var first error
		for i, c := range cmds {
			if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
				again = append(again, todo[i])
			} else if c.Err() != nil && first == nil {
				first = c.Err()
			}
		}
		if len(again) == 0 {
			return cmpOr(first, err)
		}
		if lerr := refundScript.Load(ctx, s.rdb).Err(); lerr != nil {
			return lerr
		}
		todo = again
	}
	return errors.New("redisstore: refund.lua missing after loading it")
}

// refundAdmitted gives back what the admitted segments of a call charged when another
// segment denied or failed (Redis Cluster: the slots were decided separately),
// within the decision's budget.
func (s *Store) refundAdmitted(ctx context.Context, deadline time.Time, c *call) {
	var items []refundItem
	for _, g := range c.segs {
		if !g.replied || !g.admitted {
			continue
		}
		for j := range g.items {
			it, r := &g.items[j], &g.results[j]
			if r.granted == 0 {
				continue
			}
			items = append(items, chargeRefund(it.info, g.keys[it.key], g.slot, g.now, r.granted, it.prefix, r))
		}
	}
	if len(items) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	if err := s.refund(ctx, items); err != nil {
		s.log.Warn("refund of a denied decision's admitted slot failed; those units stay charged", "err", err)
	}
}

// chargeRefund describes how to undo units charged at instant now.
func chargeRefund(pi *policyInfo, key string, slot int, now, units int64, prefix string, r *result) refundItem {
	it := refundItem{info: pi, key: key, slot: slot, units: units}
	w := pi.window
	switch pi.code {
	case 'f':
		ws := floorDiv(now, w) * w
		it.a = [4]int64{ws >> 32, ws & 0xffffffff}
	case 's':
		ws := floorDiv(now, w) * w
		it.a = [4]int64{ws >> 32, ws & 0xffffffff, (ws + w) >> 32, (ws + w) & 0xffffffff}
	case 'g':
		it.s = r.log.logged
	case 'c':
		it.s = prefix
	}
	return it
}
