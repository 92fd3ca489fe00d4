package h1serve

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// bufferBeforeChunking is net/http's: a body of at most this much, written before the
// handler returns without a flush, is sent with a Content-Length.
const bufferBeforeChunking = 2048

// response is a request's http.ResponseWriter. The response header is written when
// it must be: at the first write past bufferBeforeChunking bytes, at a flush, or when
// the handler returns, so that a short body gets a Content-Length and a Content-Type
// sniffed from it, as net/http does.
type response struct {
	c      *conn
	req    *http.Request
	body   *body // nil: the request has none
	cancel context.CancelFunc

	header http.Header
	// snap is the header as it was at WriteHeader, when the handler asks for the
	// map between WriteHeader and the header's writing (net/http's rule).
	snap        http.Header
	status      int
	wroteHeader bool // a final status was given
	sentHeader  bool // the header section is in the connection's buffer
	chunked     bool
	closeAfter  bool
	handlerDone bool
	fullDuplex  bool

	contentLength int64 // declared or worked out; -1: unknown
	written       int64 // body bytes the handler wrote
	pending       []byte
	trailers      []string // declared by the Trailer field

	// canContinue: the client waits for 100 Continue, which the body's first Read
	// sends; mu orders that against the handler's writes to the connection.
	canContinue atomic.Bool
	mu          sync.Mutex

	wantsClose, wants10KeepAlive bool
	deadlines                    bool // the handler set a read or write deadline
}

func newResponse(c *conn, req *http.Request, ctx context.Context) *response {
	ctx, cancel := context.WithCancel(ctx)
	read := req
	req = req.WithContext(ctx)
	w := &response{c: c, req: req, cancel: cancel, header: make(http.Header), contentLength: -1}
	if req.Body != nil && req.Body != http.NoBody {
		w.body = &body{src: req.Body, w: w, read: read}
		req.Body = w.body
	}
	w.wantsClose = req.Close || hasToken(req.Header["Connection"], "close")
	w.wants10KeepAlive = req.ProtoMajor == 1 && req.ProtoMinor == 0 && hasToken(req.Header["Connection"], "keep-alive")
	return w
}

func hasToken(v []string, token string) bool {
	return len(v) > 0 && httpguts.HeaderValuesContainsToken(v, token)
}

// admit applies Expect: 100-continue arms the body's first Read; any other
// expectation gets 417 and the connection closes. As net/http, only the first Expect
// line is looked at. False: answered.
func (w *response) admit() bool {
	e := w.req.Header["Expect"]
	if len(e) > 0 && hasToken(e[:1], "100-continue") {
		if w.req.ProtoAtLeast(1, 1) && w.req.ContentLength != 0 && w.body != nil {
			w.canContinue.Store(true)
		}
		return true
	}
	if len(e) == 0 || e[0] == "" {
		return true
	}
	w.header.Set("Connection", "close")
	w.WriteHeader(http.StatusExpectationFailed)
	return false
}

// writeContinue sends 100 Continue if the client waits for it (the body's Read).
func (w *response) writeContinue() {
	if !w.canContinue.Load() {
		return
	}
	w.mu.Lock()
	if w.canContinue.Load() {
		w.c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		w.c.bw.Flush()
		w.canContinue.Store(false)
	}
	w.mu.Unlock()
}

// noContinue stops the body from sending 100 Continue. With a final response given
// first, the client never sends the body: the connection closes after the response.
func (w *response) noContinue(final bool) {
	if !w.canContinue.Load() {
		return
	}
	w.mu.Lock()
	was := w.canContinue.Swap(false)
	w.mu.Unlock()
	if was && final {
		w.closeAfter = true
		w.body.Close()
	}
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.c.hijacked {
		w.c.s.logf("http: response.WriteHeader on hijacked connection")
		return
	}
	if w.wroteHeader {
		return // net/http logs a superfluous call
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code == 100 || code >= 200 {
		w.noContinue(code >= 200)
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		if !w.req.ProtoAtLeast(1, 1) {
			// An HTTP/1.0 client takes any status line for the final one: RFC 9110
			// §15.2 says not to send it one.
			return
		}
		w.mu.Lock()
		writeStatusLine(w.c.bw, w.req.ProtoAtLeast(1, 1), code)
		writeFields(w.c.bw, w.header, excludedNoBody)
		w.c.bw.WriteString("\r\n")
		w.c.bw.Flush()
		w.mu.Unlock()
		return
	}
	w.wroteHeader, w.status = true, code
	if cl := w.header.Get("Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.contentLength = v
		} else {
			w.c.s.logf("http: invalid Content-Length of %q", cl)
			w.header.Del("Content-Length")
		}
	}
	// The header section as it is now is the one sent, whatever the handler does to
	// the map later (net/http clones it here). When nothing the handler does later can
	// change the section — its length is known, no type is to be sniffed, no request
	// body is left to decide on — it goes to the connection's buffer now (nothing is
	// sent before the body or a flush); else the map is cloned.
	if w.settled() {
		w.sendHeader(nil)
	} else {
		w.snap = w.header.Clone()
	}
}

