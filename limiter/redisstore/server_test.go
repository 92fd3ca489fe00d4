package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Tests start their own redis-server processes on free loopback ports and never touch
// the machine's 127.0.0.1:6379. Without redis-server the tests skip, except under
// CI=true, where they fail.

func redisServerPath(tb testing.TB) string {
	tb.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatal("redis-server not found (CI=true: the Redis tests must run)")
		}
		tb.Skip("redis-server not found")
	}
	return p
}

// server is one redis-server process.
type server struct {
	tb   testing.TB
	bin  string
	port int
	dir  string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// usedPorts holds the ports freePort returned (and their bus ports), so no two
// servers of this test binary get the same one.
var usedPorts struct {
	sync.Mutex
	m map[int]bool
}

// freePort returns a loopback port that is free, and whose cluster bus port (+10000)
// is free too. Both lie below Linux's ephemeral range (32768–60999), where no outgoing
// connection can take them between this check and the server's bind, or while a test
// has its server stopped.
func freePort(tb testing.TB) int {
	usedPorts.Lock()
	defer usedPorts.Unlock()
	if usedPorts.m == nil {
		usedPorts.m = make(map[int]bool)
	}
	for range 100 {
		p := 10000 + rand.IntN(12768) // bus port 20000–32767
		if usedPorts.m[p] || usedPorts.m[p+10000] {
			continue
		}
		ok := true
		for _, q := range []int{p, p + 10000} {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			usedPorts.m[p], usedPorts.m[p+10000] = true, true
			return p
		}
	}
	tb.Fatal("no free port")
	return 0
}

// startRedis starts a redis-server on a free port; it is killed when the test ends.
func startRedis(tb testing.TB, extra ...string) *server {
	tb.Helper()
	s := &server{tb: tb, bin: redisServerPath(tb), port: freePort(tb), dir: tb.TempDir()}
	s.args = append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--protected-mode", "no"}, extra...)
	s.start()
	tb.Cleanup(s.kill)
	return s
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *server) start() {
	s.tb.Helper()
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("starting redis-server: %v", err)
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("redis-server on %s did not answer: %v", s.addr(), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill kills the server with SIGKILL (continuing it first if it is stopped).
func (s *server) kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGCONT)
	cmd.Process.Kill()
	cmd.Wait()
}

func (s *server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.cmd.Process.Signal(sig)
	}
}

// client returns a plain client for the test's own reads.
func (s *server) client(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr()})
	tb.Cleanup(func() { c.Close() })
	return c
}

// cluster is a 3-master Redis Cluster.
type cluster struct {
	nodes []*server
}

func startCluster(tb testing.TB) *cluster {
	tb.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		redisServerPath(tb) // same skip-or-fail rule
		if os.Getenv("CI") == "true" {
			tb.Fatal("redis-cli not found")
		}
		tb.Skip("redis-cli not found")
	}
	c := &cluster{}
	var addrs []string
	for range 3 {
		dir := tb.TempDir()
		n := startRedis(tb, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "2000")
		c.nodes = append(c.nodes, n)
		addrs = append(addrs, n.addr())
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range c.nodes {
		cl := n.client(tb)
		for {
			info, _ := cl.ClusterInfo(context.Background()).Result()
			if strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("cluster not ok on %s:\n%s", n.addr(), info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

func (c *cluster) addrs() []string {
	var a []string
	for _, n := range c.nodes {
		a = append(a, n.addr())
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

func urlOf(s *server) string { return fmt.Sprintf("redis://%s/0", s.addr()) }
