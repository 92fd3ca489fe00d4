package main

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
)

// newLogHandler returns the handler of log_format ("text" or "json") writing to w.
func newLogHandler(format string, w io.Writer) slog.Handler {
	if format == "json" {
		return slog.NewJSONHandler(w, nil)
	}
	return slog.NewTextHandler(w, nil)
}

// swapHandler is a slog.Handler whose output handler can be replaced while logging, so
// a reload can switch log_format. The handlers it derives (WithAttrs, WithGroup) follow
// a swap: each keeps the handler it derived from the one in force, and derives it anew
// on its first record after a swap. It is safe for concurrent use.
type swapHandler struct {
	root   *atomic.Pointer[slog.Handler] // the handler in force, shared by all derived
	parent *swapHandler                  // nil for the root
	derive func(slog.Handler) slog.Handler
	cache  atomic.Pointer[derivedHandler]
}

// derivedHandler is a swapHandler's handler, derived from the root handler from.
type derivedHandler struct {
	from *slog.Handler
	h    slog.Handler
}

func newSwapHandler(h slog.Handler) *swapHandler {
	s := &swapHandler{root: new(atomic.Pointer[slog.Handler])}
	s.root.Store(&h)
	return s
}

// swap puts h in force for s and every handler derived from it.
func (s *swapHandler) swap(h slog.Handler) { s.root.Store(&h) }

// current returns the handler records go to now.
func (s *swapHandler) current() slog.Handler { return s.at(s.root.Load()) }

// at returns s's handler derived from the root handler from.
func (s *swapHandler) at(from *slog.Handler) slog.Handler {
	if s.parent == nil {
		return *from
	}
	if c := s.cache.Load(); c != nil && c.from == from {
		return c.h
	}
	h := s.derive(s.parent.at(from))
	s.cache.Store(&derivedHandler{from: from, h: h})
	return h
}

func (s *swapHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return s.current().Enabled(ctx, l)
}

func (s *swapHandler) Handle(ctx context.Context, r slog.Record) error {
	return s.current().Handle(ctx, r)
}

func (s *swapHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return s
	}
	return &swapHandler{root: s.root, parent: s, derive: func(h slog.Handler) slog.Handler { return h.WithAttrs(as) }}
}

func (s *swapHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return s
	}
	return &swapHandler{root: s.root, parent: s, derive: func(h slog.Handler) slog.Handler { return h.WithGroup(name) }}
}
