package identity

import (
	"errors"
	"net/http"
	"strings"
)

// Kind is where a key source looks for the client key.
type Kind uint8

// The kinds of a policy's key: entries (DESIGN §4).
const (
	// Header is a request header's first value (header:NAME).
	Header Kind = iota + 1
	// Bearer is the token of an Authorization: Bearer header.
	Bearer
	// Query is a query parameter's value (query:NAME).
	Query
	// IP is the client address prefix (SourcePrefix of ClientAddr); it always yields.
	IP
)

// Source is one entry of a policy's key: chain. Sources are comparable: two chains
// naming the same header are one source.
type Source struct {
	Kind Kind
	Name string // the header name (canonical) or the query parameter
}

// ParseSource reads a validated key: entry ("header:X-API-Key", "bearer", "query:k",
// "ip"). config.Validate refused every other spelling, so ok is false only for input
// that did not pass it.
func ParseSource(s string) (src Source, ok bool) {
	kind, name, _ := strings.Cut(s, ":")
	switch kind {
	case "header":
		return Source{Kind: Header, Name: http.CanonicalHeaderKey(name)}, true
	case "bearer":
		return Source{Kind: Bearer}, true
	case "query":
		return Source{Kind: Query, Name: name}, true
	case "ip":
		return Source{Kind: IP}, true
	}
	return Source{}, false
}

// String is the kind as a key: entry spells it.
func (k Kind) String() string {
	switch k {
	case Header:
		return "header"
	case Bearer:
		return "bearer"
	case Query:
		return "query"
	case IP:
		return "ip"
	}
	return "unknown"
}

// String is the source as a key: entry spells it ("header:X-Api-Key", "ip").
func (k Source) String() string {
	if k.Name == "" {
		return k.Kind.String()
	}
	return k.Kind.String() + ":" + k.Name
}

// ErrBadKey is a client key over config.MaxKeyLen bytes or with control characters.
var ErrBadKey = errors.New("the client key is longer than 256 bytes or contains control characters")

// Value returns what the source yields for r, if anything. IP yields nothing here: its
// value is an address, hashed with Hasher.Prefix.
func (k Source) Value(r *http.Request) (string, bool) {
	switch k.Kind {
	case Header:
		v := r.Header[k.Name]
		if len(v) == 0 || v[0] == "" {
			return "", false
		}
		return v[0], true
	case Bearer:
		v := r.Header["Authorization"]
		if len(v) == 0 || len(v[0]) < 7 || !strings.EqualFold(v[0][:7], "bearer ") {
			return "", false
		}
		tok := strings.TrimSpace(v[0][7:])
		return tok, tok != ""
	case Query:
		if r.URL.RawQuery == "" {
			return "", false
		}
		v := r.URL.Query().Get(k.Name)
		return v, v != ""
	}
	return "", false
}
