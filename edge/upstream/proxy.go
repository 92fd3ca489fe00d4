package upstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The proxy loop: what net/http/httputil's ReverseProxy did for a pool, done by the
// pool itself, with ReverseProxy's behaviour and without its copies.
//
// Why not ReverseProxy: in the proxy scenario's profile (README, Performance, "Where a
// proxied HTTP/1.1 request's CPU goes" and "HTTP/3's own costs taken back") its work
// outside the transport — a deep Clone of the request (header, URL, trailer), a second
// copy of it for the context that carries the 1xx hook, hop-by-hop removal by a dozen
// Del calls on the clone, header copies value by value with Add, mime.ParseMediaType
// for the flush decision, the ClientTrace and its closures — was 11 % of h3edge's CPU
// per proxied HTTP/1.1 request and 8 % per HTTP/3 one. Here the outgoing request is
// built once, in one allocation with the first try's copy: the header is copied once,
// its value slices shared with the incoming request's, leaving out the hop-by-hop
// fields as it goes; the response's fields move into the ResponseWriter's header by
// slice, not by value; h1Client gets the 1xx hook without a context. BenchmarkProxyLeg
// measures it: 28 allocations (2 986 B) per proxied GET through ReverseProxy on
// h1Client, 14 (2 330 B) through this loop (11 and 2 273 B since h1read.go parses the
// response header in place); side by side (bench/upstream-cost.sh, 7
// rounds) a proxied request cost h3edge 0.94–0.97× the CPU on HTTP/3 and 0.86–0.92×
// on HTTP/1.1 (README, Performance, "h3edge's own proxy loop"). TestDifferential,
// which keeps ReverseProxy as the reference, checks that nothing else changed.
//
// What ReverseProxy does and this keeps: hop-by-hop fields (RFC 9110 §7.6.1, those the
// Connection field names too) removed both ways, Te: trailers and an Upgrade put back,
// the client's Forwarded and X-Forwarded-* fields dropped before Config.Rewrite, query
// strings that do not parse re-encoded, an empty User-Agent rather than Go's, 1xx
// responses passed on, flushing at once for text/event-stream and bodies of unknown
// length (and none otherwise: the pool had no FlushInterval), trailers declared and
// not (http.TrailerPrefix), 101 Switching Protocols over a hijacked connection, and a
// body that fails midway aborting the response (http.ErrAbortHandler) so that the
// client sees a reset rather than a short answer that looks whole.

// exchange is one proxied request: the outgoing request and its URL, the first try's
// copy of them, and the guard of the 1xx hook — one allocation.
type exchange struct {
	out   http.Request
	url   url.URL
	first tryRequest
	w     http.ResponseWriter
	// mu guards done and w's header against a 1xx that net/http's Transport reports
	// from its own goroutine after the try has ended.
	mu   sync.Mutex
	done bool
	// upConn is the connection an Upgrade's try got, for a 101's writing half.
	upConn net.Conn
}

// informer is told of a try's 1xx responses, as ReverseProxy's Got1xxResponse hook.
type informer interface {
	got1xx(code int, header textproto.MIMEHeader) error
}

// got1xx passes a 1xx response on to the client while the exchange waits for the
// final one: the origin's fields but the hop-by-hop ones (HTTP/2 and HTTP/3 forbid
// them, and quic-go's client fails the request on one). The fields the edge set for
// the final response are kept for it.
func (x *exchange) got1xx(code int, header textproto.MIMEHeader) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.done {
		return nil
	}
	h := x.w.Header()
	own := h.Clone()
	clear(h)
	in := http.Header(header) // this 1xx's own, used for nothing else
	dropConnectionNamed(in, in["Connection"])
	moveHeader(h, in)
	x.w.WriteHeader(code)
	clear(h) // WriteHeader keeps a 1xx's fields in the map: they are not the response's
	maps.Copy(h, own)
	return nil
}

