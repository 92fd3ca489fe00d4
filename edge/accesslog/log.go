package accesslog

import (
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
)

// Log is an access log open on stdout or on a file: a Writer, and which requests it
// samples. Make it with Open and stop it with Close, or with Retire once the requests
// that hold it (Hold) are logged.
type Log struct {
	*Writer
	file   *os.File // nil for stdout, which Close leaves open
	sample float64
	// holds counts the requests holding the log, plus retired once Retire was called.
	holds     atomic.Int64
	closeOnce sync.Once
}

const retired = 1 << 62

// Open starts a log writing to path: "stdout", or a file opened for appending and
// created with mode 0640 if it does not exist. It logs the fraction sample of
// requests (at least 1: every one).
func Open(path string, sample float64, c Config) (*Log, error) {
	l := &Log{sample: sample}
	var out io.Writer = os.Stdout
	if path != "stdout" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return nil, err
		}
		l.file, out = f, f
	}
	l.Writer = NewWriter(out, c)
	return l, nil
}

// Sampled reports whether the next request is to be logged, drawn at random.
func (l *Log) Sampled() bool { return l.sample >= 1 || rand.Float64() < l.sample }

// Close writes what is buffered and closes the file; later lines are dropped. A nil
// Log does nothing.
func (l *Log) Close() {
	if l == nil {
		return
	}
	l.closeOnce.Do(func() {
		l.Writer.Close()
		if l.file != nil {
			l.file.Close()
		}
	})
}

// Hold keeps the log open for one request's line until Release, and reports false,
// holding nothing, if the log is retired: the request is to take the one in force.
func (l *Log) Hold() bool {
	if l.holds.Add(1)&retired != 0 {
		l.Release()
		return false
	}
	return true
}

// Release ends a Hold; the last one of a retired log closes it.
func (l *Log) Release() {
	if l.holds.Add(-1) == retired {
		l.Close()
	}
}

// Retire closes the log once no request holds it: a reload's replacement, so that the
// requests in flight across it still get their lines. A nil Log does nothing.
func (l *Log) Retire() {
	if l != nil && l.holds.Add(retired) == retired {
		l.Close()
	}
}