// settled reports whether the header section can be written at WriteHeader.
func (w *response) settled() bool {
	h := w.header
	if w.contentLength == -1 && bodyAllowed(w.status) {
		return false // worked out from the body, or chunked by then
	}
	if _, ok := h["Content-Type"]; !ok && bodyAllowed(w.status) && headerGet(h, "Content-Encoding") == "" && headerGet(h, "Transfer-Encoding") == "" {
		return false // sniffed from the body
	}
	b := w.body
	return b == nil || w.fullDuplex || w.closeAfter || b.eof.Load()
}

var excludedNoBody = map[string]bool{"Content-Length": true, "Transfer-Encoding": true}

func writeStatusLine(bw *bufio.Writer, is11 bool, code int) {
	if is11 {
		bw.WriteString("HTTP/1.1 ")
	} else {
		bw.WriteString("HTTP/1.0 ")
	}
	bw.Write(strconv.AppendInt(bw.AvailableBuffer(), int64(code), 10))
	bw.WriteByte(' ')
	if text := http.StatusText(code); text != "" {
		bw.WriteString(text)
	} else {
		bw.WriteString("status code " + strconv.Itoa(code))
	}
	bw.WriteString("\r\n")
}

func bodyAllowed(code int) bool {
	return !(code >= 100 && code <= 199 || code == http.StatusNoContent || code == http.StatusNotModified)
}

func (w *response) Write(p []byte) (int, error) {
	if w.c.hijacked {
		return 0, http.ErrHijacked
	}
	// As net/http: a write before the body's first Read means the client waits for a
	// 100 Continue it will not get; it does not send the body, and the connection
	// closes after the response.
	w.noContinue(true)
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.contentLength != -1 && w.written > w.contentLength {
		return 0, http.ErrContentLength
	}
	if !w.sentHeader {
		if w.contentLength == -1 && len(w.pending)+len(p) <= bufferBeforeChunking {
			if w.pending == nil {
				w.pending = w.c.pend[:0]
			}
			w.pending = append(w.pending, p...)
			return len(p), nil
		}
		w.sendHeader(p)
	}
	return w.writeBody(p)
}

// writeBody writes p to the connection: chunked, as it is, or not at all (HEAD).
func (w *response) writeBody(p []byte) (int, error) {
	if w.req.Method == "HEAD" {
		return len(p), nil
	}
	bw := w.c.bw
	if w.chunked {
		bw.Write(strconv.AppendUint(bw.AvailableBuffer(), uint64(len(p)), 16))
		bw.WriteString("\r\n")
		n, err := bw.Write(p)
		bw.WriteString("\r\n")
		return n, err
	}
	return bw.Write(p)
}

