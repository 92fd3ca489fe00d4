package upstream

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// writeRequest writes head (appendRequestHead's) and req's body, of the length
// req.ContentLength says, as http.Request.Write does, closing the body after.
func writeRequest(bw *bufio.Writer, head []byte, req *http.Request) error {
	if _, err := bw.Write(head); err != nil {
		return err
	}
	if req.Body == nil || req.Body == http.NoBody {
		return nil
	}
	n, err := io.Copy(bw, io.LimitReader(req.Body, req.ContentLength))
	req.Body.Close()
	if err != nil {
		return err
	}
	if n != req.ContentLength {
		return fmt.Errorf("http: ContentLength=%d with Body length %d", req.ContentLength, n)
	}
	return nil
}

var errNotPlain = errors.New("upstream: request for net/http's writer")

var headPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// appendRequestHead appends req's head to *b as http.Request.Write writes it, byte
// for byte, without its transfer writer, fmt calls and pooled sorter (a quarter of the
// request write's CPU on h1Client's path in the proxy scenario's profile;
// TestDifferential compares the two at the origin): request line, Host, User-Agent
// (Go's default when the field is absent, none when it is empty), Content-Length, the
// other fields sorted by name, values with CR and LF made spaces and trimmed. It
// reports errNotPlain for what it leaves to net/http: an IPv6 zone or non-ASCII host,
// a control character in the target, a name or value net/http's Transport refuses.
func appendRequestHead(b *[]byte, req *http.Request) (*[]byte, error) {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if !plainHost(host) {
		return b, errNotPlain
	}
	method := req.Method
	if method == "" {
		method = "GET"
	}
	if !validFieldName(method) {
		return b, errNotPlain // net/http refuses it
	}
	h := append(append(*b, method...), ' ')
	start := len(h)
	h = appendRequestURI(h, req.URL)
	if containsCTL(string(h[start:])) {
		return b, errNotPlain
	}
	h = append(h, " HTTP/1.1\r\nHost: "...)
	h = append(append(h, host...), "\r\n"...)
	ua := "Go-http-client/1.1"
	if vs, ok := req.Header["User-Agent"]; ok {
		ua = ""
		if len(vs) > 0 {
			ua = vs[0]
		}
	}
	if ua != "" {
		h = append(append(append(h, "User-Agent: "...), cleanValue(ua)...), "\r\n"...)
	}
	switch {
	case req.ContentLength > 0 && req.Body != nil && req.Body != http.NoBody:
		h = strconv.AppendInt(append(h, "Content-Length: "...), req.ContentLength, 10)
		h = append(h, "\r\n"...)
	case req.Method == "POST" || req.Method == "PUT" || req.Method == "PATCH":
		h = append(h, "Content-Length: 0\r\n"...)
	}
	var small [32]string
	keys := small[:0]
	for k := range req.Header {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !validFieldName(k) {
			return b, errNotPlain
		}
		for _, v := range req.Header[k] {
			if !validFieldValue(v) {
				return b, errNotPlain
			}
			h = append(append(append(append(h, k...), ": "...), cleanValue(v)...), "\r\n"...)
		}
	}
	h = append(h, "\r\n"...)
	*b = h
	return b, nil
}

// appendRequestURI appends u.RequestURI() to h without making the string: path and
// query are appended apart (RequestURI joins them with a concatenation per request).
func appendRequestURI(h []byte, u *url.URL) []byte {
	path := ""
	if u.Opaque == "" {
		path = u.EscapedPath()
	}
	if u.Opaque != "" || path == "" || strings.HasPrefix(path, "//") {
		return append(h, u.RequestURI()...) // the rare forms: RequestURI's own rules
	}
	h = append(h, path...)
	if u.ForceQuery || u.RawQuery != "" {
		h = append(append(h, '?'), u.RawQuery...)
	}
	return h
}

// plainHost reports whether host is made of the bytes net/http's Host check
// (httpguts.ValidHostHeader) lets through, without '%' (an IPv6 zone net/http removes)
// and ASCII only (no punycode to apply). Others go to net/http: this package imports
// the standard library only (DESIGN §2).
func plainHost(host string) bool {
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!$&()*+,-.:;=['_]~", c) >= 0) {
			return false
		}
	}
	return true
}

// ValidMethod reports whether m is a method a request line can carry: an RFC 9110
// token (§9.1). The edge refuses others before any route (Go's HTTP/2 server takes
// any field value as :method).
func ValidMethod(m string) bool { return validFieldName(m) }

// validFieldName is httpguts.ValidHeaderFieldName: a non-empty RFC 9110 token.
func validFieldName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validFieldValue is httpguts.ValidHeaderFieldValue: no control byte but HTAB.
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func containsCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c == 0x7f {
			return true
		}
	}
	return false
}

// cleanValue is net/http's treatment of a field value on the wire: CR and LF become
// spaces, then surrounding whitespace goes.
func cleanValue(v string) string {
	if strings.IndexByte(v, '\n') >= 0 || strings.IndexByte(v, '\r') >= 0 {
		v = newlineToSpace.Replace(v)
	}
	if v == "" || !isTrimmed(v[0]) && !isTrimmed(v[len(v)-1]) {
		return v // the common value: strings.Trim would build its byte set first
	}
	return strings.Trim(v, " \t\r\n")
}

var newlineToSpace = strings.NewReplacer("\r", " ", "\n", " ")

func isTrimmed(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
