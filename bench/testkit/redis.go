package testkit

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// redisReady bounds how long a starting redis-server may take to answer PING.
const redisReady = 15 * time.Second

// Redis is a redis-server process a test started on a free loopback port, in a
// temporary directory, without persistence. It is killed when the test ends. Its
// methods are safe for concurrent use.
type Redis struct {
	// Port is the server's port on 127.0.0.1 (its TLS port, for StartRedisTLS).
	Port int
	// Dir is the server's working directory, removed when the test ends.
	Dir string

	t    T
	bin  string
	args []string
	tls  bool

	mu  sync.Mutex
	cmd *exec.Cmd
}

// StartRedis starts redis-server with extra arguments after its own (port, bind
// 127.0.0.1, no persistence, protected mode off) and returns once it answers PING.
// Without redis-server the test is skipped, or failed under CI=true.
func StartRedis(t T, extra ...string) *Redis {
	t.Helper()
	r := newRedis(t)
	r.args = append([]string{"--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.Dir, "--protected-mode", "no"}, extra...)
	r.Start()
	return r
}

// StartRedisTLS starts a redis-server that speaks only TLS, with the certificate and
// key in PEM files certFile and keyFile and no client certificates asked for, and
// returns once it answers PING over TLS.
func StartRedisTLS(t T, certFile, keyFile string) *Redis {
	t.Helper()
	r := newRedis(t)
	r.tls = true
	r.args = []string{"--port", "0", "--tls-port", strconv.Itoa(r.Port), "--bind", "127.0.0.1",
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-auth-clients", "no",
		"--save", "", "--appendonly", "no", "--dir", r.Dir, "--protected-mode", "no"}
	r.Start()
	return r
}

// StartSentinel starts a redis-server in Sentinel mode with config (its "sentinel
// monitor" lines and the like; the port, bind address and directory are prepended) and
// returns once it answers PING.
func StartSentinel(t T, config string) *Redis {
	t.Helper()
	r := newRedis(t)
	conf := filepath.Join(r.Dir, "sentinel.conf")
	head := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n", r.Port, r.Dir)
	if err := os.WriteFile(conf, []byte(head+config), 0o600); err != nil {
		t.Fatalf("testkit: sentinel config: %v", err)
	}
	r.args = []string{conf, "--sentinel"}
	r.Start()
	return r
}

func newRedis(t T) *Redis {
	t.Helper()
	r := &Redis{t: t, bin: Need(t, "redis-server"), Port: Port(t), Dir: t.TempDir()}
	t.Cleanup(r.Kill)
	return r
}

// Addr returns the server's address, 127.0.0.1:Port.
func (r *Redis) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port)) }

// URL returns the server's URL for database 0: redis://127.0.0.1:Port/0, or rediss://
// for StartRedisTLS.
func (r *Redis) URL() string {
	if r.tls {
		return "rediss://" + r.Addr() + "/0"
	}
	return "redis://" + r.Addr() + "/0"
}

// Start starts the server (again, after Kill) on its port with its arguments and
// returns once it answers PING; it fails the test if it does not within 15 s.
func (r *Redis) Start() {
	r.t.Helper()
	cmd := exec.Command(r.bin, r.args...)
	cmd.Dir = r.Dir
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("testkit: starting redis-server: %v", err)
	}
	r.mu.Lock()
	r.cmd = cmd
	r.mu.Unlock()
	deadline := time.Now().Add(redisReady)
	for {
		err := r.ping()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("testkit: redis-server on %s did not answer PING within %v: %v", r.Addr(), redisReady, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ping sends PING on a new connection and checks the reply.
func (r *Redis) ping() error {
	d := &net.Dialer{Timeout: 200 * time.Millisecond}
	var c net.Conn
	var err error
	if r.tls {
		// The test checks the certificate its own way; this only asks whether the
		// server is up.
		c, err = tls.DialWithDialer(d, "tcp", r.Addr(), &tls.Config{InsecureSkipVerify: true})
	} else {
		c, err = d.Dial("tcp", r.Addr())
	}
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// Kill kills the server with SIGKILL (continuing it first if it is stopped) and waits
// for it to exit. Killing a server that is not running does nothing.
func (r *Redis) Kill() {
	r.mu.Lock()
	cmd := r.cmd
	r.cmd = nil
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGCONT)
	cmd.Process.Kill()
	cmd.Wait()
}

// Signal sends sig to the running server: SIGSTOP makes it hang without closing a
// connection, SIGCONT lets it go on.
func (r *Redis) Signal(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		r.cmd.Process.Signal(sig)
	}
}
