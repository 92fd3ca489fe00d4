package redisstore

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/h3edge/h3edge/bench/testkit"
)

// Tests start their own redis-server processes on free loopback ports
// (testkit.StartRedis) and never touch the machine's 127.0.0.1:6379. Without
// redis-server the tests skip, except under CI=true, where they fail.

// clientOf returns a plain client of s for the test's own reads.
func clientOf(tb testing.TB, s *testkit.Redis) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	tb.Cleanup(func() { c.Close() })
	return c
}

// cluster is a 3-master Redis Cluster.
type cluster struct {
	nodes []*testkit.Redis
}

func startCluster(tb testing.TB) *cluster {
	tb.Helper()
	cli := testkit.Need(tb, "redis-cli")
	c := &cluster{}
	var addrs []string
	for range 3 {
		dir := tb.TempDir()
		n := testkit.StartRedis(tb, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "2000", "--cluster-port", strconv.Itoa(testkit.Port(tb)))
		c.nodes = append(c.nodes, n)
		addrs = append(addrs, n.Addr())
	}
	out, err := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, n := range c.nodes {
		cl := clientOf(tb, n)
		testkit.WaitFor(tb, 10*time.Second, "cluster_state:ok on "+n.Addr(), func() bool {
			info, _ := cl.ClusterInfo(context.Background()).Result()
			return strings.Contains(info, "cluster_state:ok")
		})
	}
	return c
}

func (c *cluster) addrs() []string {
	var a []string
	for _, n := range c.nodes {
		a = append(a, n.Addr())
	}
	return a
}

// counter is a go-redis hook counting commands and round trips.
type counter struct {
	cmds, pipelines, scripts atomic.Int64
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.cmds.Add(1)
		if isScript(cmd) {
			c.scripts.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.pipelines.Add(1)
		c.cmds.Add(int64(len(cmds)))
		for _, cmd := range cmds {
			if isScript(cmd) {
				c.scripts.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

func isScript(cmd redis.Cmder) bool {
	n := cmd.Name()
	return n == "evalsha" || n == "eval"
}

// testClient returns a client for a Store's Config.Client with a counting hook.
func testClient(tb testing.TB, addr string, cnt *counter) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true,
		DialTimeout: 250 * time.Millisecond, PoolTimeout: 50 * time.Millisecond, DialerRetries: 1,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, DisableIdentity: true, PoolSize: 128})
	if cnt != nil {
		c.AddHook(cnt)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// newStore makes a Store and closes it when the test ends.
func newStore(tb testing.TB, cfg Config) *Store {
	tb.Helper()
	s, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}
