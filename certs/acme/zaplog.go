package acme

import (
	"context"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// certmagic logs through zap, at every attempt of every retry. The manager states
// what an operator needs itself (events.go: once per outage, not once per attempt),
// so certmagic's own lines go to the slog logger at Debug, whatever their zap level
// (kept as the attribute "zap_level").
func zapToSlog(l *slog.Logger) *zap.Logger {
	return zap.New(slogCore{h: l.Handler()})
}

// slogCore is a zapcore.Core that writes to a slog.Handler at Debug.
type slogCore struct {
	h     slog.Handler
	attrs []slog.Attr
}

func (c slogCore) Enabled(zapcore.Level) bool {
	return c.h.Enabled(context.Background(), slog.LevelDebug)
}

func (c slogCore) With(fields []zapcore.Field) zapcore.Core {
	return slogCore{h: c.h, attrs: append(append([]slog.Attr(nil), c.attrs...), attrsOf(fields)...)}
}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	r := slog.NewRecord(e.Time, slog.LevelDebug, e.Message, 0)
	r.AddAttrs(c.attrs...)
	r.AddAttrs(attrsOf(fields)...)
	r.AddAttrs(slog.String("zap_level", e.Level.String()), slog.String("logger", e.LoggerName))
	return c.h.Handle(context.Background(), r)
}

func (slogCore) Sync() error { return nil }

func attrsOf(fields []zapcore.Field) []slog.Attr {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields))
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	return attrs
}