// serve proxies r (Pool.ServeHTTP).
func (p *Pool) serve(w http.ResponseWriter, r *http.Request) {
	x := &exchange{w: w}
	out := &x.out
	*out = *r
	x.url = *r.URL
	out.URL = &x.url
	if r.ContentLength == 0 {
		out.Body = nil // nothing to send, and nothing for a retry to replay
	}
	if out.Body != nil {
		// A transport may still read the body after the handler returned (net/http's
		// Transport sends it from its own goroutine); closed, the server's ends.
		defer out.Body.Close()
	}
	out.Close = false
	upType := upgradeType(r.Header)
	if upType != "" && hasToken(r.Header["Upgrade"], "h2c") {
		// Not passed on: after a 101 the client would speak HTTP/2 straight to the
		// origin, past the edge's routes and policies (h2c smuggling).
		upType = ""
	}
	if !isPrint(upType) {
		p.errorHandler(w, r, fmt.Errorf("client tried to switch to invalid protocol %q", upType))
		return
	}
	out.Header = outHeader(r.Header)
	if hasToken(r.Header["Te"], "trailers") {
		out.Header["Te"] = teTrailers // the origin may send trailers: the client takes them
	}
	if upType != "" {
		out.Header["Connection"] = connUpgrade
		out.Header["Upgrade"] = []string{upType}
		out = out.WithContext(httptrace.WithClientTrace(out.Context(), &httptrace.ClientTrace{
			GotConn: func(ci httptrace.GotConnInfo) { x.upConn = ci.Conn }, // each try's; the last is the 101's
		}))
	}
	x.url.RawQuery = cleanQuery(x.url.RawQuery)
	p.rewrite(out, r)
	if out.Method == http.MethodConnect {
		p.errorHandler(w, out, errors.New("client sent unsupported CONNECT request"))
		return
	}
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = emptyValue // not Go's default
	}

	res, err := p.roundTrip(out, x, &x.first)
	x.mu.Lock()
	x.done = true
	x.mu.Unlock()
	if err != nil {
		p.errorHandler(w, out, err)
		return
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		p.switchProtocols(w, out, res, x.upConn)
		return
	}
	if res.StatusCode < 100 { // http.ReadResponse takes 000-099; WriteHeader panics on them
		res.Body.Close()
		p.errorHandler(w, out, fmt.Errorf("upstream: invalid status %03d", res.StatusCode))
		return
	}

	dropConnectionNamed(res.Header, res.Header["Connection"])
	h := w.Header()
	moveHeader(h, res.Header)
	if _, ok := h["Content-Type"]; !ok {
		// The origin sent none: the servers would sniff one (net/http's, quic-go's,
		// h1serve), labelling as text/html what the origin left unlabelled.
		h["Content-Type"] = nil
	}
	// Trailers the origin declared are declared to the client (net/http's response
	// keeps them in Trailer, not in the header).
	announced := len(res.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		h["Trailer"] = append(h["Trailer"], strings.Join(keys, ", "))
	}
	w.WriteHeader(res.StatusCode)

	rc := http.NewResponseController(w)
	stream := res.ContentLength == -1 || isEventStream(res.Header["Content-Type"])
	if stream && hasBody(r.Method, res.StatusCode) {
		rc.Flush() // the header goes now, whenever the body's first bytes come
	}
	var body io.Reader = res.Body
	var frames *grpcFrames
	if r.ProtoMajor >= 2 && IsGRPC(res.Header["Content-Type"]) {
		frames = &grpcFrames{r: res.Body}
		body = frames
	}
	if err := copyBody(w, rc, body, stream); err != nil {
		res.Body.Close()
		if frames != nil && grpcEnd(h, r, err, frames) {
			return // the stream ends with the gRPC status in its trailers
		}
		if abortable(r) {
			panic(http.ErrAbortHandler) // the server resets the stream or closes the connection
		}
		return
	}
	res.Body.Close() // now, not deferred: it fills res.Trailer

	if len(res.Trailer) > 0 {
		rc.Flush() // chunked even when short: net/http would otherwise send a length and drop them
	}
	if len(res.Trailer) == announced {
		addHeader(h, res.Trailer)
		return
	}
	for k, vv := range res.Trailer { // some undeclared: all by the prefix
		if isHopHeader(k) {
			continue // HTTP/2's and HTTP/3's servers drop it; net/http's HTTP/1.1 one would send it
		}
		k = http.TrailerPrefix + k
		for _, v := range vv {
			h.Add(k, v)
		}
	}
}

