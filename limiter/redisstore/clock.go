package redisstore

import (
	"context"
	"math"
	"time"
)

// measureClock sets the offset from the local clock to Redis's TIME from the sample
// with the lowest round trip: Redis read its clock somewhere within the round trip,
// so the shorter it is, the less that uncertainty (half the round trip at most).
func (s *Store) measureClock(ctx context.Context, samples int) error {
	if s.cfg.ClockSync < 0 {
		return nil
	}
	best, offset := time.Duration(math.MaxInt64), int64(0)
	for range samples {
		t0 := s.now()
		tm, err := s.rdb.Time(ctx).Result()
		t1 := s.now()
		if err != nil {
			return err
		}
		if rtt := t1.Sub(t0); rtt < best {
			best = rtt
			offset = tm.UnixNano() - t0.Add(rtt/2).UnixNano()
		}
	}
	s.offset.Store(offset)
	return nil
}

// clockLoop measures the offset every ClockSync.
func (s *Store) clockLoop() {
	defer s.wg.Done()
	if s.cfg.ClockSync < 0 {
		return
	}
	t := time.NewTicker(s.cfg.ClockSync)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if !s.br.allow() {
			continue // the probe measures when Redis is back
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := s.measureClock(ctx, 3); err != nil {
			s.log.Debug("clock offset not measured", "err", err)
		}
		cancel()
	}
}

// redisNow returns the current instant on the Redis clock, in ns.
func (s *Store) redisNow() int64 {
	return s.now().UnixNano() + s.offset.Load()
}