// sendHeader writes the header section (net/http's chunkWriter.writeHeader), then
// what is pending of the body; next is the body's next bytes (for sniffing).
// By then a final status was given, so the body sends no 100 Continue any more.
func (w *response) sendHeader(next []byte) {
	w.sentHeader = true
	h := w.header
	if w.snap != nil {
		h = w.snap
	}
	var exclude map[string]bool
	del := func(k string) {
		if _, ok := h[k]; ok {
			if exclude == nil {
				exclude = make(map[string]bool)
			}
			exclude[k] = true
		}
	}
	var ctype, connection, te, date, clen string

	trailers := false
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			del(k)
			trailers = true
		}
	}
	for _, v := range h["Trailer"] {
		trailers = true
		for _, k := range strings.Split(v, ",") {
			if k = http.CanonicalHeaderKey(strings.TrimSpace(k)); k != "" && httpguts.ValidTrailerHeader(k) {
				w.trailers = append(w.trailers, k)
			}
		}
	}
	hte := headerGet(h, "Transfer-Encoding")
	hasTE := hte != ""
	isHEAD := w.req.Method == "HEAD"
	code := w.status
	keepAlives := !w.c.s.shutdown.Load()

	first := w.pending
	if len(first) == 0 {
		first = next
	}
	if w.handlerDone && !trailers && !hasTE && bodyAllowed(code) && headerGet(h, "Content-Length") == "" && (!isHEAD || len(first) > 0) {
		w.contentLength = int64(len(w.pending))
		clen = strconv.Itoa(len(w.pending))
	}
	hasCL := w.contentLength != -1

	if w.wants10KeepAlive && (isHEAD || hasCL || !bodyAllowed(code)) {
		if _, ok := h["Connection"]; !ok {
			connection = "keep-alive"
		}
	} else if !w.req.ProtoAtLeast(1, 1) || w.wantsClose {
		w.closeAfter = true
	}
	if headerGet(h, "Connection") == "close" || !keepAlives {
		w.closeAfter = true
	}

	// A body not read to its end: what is left is read and dropped now, up to
	// maxPostHandlerReadBytes, or the connection closes after the response. A client
	// that sends all of its request before it reads the response would wait forever
	// otherwise (net/http, issue 15527).
	if b := w.body; b != nil && w.req.ContentLength != 0 && !w.closeAfter && !w.fullDuplex {
		if b.tooBig() || !w.discard() {
			w.closeAfter = true
			del("Connection")
			connection = "close"
		}
	}

	if bodyAllowed(code) {
		_, haveType := h["Content-Type"]
		if headerGet(h, "Content-Encoding") == "" && !haveType && !hasTE && len(first) > 0 {
			ctype = http.DetectContentType(first)
		}
	} else {
		if code == http.StatusNotModified {
			del("Content-Type") // net/http's suppressedHeaders: a 304 keeps no type, a 204 or 1xx does
		}
		del("Content-Length")
		del("Transfer-Encoding")
	}
	if _, ok := h["Date"]; !ok {
		date = httpDate()
	}
	if hasCL && hasTE && hte != "identity" {
		w.c.s.logf("http: WriteHeader called with both Transfer-Encoding of %q and a Content-Length of %d", hte, w.contentLength)
		del("Content-Length")
		hasCL = false
		w.contentLength = -1
		clen = ""
	}
	switch {
	case isHEAD || !bodyAllowed(code) || hasCL:
		del("Transfer-Encoding")
	case w.req.ProtoAtLeast(1, 1):
		if hasTE && hte == "identity" {
			w.closeAfter = true
			del("Transfer-Encoding")
		} else {
			w.chunked = true
			te = "chunked"
			if hasTE && hte == "chunked" {
				del("Transfer-Encoding")
			}
		}
	default:
		w.closeAfter = true
		del("Transfer-Encoding")
	}
	if w.chunked {
		del("Content-Length") // one set to "", which is no length
	}
	if w.closeAfter && (!keepAlives || !hasToken(h["Connection"], "close")) && !isProtocolSwitch(code, h) {
		del("Connection")
		if w.req.ProtoAtLeast(1, 1) {
			connection = "close"
		}
	}

	bw := w.c.bw
	writeStatusLine(bw, w.req.ProtoAtLeast(1, 1), code)
	writeFields(bw, h, exclude)
	for _, f := range [...]struct{ k, v string }{
		{"Content-Type: ", ctype}, {"Connection: ", connection}, {"Transfer-Encoding: ", te},
		{"Date: ", date}, {"Content-Length: ", clen},
	} {
		if f.v != "" {
			bw.WriteString(f.k)
			bw.WriteString(f.v)
			bw.WriteString("\r\n")
		}
	}
	bw.WriteString("\r\n")
	if len(w.pending) > 0 {
		p := w.pending
		w.pending = nil
		w.writeBody(p)
	}
}

// discard drops what is left of the request body (body.discard), under the header
// timeout unless the handler set a read deadline of its own: net/http's server reads
// it without one, which lets a client hold the connection with a trickle.
func (w *response) discard() bool {
	b := w.body
	d := w.c.s.headerTimeout()
	if b.eof.Load() || b.closed.Load() || d <= 0 || w.deadlines {
		return b.discard()
	}
	w.c.rwc.SetReadDeadline(time.Now().Add(d))
	ok := b.discard()
	if !w.handlerDone {
		// A handler still running may run long: its background read must not meet
		// this deadline.
		w.c.rwc.SetReadDeadline(time.Time{})
	}
	return ok
}