// Values shared by every request that gets them; none is ever changed in place (a
// full slice: an append copies).
var (
	teTrailers  = []string{"trailers"}
	connUpgrade = []string{"Upgrade"}
	emptyValue  = []string{""}
)

// outHeader is the header a request goes upstream with: in's fields but the hop-by-hop
// ones, those in's Connection names, and the forwarded fields (Config.Rewrite sets the
// edge's own). The value slices are in's, cut to their length so that an append to
// one copies it.
func outHeader(in http.Header) http.Header {
	h := make(http.Header, len(in)+4) // room for the forwarded fields and Via
	for k, vv := range in {
		if isHopHeader(k) {
			continue
		}
		if ClientAddrField(k) {
			continue
		}
		h[k] = vv[:len(vv):len(vv)]
	}
	dropConnectionNamed(h, in["Connection"])
	return h
}

// ClientAddrField reports whether the field k (canonical) is one an origin may take a
// client's address or scheme from: Forwarded, X-Forwarded-*, X-Real-Ip,
// True-Client-Ip, X-Client-Ip, X-Cluster-Client-Ip, or one of them with '_' for '-'
// (CGI-style origins read X_Forwarded_For as X-Forwarded-For). The pool drops them all;
// Config.Rewrite sets the edge's own, and passes a trusted proxy's on.
func ClientAddrField(k string) bool {
	if strings.IndexByte(k, '_') >= 0 {
		k = textproto.CanonicalMIMEHeaderKey(strings.ReplaceAll(k, "_", "-"))
	}
	switch k {
	case "Forwarded", "X-Real-Ip", "True-Client-Ip", "X-Client-Ip", "X-Cluster-Client-Ip":
		return true
	}
	return strings.HasPrefix(k, "X-Forwarded-")
}

// isHopHeader reports whether the field k is hop-by-hop by name: RFC 9110 §7.6.1's and
// those of RFC 2616 §13.5.1 that ReverseProxy also removes. Keys are canonical, as
// ReverseProxy's Del looks them up.
func isHopHeader(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// dropConnectionNamed deletes from h the fields that conn, the values of a Connection
// field, names.
func dropConnectionNamed(h http.Header, conn []string) {
	for _, f := range conn {
		for name := range strings.SplitSeq(f, ",") {
			if name = textproto.TrimString(name); name != "" {
				delete(h, textproto.CanonicalMIMEHeaderKey(name))
			}
		}
	}
}

// moveHeader adds src's fields to dst but the hop-by-hop ones (src's Connection named
// ones are gone already), giving dst src's value slices where dst has none of its own:
// src, a response's header, is not used again.
func moveHeader(dst, src http.Header) {
	for k, vv := range src {
		if len(vv) == 0 || isHopHeader(k) {
			continue
		}
		if old := dst[k]; len(old) > 0 {
			dst[k] = append(old, vv...)
		} else {
			dst[k] = vv[:len(vv):len(vv)]
		}
	}
}

// addHeader adds src's values to dst, value by value.
func addHeader(dst, src http.Header) {
	for k, vv := range src {
		for _, v := range vv {
			dst.Add(k, v)
		}
	}
}

// upgradeType is the protocol h asks to switch to, or "".
func upgradeType(h http.Header) string {
	if !hasToken(h["Connection"], "Upgrade") {
		return ""
	}
	return h.Get("Upgrade")
}

// hasToken reports whether a field's values, comma-separated lists, hold token
// (ASCII case-insensitively), as x/net's httpguts.HeaderValuesContainsToken, which
// ReverseProxy uses (the package is std only).
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for e := range strings.SplitSeq(v, ",") {
			if asciiEqualFold(strings.Trim(e, " \t"), token) {
				return true
			}
		}
	}
	return false
}

