package redisstore

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// BanBus shares the penalty box's bans between edges: a ban published by one edge
// reaches every subscribed edge within a round trip (Redis PUBLISH on h3edge:bans),
// and the bans in force are kept in Redis (a sorted set and a hash that expire with
// the last ban) so an edge that starts, or reconnects, loads them. Ban ends travel on
// the Redis clock and are converted to each edge's own clock. Safe for concurrent use.
type BanBus struct {
	s *Store
}

// Bans returns the store's BanBus.
func (s *Store) Bans() *BanBus { return &BanBus{s: s} }

// Publish records a ban of prefix until the given instant (this edge's clock) and
// announces it to every subscriber, this edge's included. A ban never shortens a
// longer one in force for the same prefix: the longer one is announced again.
func (b *BanBus) Publish(ctx context.Context, prefix netip.Prefix, until time.Time, reason string) error {
	s := b.s
	if s.closed.Load() {
		return ErrClosed
	}
	off := s.offset.Load()
	untilMs := (until.UnixNano() + off) / int64(time.Millisecond)
	nowMs := s.redisNow() / int64(time.Millisecond)
	reason = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, reason)
	err := banScript.Run(ctx, s.rdb, []string{bansKey, reasonsKey},
		prefix.Masked().String(), untilMs, reason, nowMs, banChannel).Err()
	if err != nil {
		return fmt.Errorf("%w: publishing a ban: %w", ErrUnavailable, err)
	}
	return nil
}

// Subscribe calls fn with every ban in force now, then with every ban published until
// ctx is done or the store closes. It returns once the bans in force were delivered
// (or with the error that prevented it); later bans are delivered from a goroutine,
// one at a time. After a lost connection it subscribes again and delivers the bans in
// force once more, so fn must accept a ban it has seen.
func (b *BanBus) Subscribe(ctx context.Context, fn func(prefix netip.Prefix, until time.Time, reason string)) error {
	s := b.s
	ps := s.rdb.Subscribe(ctx, banChannel)
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		ps.Close()
		return fmt.Errorf("%w: subscribing to bans: %w", ErrUnavailable, err)
	}
	if err := b.load(ctx, fn); err != nil {
		ps.Close()
		return err
	}
	s.wg.Add(1)
	go b.listen(ctx, ps, fn)
	return nil
}

// listen delivers published bans until ctx is done or the store closes.
func (b *BanBus) listen(ctx context.Context, ps *redis.PubSub, fn func(netip.Prefix, time.Time, string)) {
	s := b.s
	defer s.wg.Done()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
		case <-s.stop:
		case <-done:
		}
		ps.Close()
	}()
	lost := false
	backoff := 50 * time.Millisecond
	for {
		msg, err := ps.Receive(context.Background())
		if ctx.Err() != nil || s.closed.Load() {
			return
		}
		if err != nil {
			if err == redis.ErrClosed {
				return
			}
			lost = true
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			case <-s.stop:
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Subscription:
			if lost { // subscribed again: catch up with what was missed
				lctx, cancel := context.WithTimeout(ctx, time.Second)
				if b.load(lctx, fn) == nil {
					lost = false
				}
				cancel()
			}
		case *redis.Message:
			if p, until, reason, ok := b.parse(m.Payload); ok {
				fn(p, until, reason)
			}
		}
	}
}

// parse reads an announcement: "prefix until-ms reason".
func (b *BanBus) parse(payload string) (netip.Prefix, time.Time, string, bool) {
	ps, rest, _ := strings.Cut(payload, " ")
	ms, reason, _ := strings.Cut(rest, " ")
	p, err := netip.ParsePrefix(ps)
	if err != nil {
		return netip.Prefix{}, time.Time{}, "", false
	}
	u, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return netip.Prefix{}, time.Time{}, "", false
	}
	return p, b.localTime(u), reason, true
}

// localTime converts a Redis-clock instant in ms to this edge's clock.
func (b *BanBus) localTime(ms int64) time.Time {
	return time.Unix(0, ms*int64(time.Millisecond)-b.s.offset.Load())
}

// load delivers the bans in force.
func (b *BanBus) load(ctx context.Context, fn func(netip.Prefix, time.Time, string)) error {
	s := b.s
	now := strconv.FormatInt(s.redisNow()/int64(time.Millisecond), 10)
	zs, err := s.rdb.ZRangeByScoreWithScores(ctx, bansKey, &redis.ZRangeBy{Min: "(" + now, Max: "+inf"}).Result()
	if err != nil {
		return fmt.Errorf("%w: loading bans: %w", ErrUnavailable, err)
	}
	if len(zs) == 0 {
		return nil
	}
	fields := make([]string, len(zs))
	for i, z := range zs {
		fields[i], _ = z.Member.(string)
	}
	reasons, err := s.rdb.HMGet(ctx, reasonsKey, fields...).Result()
	if err != nil {
		return fmt.Errorf("%w: loading bans: %w", ErrUnavailable, err)
	}
	for i, z := range zs {
		p, err := netip.ParsePrefix(fields[i])
		if err != nil {
			continue
		}
		reason, _ := reasons[i].(string)
		fn(p, b.localTime(int64(z.Score)), reason)
	}
	return nil
}