// writeFields writes h's fields but those in exclude, sorted by name, as net/http's
// Header.WriteSubset does — a name that is not valid is dropped, CR and LF in a value
// become spaces, a value is trimmed — without its pool and sort.Interface (2 % of a
// proxied request's CPU).
func writeFields(bw *bufio.Writer, h http.Header, exclude map[string]bool) {
	var arr [16]string // a response has a handful of fields: on the stack
	keys := arr[:0]
	for k := range h {
		if !exclude[k] {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range h[k] {
			if hasNewline(v) {
				v = newlineToSpace.Replace(v)
			}
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(textproto.TrimString(v))
			bw.WriteString("\r\n")
		}
	}
}

var newlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")

// hasNewline is strings.ContainsAny(v, "\r\n") at a quarter of its cost for a field's
// value (IndexAny of two bytes loops over v rune by rune).
func hasNewline(v string) bool {
	return strings.IndexByte(v, '\n') >= 0 || strings.IndexByte(v, '\r') >= 0
}

func headerGet(h http.Header, k string) string {
	if v := h[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func isProtocolSwitch(code int, h http.Header) bool {
	return code == http.StatusSwitchingProtocols && len(h["Upgrade"]) > 0
}

// finish ends the response after the handler and reports whether the connection can
// serve another request.
func (w *response) finish() bool {
	w.handlerDone = true
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK) // a final status stops 100 Continue (noContinue)
	}
	if !w.sentHeader {
		w.sendHeader(nil)
	}
	bw := w.c.bw
	if w.chunked {
		bw.WriteString("0\r\n")
		if t := w.finalTrailers(); t != nil {
			t.Write(bw)
		}
		bw.WriteString("\r\n")
	}
	if err := bw.Flush(); err != nil {
		return false
	}
	if w.closeAfter {
		if w.body != nil && !w.body.eof.Load() {
			w.c.closeWriteAndWait() // the rest of the body must not reset the connection before the client read the response
		}
		return false
	}
	if w.body != nil && !w.discard() {
		w.c.closeWriteAndWait()
		return false
	}
	if w.deadlines {
		w.c.rwc.SetReadDeadline(time.Time{})
	}
	// A body shorter than its declared length: the client would read the next
	// response as the rest of this one.
	return w.req.Method == "HEAD" || w.contentLength == -1 || !bodyAllowed(w.status) || w.contentLength == w.written
}

func (w *response) finalTrailers() http.Header {
	var t http.Header
	for k, vv := range w.header {
		if kk, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			if t == nil {
				t = make(http.Header)
			}
			t[kk] = vv
		}
	}
	for _, k := range w.trailers {
		if t == nil {
			t = make(http.Header)
		}
		for _, v := range w.header[k] {
			t.Add(k, v)
		}
	}
	return t
}

// Flush is http.Flusher's.
func (w *response) Flush() { w.FlushError() }

// FlushError is http.ResponseController's Flush.
func (w *response) FlushError() error {
	if w.c.hijacked {
		return http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.sentHeader {
		w.sendHeader(nil)
	}
	return w.c.bw.Flush()
}

// SetReadDeadline is http.ResponseController's.
func (w *response) SetReadDeadline(t time.Time) error {
	w.deadlines = true
	w.c.cr.mu.Lock()
	w.c.cr.staleDeadline = false
	w.c.cr.mu.Unlock()
	return w.c.rwc.SetReadDeadline(t)
}

// SetWriteDeadline is http.ResponseController's (the server clears it after the
// response, as net/http's).
func (w *response) SetWriteDeadline(t time.Time) error {
	return w.c.rwc.SetWriteDeadline(t)
}

// EnableFullDuplex is http.ResponseController's: the body may be read after the
// response has begun, so an unread body is not dropped when the header is written.
func (w *response) EnableFullDuplex() error {
	w.fullDuplex = true
	return nil
}

// Hijack is http.Hijacker's.
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.handlerDone {
		panic("h1serve: Hijack called after ServeHTTP finished")
	}
	c := w.c
	if c.hijacked {
		return nil, nil, http.ErrHijacked
	}
	w.noContinue(false)
	if w.wroteHeader {
		if !w.sentHeader {
			w.sendHeader(nil)
		}
		c.bw.Flush()
	}
	c.bgTimer.Stop()
	c.cr.mu.Lock()
	c.cr.running = false
	c.cr.abortLocked()
	hasByte := c.cr.hasByte
	c.cr.mu.Unlock()
	c.rwc.SetDeadline(time.Time{})
	if hasByte {
		// The byte the background read took goes into the reader handed out. A full
		// reader cannot take it: the connection stays the server's, which closes it.
		if _, err := c.br.Peek(c.br.Buffered() + 1); err != nil {
			return nil, nil, err
		}
	}
	c.cr.mu.Lock()
	c.hijacked = true
	c.cr.mu.Unlock()
	c.bw.Reset(c.rwc)
	c.setState(http.StateHijacked)
	return c.rwc, bufio.NewReadWriter(c.br, c.bw), nil
}

// dateCache holds the Date field's value, made anew once a second.
var dateCache atomic.Pointer[dateValue]

type dateValue struct {
	sec int64
	s   string
}

func httpDate() string {
	now := time.Now()
	if d := dateCache.Load(); d != nil && d.sec == now.Unix() {
		return d.s
	}
	d := &dateValue{now.Unix(), now.UTC().Format(http.TimeFormat)}
	dateCache.Store(d)
	return d.s
}