// asciiEqualFold reports whether s and t are equal, ASCII case-insensitively; a byte
// outside ASCII matches nothing.
func asciiEqualFold(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		a, b := s[i], t[i]
		if a >= 0x80 {
			return false
		}
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// hasBody reports whether a response to method with status can have a body: a HEAD's,
// a 1xx, 204 or 304 cannot (RFC 9110 §6.4.1), and their header is not flushed ahead.
func hasBody(method string, status int) bool {
	return method != http.MethodHead && status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// isPrint reports whether s is printable ASCII.
func isPrint(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// isEventStream reports whether a Content-Type field's value is text/event-stream,
// parameters aside: mime.ParseMediaType's verdict for the media type without the
// cost of parsing the parameters.
func isEventStream(ct []string) bool {
	if len(ct) == 0 {
		return false
	}
	base, _, _ := strings.Cut(ct[0], ";")
	return asciiEqualFold(strings.TrimSpace(base), "text/event-stream")
}

// cleanQuery re-encodes a query string that does not parse as one (a ';', a bad
// escape), so that the origin cannot read it differently from the edge, as
// ReverseProxy does for Rewrite; and escapes a space or '#' (which HTTP/2's and
// HTTP/3's servers let through in :path) that would end the request target early.
func cleanQuery(s string) string {
	reencode := func(s string) string {
		v, _ := url.ParseQuery(s)
		return v.Encode()
	}
	if strings.Count(s, "&")+1 > 10000 { // net/url's default bound on parameters
		return reencode(s)
	}
	for i := 0; i < len(s); {
		switch s[i] {
		case ' ', '#':
			return cleanQuery(targetEnders.Replace(s)) // %20 and %23: the loop passes them
		case ';':
			return reencode(s)
		case '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return reencode(s)
			}
			i += 3
		default:
			i++
		}
	}
	return s
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// copyBufferPool holds the response body copies' buffers: without it each request
// would make its own 32 KiB.
var copyBufferPool = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// copyBody copies body to w, flushing after each write when flush is set. It returns
// a failed read or write; the end of the body is not one.
func copyBody(w http.ResponseWriter, rc *http.ResponseController, body io.Reader, flush bool) error {
	bp := copyBufferPool.Get().(*[32 << 10]byte)
	defer copyBufferPool.Put(bp)
	buf := bp[:]
	for {
		nr, rerr := body.Read(buf)
		if nr > 0 {
			nw, werr := w.Write(buf[:nr])
			if werr != nil {
				return clientError{werr}
			}
			if nw != nr {
				return clientError{io.ErrShortWrite}
			}
			if flush {
				rc.Flush()
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// clientError is copyBody's error of a write to the client: nothing more reaches it.
type clientError struct{ error }

func (e clientError) Unwrap() error { return e.error }

// IsGRPC reports whether a Content-Type field is gRPC's: application/grpc, or
// application/grpc+proto and the like — not gRPC-Web (application/grpc-web), whose
// requests are single messages.
func IsGRPC(v []string) bool {
	if len(v) == 0 {
		return false
	}
	rest, ok := strings.CutPrefix(v[0], "application/grpc")
	return ok && (rest == "" || rest[0] == '+' || rest[0] == ';')
}

// grpcFrames follows the length-prefixed messages of a gRPC response body as it is
// read, so that a body that breaks can be told as broken between two messages or
// inside one.
type grpcFrames struct {
	r    io.Reader
	head [5]byte
	nh   int    // bytes of the current message's prefix read
	left uint32 // bytes of its payload still to come
}

func (g *grpcFrames) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	for b := p[:n]; len(b) > 0; {
		if g.left > 0 {
			k := min(uint32(len(b)), g.left)
			g.left -= k
			b = b[k:]
			continue
		}
		k := copy(g.head[g.nh:], b)
		g.nh += k
		b = b[k:]
		if g.nh == len(g.head) {
			g.nh, g.left = 0, binary.BigEndian.Uint32(g.head[1:])
		}
	}
	return n, err
}

// grpcEnd ends a gRPC response whose upstream body broke (err, not the client's) at a
// message boundary the way a gRPC server would: with a status in the trailers —
// DEADLINE_EXCEEDED when the route's max_duration passed, UNAVAILABLE when the
// upstream went away — rather than a reset, which gRPC clients report as INTERNAL,
// a server's bug. Inside a message, or when the client went away, it reports false.
func grpcEnd(h http.Header, r *http.Request, err error, g *grpcFrames) bool {
	var ce clientError
	if errors.As(err, &ce) || g.nh != 0 || g.left != 0 || r.Context().Err() == context.Canceled {
		return false
	}
	// Printable ASCII, so no percent-encoding; the upstream's error (its address among
	// it) is not the client's to read, as proxyError's answers do not say it either.
	code, msg := "14", "the upstream ended the stream"
	if errors.Is(err, ErrIdle) {
		msg = "the upstream sent nothing within the pool's read_timeout"
	}
	if r.Context().Err() == context.DeadlineExceeded {
		code, msg = "4", "the route's max_duration passed"
	}
	h[http.TrailerPrefix+"Grpc-Status"] = []string{code}
	h[http.TrailerPrefix+"Grpc-Message"] = []string{msg}
	return true
}

// abortable reports whether the server r came to recovers http.ErrAbortHandler:
// net/http's (HTTP/1.1 and HTTP/2, which put ServerContextKey in the context) and
// quic-go's HTTP/3 server (which resets the stream). A handler driven directly, by a
// test, returns instead, as ReverseProxy's does.
func abortable(r *http.Request) bool {
	return r.ProtoMajor == 3 || r.Context().Value(http.ServerContextKey) != nil
}

// switchProtocols carries a 101 Switching Protocols (a WebSocket) as ReverseProxy
// does: the client's connection is hijacked (on HTTP/2 and HTTP/3, package tunnel
// makes the extended CONNECT's stream one), the 101 written to it, and bytes copied
// both ways until both sides end, one side fails, or the request's context ends.
// upConn, the connection the 101 came on, ends the origin's writing half when the
// client ends its own (a WebSocket client's END_STREAM after its close frame): the
// origin's answer to it still reaches the client.
func (p *Pool) switchProtocols(w http.ResponseWriter, req *http.Request, res *http.Response, upConn net.Conn) {
	fail := func(err error) {
		res.Body.Close()
		p.errorHandler(w, req, err)
	}
	reqUp, resUp := upgradeType(req.Header), upgradeType(res.Header)
	if !isPrint(resUp) {
		fail(fmt.Errorf("backend tried to switch to invalid protocol %q", resUp))
		return
	}
	if !asciiEqualFold(reqUp, resUp) {
		fail(fmt.Errorf("backend tried to switch protocol %q when %q was requested", resUp, reqUp))
		return
	}
	backConn, ok := res.Body.(io.ReadWriteCloser)
	if !ok {
		fail(errors.New("internal error: 101 switching protocols response with non-writable body"))
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if errors.Is(err, http.ErrNotSupported) {
		fail(fmt.Errorf("can't switch protocols using non-Hijacker ResponseWriter type %T", w))
		return
	}
	if err != nil {
		backConn.Close()
		p.errorHandler(w, req, fmt.Errorf("Hijack failed on protocol switch: %v", err))
		return
	}
	defer conn.Close()
	closed, watched := make(chan struct{}), make(chan struct{})
	go func() {
		closeWhenDone(req, closed, backConn, conn)
		close(watched)
	}()
	defer func() {
		close(closed)
		<-watched // conn is not touched once the handler has returned
	}()

	addHeader(w.Header(), res.Header)
	res.Header = w.Header()
	res.Body = nil // res.Write writes the head only: the body is backConn's
	if err := res.Write(brw); err != nil {
		p.errorHandler(w, req, fmt.Errorf("response write: %v", err))
		return
	}
	if err := brw.Flush(); err != nil {
		p.errorHandler(w, req, fmt.Errorf("response flush: %v", err))
		return
	}
	var fromClient io.Reader = conn
	if n := brw.Reader.Buffered(); n > 0 {
		// Sent with the handshake, before the 101 (a client that does not wait):
		// already in the server's buffer, not to be lost.
		fromClient = io.MultiReader(io.LimitReader(brw.Reader, int64(n)), conn)
	}
	var toOrigin io.Writer = backConn
	if cw, ok := upConn.(closeWriter); ok {
		toOrigin = halfConn{backConn, cw} // writes through the 101's body, as it buffers nothing
	}
	var last atomic.Int64 // UnixNano of the last read either way that brought bytes
	errc := make(chan error, 2)
	go copyHalf(toOrigin, stampedReader{fromClient, &last}, errc) // client → origin
	go copyHalf(conn, stampedReader{backConn, &last}, errc)       // origin → client
	if err := <-errc; err != nil {
		return // failed, or the side that ended has no half to close: the tunnel ends
	}
	// One side ended and the other was told so: what its peer still sends passes for
	// as long as it keeps sending; a peer silent (or unread) for the pool's timeout
	// is cut off.
	linger := time.NewTimer(p.cfg.Timeout)
	defer linger.Stop()
	for {
		select {
		case <-errc:
			return
		case <-linger.C:
			idle := time.Since(time.Unix(0, last.Load()))
			if idle >= p.cfg.Timeout {
				return
			}
			linger.Reset(p.cfg.Timeout - idle)
		}
	}
}

// stampedReader notes in last when each of its reads brought bytes.
type stampedReader struct {
	r    io.Reader
	last *atomic.Int64
}

func (s stampedReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// closeWriter is a connection whose writing half can end alone: TCP's (a FIN) and
// TLS's (close_notify).
type closeWriter interface{ CloseWrite() error }

// halfConn is the origin's side of a tunnel: bytes go through w, the end through cw.
type halfConn struct {
	w  io.Writer
	cw closeWriter
}

func (h halfConn) Write(p []byte) (int, error) { return h.w.Write(p) }
func (h halfConn) CloseWrite() error           { return h.cw.CloseWrite() }

// closeWhenDone closes an upgraded connection to the origin when req's context ends
// (the client went, max_duration passed) or the switch is over; when the context
// ends, the client's side too, for a copy to it may be stalled in a write to a client
// that does not read, which nothing on the origin's side ends.
func closeWhenDone(req *http.Request, closed <-chan struct{}, backConn, conn io.Closer) {
	select {
	case <-req.Context().Done():
		backConn.Close()
		conn.Close()
	case <-closed:
		backConn.Close()
	}
}

var errCopyDone = errors.New("upstream: upgraded connection copy complete")

// copyHalf copies src to dst until src ends, then closes dst's writing side where it
// has one, and reports on errc.
func copyHalf(dst io.Writer, src io.Reader, errc chan<- error) {
	if _, err := io.Copy(dst, src); err != nil {
		errc <- err
		return
	}
	if cw, ok := dst.(closeWriter); ok {
		errc <- cw.CloseWrite()
		return
	}
	errc <- errCopyDone
}

var targetEnders = strings.NewReplacer(" ", "%20", "#", "%23")
