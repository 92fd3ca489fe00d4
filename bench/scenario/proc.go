package scenario

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Processes the scenarios start: h3edge, the bare server and redis-server run as
// separate processes so that CPU and memory are measured per process, from /proc.

// userHZ is the unit of utime and stime in /proc/PID/stat: USER_HZ, 100 on every Linux
// architecture Go supports (the kernel fixes it for the ABI, whatever CONFIG_HZ is).
const userHZ = 100

// ProcessCPU returns the CPU time (user + system, all threads) the process pid has used
// so far, from /proc/PID/stat. The resolution is 10 ms.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: process CPU: %w", err)
	}
	return parseProcStat(b)
}

// parseProcStat reads utime + stime (fields 14 and 15) from a /proc/PID/stat line. The
// command name (field 2) is in parentheses and may hold spaces and parentheses itself,
// so fields are counted after its last ')'.
func parseProcStat(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("bench: /proc stat: no command field")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, errors.New("bench: /proc stat: too few fields")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil || ut < 0 || st < 0 {
		return 0, errors.New("bench: /proc stat: bad utime or stime")
	}
	return time.Duration(ut+st) * time.Second / userHZ, nil
}

// ProcessMemory returns the resident set size of pid now and its peak (VmRSS and VmHWM
// of /proc/PID/status), in bytes.
func ProcessMemory(pid int) (rss, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("bench: process memory: %w", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("bench: process memory: %s: %q", name, v)
		}
		if name == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	return rss, peak, nil
}

// process is a server the scenario started. Its output is kept (the last 64 KiB) for
// error messages.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *tail
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, valid after done
}

// startProcess starts argv with env added to this process's environment, and waits
// until ready accepts a line of its output (stdout and stderr together) or timeout
// passes; it returns the line. If the process exits first, the error carries the end
// of its output.
func startProcess(ctx context.Context, name string, argv, env []string, ready func(string) bool, timeout time.Duration) (*process, string, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = childAttr()
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, "", err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, "", fmt.Errorf("bench: start %s: %w", name, err)
	}
	pw.Close()
	p := &process{name: name, cmd: cmd, out: &tail{max: 64 << 10}, done: make(chan struct{})}
	found := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.out.write(line + "\n")
			if ready != nil && ready(line) {
				ready = nil
				found <- line
			}
		}
		io.Copy(io.Discard, pr)
	}()
	go func() {
		p.err = cmd.Wait()
		// Keep the last lines for error messages, but do not wait for a grandchild
		// that still holds the pipe.
		select {
		case <-scanned:
		case <-time.After(time.Second):
		}
		pr.Close()
		close(p.done)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case line := <-found:
		return p, line, nil
	case <-p.done:
		return nil, "", fmt.Errorf("bench: %s exited before it was ready (%v):\n%s", name, p.err, p.out.String())
	case <-t.C:
		p.stop()
		return nil, "", fmt.Errorf("bench: %s not ready after %v:\n%s", name, timeout, p.out.String())
	case <-ctx.Done():
		p.stop()
		return nil, "", context.Cause(ctx)
	}
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// cpu returns the CPU time the process has used so far.
func (p *process) cpu() (time.Duration, error) { return ProcessCPU(p.pid()) }

// alive reports an error if the process has exited.
func (p *process) alive() error {
	select {
	case <-p.done:
		return fmt.Errorf("bench: %s exited (%v):\n%s", p.name, p.err, p.out.String())
	default:
		return nil
	}
}

// stop ends the process: SIGTERM, then SIGKILL after 5 s. Both go to its process group
// (on Linux it leads one), so that children of a wrapper end too.
func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	signalGroup(p.cmd.Process, syscall.SIGTERM)
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		signalGroup(p.cmd.Process, syscall.SIGKILL)
		<-p.done
	}
}

// tail keeps the last max bytes written to it. Safe for concurrent use.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) write(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, s...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// pinning tells whether the scenarios can pin processes to CPUs: taskset is installed
// and there are at least two CPUs (servers on CPU 0, the client on CPU 1).
func pinning() bool {
	if runtime.NumCPU() < 2 {
		return false
	}
	_, err := exec.LookPath("taskset")
	return err == nil
}

// pinSelf moves every thread of this process to cpu and returns a function restoring
// the previous affinity.
func pinSelf(cpu int) (restore func(), err error) {
	pid := strconv.Itoa(os.Getpid())
	out, err := exec.Command("taskset", "-p", pid).Output()
	if err != nil {
		return nil, fmt.Errorf("bench: taskset -p: %w", err)
	}
	// "pid 123's current affinity mask: 3"
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return nil, fmt.Errorf("bench: taskset -p: unexpected output %q", out)
	}
	mask := f[len(f)-1]
	if err := exec.Command("taskset", "-a", "-p", "-c", strconv.Itoa(cpu), pid).Run(); err != nil {
		return nil, fmt.Errorf("bench: taskset -a -p -c %d: %w", cpu, err)
	}
	return func() { _ = exec.Command("taskset", "-a", "-p", mask, pid).Run() }, nil
}

// ErrNoH3edge reports that no h3edge binary was given and none could be built.
var ErrNoH3edge = errors.New("bench: no h3edge binary (pass -h3edge PATH or set $H3EDGE, or run inside the h3edge module)")

// buildH3edge builds ./cmd/h3edge of the module the working directory is in (found
// with `go env GOMOD`) into dir and returns the binary's path.
func buildH3edge(ctx context.Context, dir string) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.CommandContext(ctx, goTool, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("%w: go env GOMOD: %v", ErrNoH3edge, err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("%w: not in a Go module", ErrNoH3edge)
	}
	mod, err := os.ReadFile(gomod)
	if err != nil || !bytes.Contains(mod, []byte("module github.com/h3edge/h3edge\n")) {
		return "", fmt.Errorf("%w: %s is not the h3edge module", ErrNoH3edge, gomod)
	}
	bin := filepath.Join(dir, "h3edge")
	build := exec.CommandContext(ctx, goTool, "build", "-o", bin, "./cmd/h3edge")
	build.Dir = filepath.Dir(gomod)
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("bench: go build ./cmd/h3edge: %v\n%s", err, out)
	}
	return bin, nil
}
