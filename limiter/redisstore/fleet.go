package redisstore

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"
)

// heartbeatLoop announces this edge every Heartbeat (see fleet.lua) and keeps the
// fleet's size from the reply.
func (s *Store) heartbeatLoop() {
	defer s.wg.Done()
	host, _ := os.Hostname()
	info := fmt.Sprintf("host=%s pid=%d", host, os.Getpid())
	life := strconv.FormatInt((3 * s.cfg.Heartbeat).Milliseconds(), 10)
	keys := []string{fleetKey, edgeKeyPre + s.edgeID}
	t := time.NewTicker(s.cfg.Heartbeat)
	defer t.Stop()
	for {
		if s.br.allow() {
			ctx, cancel := context.WithTimeout(context.Background(), max(s.cfg.Heartbeat/2, 10*s.timeout))
			now := strconv.FormatInt(s.redisNow()/int64(time.Millisecond), 10)
			n, err := fleetScript.Run(ctx, s.rdb, keys, s.edgeID, now, life, info).Int64()
			cancel()
			if err == nil {
				s.fleet.Store(n)
			} else {
				s.log.Debug("heartbeat failed", "err", err)
			}
		}
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}
