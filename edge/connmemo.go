package edge

import (
	"context"
	"net/http"
	"net/netip"
	"sync/atomic"

	"github.com/h3edge/h3edge/limiter"
)

// connMemo is what the requests of one connection share. A client sends from one
// address and, almost always, with one credential for the life of a connection, so
// the keyed hashes of both are computed once per connection rather than once per
// request (a SHA-256 is most of a key's cost). A memo answers only for the exact input
// it was computed from; streams of a connection run concurrently, so each entry is an
// immutable pair swapped atomically.
type connMemo struct {
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

type connMemoKey struct{}

// withConnMemo gives a new connection's context its memo (http.Server.ConnContext,
// http3.Server.ConnContext).
func withConnMemo(ctx context.Context) context.Context {
	return context.WithValue(ctx, connMemoKey{}, new(connMemo))
}

// memoOf returns r's connection memo, or nil (a request that did not come through
// our listeners, as in tests that drive the handler directly).
func memoOf(r *http.Request) *connMemo {
	m, _ := r.Context().Value(connMemoKey{}).(*connMemo)
	return m
}

// ipKey is h.ipKey(p), remembered in m.
func (m *connMemo) ipKey(h hasher, p netip.Prefix) limiter.Key {
	if m == nil {
		return h.ipKey(p)
	}
	if c := m.ip.Load(); c != nil && c.p == p {
		return c.k
	}
	k := h.ipKey(p)
	m.ip.Store(&ipMemo{p, k})
	return k
}

// credKey is h.key('k', v), remembered in m.
func (m *connMemo) credKey(h hasher, v string) limiter.Key {
	if m == nil {
		return h.key('k', v)
	}
	if c := m.cred.Load(); c != nil && c.v == v {
		return c.k
	}
	k := h.key('k', v)
	m.cred.Store(&credMemo{v, k})
	return k
}
