// Package accesslog is h3edge's access log (DESIGN.md §11): one line per request, as
// JSON or in the Common Log Format, handed to a Writer that buffers lines and writes
// them from a goroutine of its own, dropping (and counting) a line rather than holding
// a request up when the output falls behind.
package accesslog

import (
	"context"
	"encoding/hex"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Entry is one request's line.
type Entry struct {
	// Time is when the request reached the edge.
	Time time.Time
	// Proto is the protocol version, such as "HTTP/3.0".
	Proto string
	// Method, Host and Path are the request's; Path is the request target without its
	// query, which may carry a client key (policies' key: query:NAME).
	Method, Host, Path string
	// Status is the final status sent; Bytes the response body's bytes written.
	Status int
	Bytes  int64
	// Duration is from Time to the response's end.
	Duration time.Duration
	// Client is the client's address prefix (ip.ipv4_prefix, ip.ipv6_prefix), as the
	// per-source budgets count it.
	Client netip.Prefix
	// Fields are what the chain and the proxy learn while handling the request.
	Fields
}

// SetRequest fills e's Proto, Method, Host and Path from r, without allocating.
func (e *Entry) SetRequest(r *http.Request) {
	e.Proto, e.Method, e.Host, e.Path = protoVersion(r), r.Method, r.Host, requestPath(r)
}

// protoVersion names r's protocol version without allocating (r.Proto of an extended
// CONNECT on HTTP/3 is its :protocol).
func protoVersion(r *http.Request) string {
	switch {
	case r.ProtoMajor == 3:
		return "HTTP/3.0"
	case r.ProtoMajor == 2:
		return "HTTP/2.0"
	case r.ProtoMajor == 1 && r.ProtoMinor == 1:
		return "HTTP/1.1"
	case r.ProtoMajor == 1 && r.ProtoMinor == 0:
		return "HTTP/1.0"
	}
	return r.Proto
}

// requestPath is the request target as the client sent it, without the query: a
// query may carry a client key (key: query:NAME).
func requestPath(r *http.Request) string {
	p := r.RequestURI
	if p == "" {
		p = r.URL.Path
	}
	p, _, _ = strings.Cut(p, "?")
	return p
}

// Fields are the parts of an Entry that handlers further in set while the request is
// handled: they find them with FromContext.
type Fields struct {
	// Route, Upstream and Target name the route taken, its upstream pool and the
	// target that answered (the last one tried when none did); empty for the demo
	// origin and for a request no route took. The shorthand upstream: URL is route
	// and pool "default".
	Route, Upstream, Target string
	// Key is the first 8 bytes of the client key's hash (the RateLimit field's pk),
	// never the key; valid when HasKey.
	Key    [8]byte
	HasKey bool
	// Decision is the per-key policies' verdict: "allowed", "denied", "failed_closed"
	// (the store failed and on_store_failure refused), "unavailable" (the store could
	// not decide: 503); empty when no policy matched.
	Decision string
}

// SetDecision sets Decision; on nil Fields (a request not logged) it does nothing.
func (f *Fields) SetDecision(d string) {
	if f != nil {
		f.Decision = d
	}
}

// fieldsContext is a context carrying a request's Fields: one allocation for both.
type fieldsContext struct {
	context.Context
	f Fields
}

type fieldsKey struct{}

// Value returns the Fields for FromContext's key, else asks the parent.
func (c *fieldsContext) Value(key any) any {
	if key == (fieldsKey{}) {
		return &c.f
	}
	return c.Context.Value(key)
}

// NewContext returns a context derived from ctx that carries empty Fields, and them.
func NewContext(ctx context.Context) (context.Context, *Fields) {
	c := &fieldsContext{Context: ctx}
	return c, &c.f
}

// FromContext returns the Fields of the request whose context is ctx, or nil when the
// request is not logged (no access log, or not sampled): callers then skip the work.
func FromContext(ctx context.Context) *Fields {
	f, _ := ctx.Value(fieldsKey{}).(*Fields)
	return f
}

// AppendJSON appends e as one JSON object and a newline. Keys: time, proto, method,
// host, path, status, bytes, duration_ms, route, upstream, target, client, key,
// decision; every one present, "" when empty.
func AppendJSON(b []byte, e *Entry) []byte {
	b = append(b, `{"time":"`...)
	b = e.Time.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	b = append(b, `","proto":`...)
	b = appendJSONString(b, e.Proto)
	b = append(b, `,"method":`...)
	b = appendJSONString(b, e.Method)
	b = append(b, `,"host":`...)
	b = appendJSONString(b, e.Host)
	b = append(b, `,"path":`...)
	b = appendJSONString(b, e.Path)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, e.Bytes, 10)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendFloat(b, float64(e.Duration)/float64(time.Millisecond), 'f', 3, 64)
	b = append(b, `,"route":`...)
	b = appendJSONString(b, e.Route)
	b = append(b, `,"upstream":`...)
	b = appendJSONString(b, e.Upstream)
	b = append(b, `,"target":`...)
	b = appendJSONString(b, e.Target)
	b = append(b, `,"client":"`...)
	if e.Client.IsValid() {
		b = e.Client.AppendTo(b)
	}
	b = append(b, `","key":"`...)
	if e.HasKey {
		b = hex.AppendEncode(b, e.Key[:])
	}
	b = append(b, `","decision":`...)
	b = appendJSONString(b, e.Decision)
	return append(b, "}\n"...)
}

// AppendCommon appends e in the Common Log Format and a newline:
//
//	client - key [time] "method path proto" status bytes
//
// client is the address prefix, key the key's hash prefix in hex or "-", bytes "-"
// when none were sent. Quotes, backslashes and bytes outside printable ASCII in the
// request line are escaped as \" \\ and \xHH, as Apache httpd escapes them.
func AppendCommon(b []byte, e *Entry) []byte {
	if e.Client.IsValid() {
		b = e.Client.AppendTo(b)
	} else {
		b = append(b, '-')
	}
	b = append(b, " - "...)
	if e.HasKey {
		b = hex.AppendEncode(b, e.Key[:])
	} else {
		b = append(b, '-')
	}
	b = append(b, " ["...)
	b = e.Time.AppendFormat(b, "02/Jan/2006:15:04:05 -0700")
	b = append(b, `] "`...)
	b = appendEscaped(b, e.Method)
	b = append(b, ' ')
	b = appendEscaped(b, e.Path)
	b = append(b, ' ')
	b = appendEscaped(b, e.Proto)
	b = append(b, `" `...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, ' ')
	if e.Bytes > 0 {
		b = strconv.AppendInt(b, e.Bytes, 10)
	} else {
		b = append(b, '-')
	}
	return append(b, '\n')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 replaced by U+FFFD (a client chooses the bytes of
// the path and the host).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0 // s[start:i] is safe, not appended yet: appended in one piece
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\\' && c != 0x7f {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || n != 1 {
				i += n
				continue
			}
		}
		b = append(b, s[start:i]...)
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < utf8.RuneSelf:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, `\ufffd`...)
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendEscaped appends s with quotes, backslashes and bytes outside printable ASCII
// escaped, so that a line of the Common Log Format stays one line of fields.
func appendEscaped(b []byte, s string) []byte {
	if s == "" {
		return append(b, '-')
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c <= ' ' || c >= 0x7f:
			b = append(b, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return b
}
