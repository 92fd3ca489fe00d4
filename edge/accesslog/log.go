package accesslog

import (
	"io"
	"math/rand/v2"
	"os"
)

// Log is an access log open on stdout or on a file: a Writer, and which requests it
// samples. Make it with Open and stop it with Close.
type Log struct {
	*Writer
	file   *os.File // nil for stdout, which Close leaves open
	sample float64
}

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

// Close writes what is buffered and closes the file. A nil Log does nothing.
func (l *Log) Close() {
	if l == nil {
		return
	}
	l.Writer.Close()
	if l.file != nil {
		l.file.Close()
	}
}
