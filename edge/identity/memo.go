package identity

import (
	"context"
	"net/http"
	"net/netip"
	"sync/atomic"

	"github.com/h3edge/h3edge/limiter"
)

// Memo is what the requests of one connection share. A client sends from one
// address and, almost always, with one credential for the life of a connection, so
// the keyed hashes of both are computed once per connection rather than once per
// request (a SHA-256 is most of a key's cost). A memo answers only for the exact input
// it was computed from; streams of a connection run concurrently, so each entry is an
// immutable pair swapped atomically.
//
// A nil *Memo hashes every time (a request that did not come through a listener).
type Memo struct {
	ip   atomic.Pointer[ipMemo]
	cred atomic.Pointer[credMemo]
}

type ipMemo struct {
	p netip.Prefix
	k limiter.Key
}

type credMemo struct {
	v string
	k limiter.Key
}

type memoKey struct{}

// WithMemo gives a new connection's context its memo (http.Server.ConnContext,
// http3.Server.ConnContext).
func WithMemo(ctx context.Context) context.Context {
	return context.WithValue(ctx, memoKey{}, new(Memo))
}

// MemoOf returns r's connection memo, or nil (a request that did not come through
// our listeners, as in tests that drive the handler directly).
func MemoOf(r *http.Request) *Memo {
	m, _ := r.Context().Value(memoKey{}).(*Memo)
	return m
}

// Prefix is h.Prefix(p), remembered in m.
func (m *Memo) Prefix(h Hasher, p netip.Prefix) limiter.Key {
	if m == nil {
		return h.Prefix(p)
	}
	if c := m.ip.Load(); c != nil && c.p == p {
		return c.k
	}
	k := h.Prefix(p)
	m.ip.Store(&ipMemo{p, k})
	return k
}

// Credential is h.Credential(v), remembered in m.
func (m *Memo) Credential(h Hasher, v string) limiter.Key {
	if m == nil {
		return h.Credential(v)
	}
	if c := m.cred.Load(); c != nil && c.v == v {
		return c.k
	}
	k := h.Credential(v)
	m.cred.Store(&credMemo{v, k})
	return k
}
