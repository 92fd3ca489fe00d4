package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/limiter"
)

// TestSentinelFailover: a store on a Sentinel-managed master keeps deciding after the
// master is SIGKILLed and Sentinel promotes its replica, with the state the replica
// had copied.
func TestSentinelFailover(t *testing.T) {
	master := testkit.StartRedis(t, "--repl-diskless-sync-delay", "0")
	replica := testkit.StartRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	rc := clientOf(t, replica)
	testkit.WaitFor(t, 10*time.Second, "the replica to sync", func() bool {
		info, _ := rc.Info(context.Background(), "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})

	sentinel := testkit.StartSentinel(t, fmt.Sprintf(`sentinel monitor h3edge 127.0.0.1 %d 1
sentinel down-after-milliseconds h3edge 300
sentinel failover-timeout h3edge 3000
`, master.Port))
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr()})
	defer sc.Close()
	testkit.WaitFor(t, 15*time.Second, "Sentinel to see the replica", func() bool {
		rs, err := sc.Replicas(context.Background(), "h3edge").Result()
		return err == nil && len(rs) == 1
	})

	st := newStore(t, Config{Sentinel: &Sentinel{Master: "h3edge", Addrs: []string{sentinel.Addr()}},
		Timeout: 500 * time.Millisecond, Heartbeat: time.Hour})
	pol := mustPolicy(t, limiter.Policy{Name: "sentinel", Quota: 10, Window: time.Hour})
	k := keyOf("sentinel-client")
	decide := func() (limiter.Decision, error) {
		ds, _, err := st.Decide(context.Background(), time.Now(), []limiter.Request{{Policy: pol, Key: k, Cost: 1}}, nil)
		if err != nil {
			return limiter.Decision{}, err
		}
		return ds[0], nil
	}
	for i := range 4 {
		d, err := decide()
		if err != nil || !d.Allowed || d.Remaining != int64(9-i) {
			t.Fatalf("decision %d on the master: %+v, %v", i+1, d, err)
		}
	}
	testkit.WaitFor(t, 5*time.Second, "the replica to copy the bucket", func() bool {
		n, _ := rc.DBSize(context.Background()).Result()
		return n > 0
	})

	master.Kill()
	killed := time.Now()
	var d limiter.Decision
	var err error
	testkit.WaitFor(t, 20*time.Second, "decisions on the promoted replica", func() bool {
		d, err = decide()
		return err == nil
	})
	t.Logf("deciding again %v after the master's SIGKILL", time.Since(killed).Round(time.Millisecond))
	if role, _ := rc.Do(context.Background(), "ROLE").Slice(); len(role) == 0 || role[0] != "master" {
		t.Errorf("the replica's role after the failover: %v, want master", role)
	}
	// The 4 charged before the failover were copied: the fifth leaves 5.
	if !d.Allowed || d.Remaining != 5 {
		t.Errorf("first decision after the failover: %+v, want allowed with 5 remaining", d)
	}
}
