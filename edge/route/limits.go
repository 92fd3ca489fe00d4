package route

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// ErrBodyTooLarge is the error a request body bounded by max_body returns once it
// passes the bound.
var ErrBodyTooLarge = errors.New("route: request body larger than max_body")

// Serve sends r to the route's handler within the route's limits: strip_prefix is
// taken off the path, a body whose Content-Length passes max_body is answered by
// tooLarge before the handler sees a byte (a streamed one fails with ErrBodyTooLarge
// once it passes; BodyTooLarge then tells), and max_duration ends the request.
func (rt *Route) Serve(w http.ResponseWriter, r *http.Request, tooLarge func(http.ResponseWriter, *http.Request, *Route)) {
	if rt.maxBody > 0 && r.ContentLength > rt.maxBody {
		tooLarge(w, r, rt)
		return
	}
	// A copy when the route changes the request, so that what runs around the route
	// (metrics, logs) keeps it as it came; a route that changes nothing (no body to
	// bound, no prefix to strip) spares the two allocations.
	limit := rt.maxBody > 0 && r.Body != nil && r.Body != http.NoBody
	if limit || rt.stripPrefix != "" {
		out := new(http.Request)
		*out = *r
		u := *r.URL
		out.URL = &u
		r = out
	}
	if limit {
		r.Body = &limitedBody{ReadCloser: r.Body, left: rt.maxBody, route: rt}
	}
	if rt.stripPrefix != "" {
		r.URL.Path = strip(r.URL.Path, rt.stripPrefix)
		if r.URL.RawPath != "" {
			r.URL.RawPath = strip(r.URL.RawPath, rt.stripPrefix)
		}
	}
	if rt.maxDuration > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), rt.maxDuration)
		defer cancel()
		r = r.WithContext(ctx)
	}
	rt.Handler.ServeHTTP(w, r)
}

// strip removes prefix from path, leaving at least "/".
func strip(path, prefix string) string {
	p := strings.TrimPrefix(path, prefix)
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	return p
}

// MaxBody returns the route's max_body, 0 for none.
func (rt *Route) MaxBody() int64 { return rt.maxBody }

// BodyReadTimeout returns the route's own body_read_timeout, 0 for the top level's.
func (rt *Route) BodyReadTimeout() time.Duration { return rt.bodyRead }

// WriteTimeout returns the route's own write_timeout, 0 for none of its own.
func (rt *Route) WriteTimeout() time.Duration { return rt.write }

// limitedBody fails with ErrBodyTooLarge once more than left bytes are read.
type limitedBody struct {
	io.ReadCloser
	left     int64
	route    *Route
	exceeded atomic.Bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, ErrBodyTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1] // one byte more tells a body at the bound from one past it
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		b.exceeded.Store(true)
		return 0, ErrBodyTooLarge
	}
	return n, err
}

// BodyTooLarge returns the route whose max_body r's body (as Serve bounded it) passed,
// or nil.
func BodyTooLarge(r *http.Request) *Route {
	if b, ok := r.Body.(*limitedBody); ok && b.exceeded.Load() {
		return b.route
	}
	return nil
}
