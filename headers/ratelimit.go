// Package headers builds the response fields h3edge speaks about rate limits:
// RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers-11, Structured Field
// Lists per RFC 9651), Retry-After, the legacy X-RateLimit-* trio, and the RFC 9457 problem
// documents sent with 429, 503 and other error responses.
//
// It appends to caller-owned byte slices and allocates nothing on the hot path;
// RateLimit-Policy is stable per policy set, so it is built once (PolicyField) and cached by
// the caller. The fields are written by hand rather than through
// github.com/dunglas/httpsfv, for speed, and fuzzed against it: each must equal what
// httpsfv.Marshal writes and read back through httpsfv.UnmarshalList. A client that needs to
// read them parses them with httpsfv (h3edge's bench does); this package has no parser.
//
// All functions are safe for concurrent use and keep no references to their arguments.
package headers

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Field names, in canonical form so they can index an http.Header directly.
const (
	PolicyFieldName     = "Ratelimit-Policy"
	LimitFieldName      = "Ratelimit"
	RetryAfterFieldName = "Retry-After"
)

// The same names in lower case, as HTTP/2 and HTTP/3 put every field name on the wire.
// A server that sets them under these keys spares quic-go and net/http's HTTP/2 a
// lower-casing (an allocation each) per response; HTTP/1.1 writes keys as they are,
// so it keeps the canonical ones.
const (
	PolicyFieldNameLower = "ratelimit-policy"
	LimitFieldNameLower  = "ratelimit"
)

// Unit is what a policy counts (the qu parameter).
type Unit string

// The units defined by the draft. The empty Unit means UnitRequests.
const (
	UnitRequests           Unit = "requests"
	UnitContentBytes       Unit = "content-bytes"
	UnitConcurrentRequests Unit = "concurrent-requests"
)

// maxInteger is the largest magnitude of an RFC 9651 Integer.
const maxInteger = 999_999_999_999_999

// ErrInvalidPolicy is returned (wrapped) by PolicyField for a policy that cannot be described.
var ErrInvalidPolicy = errors.New("headers: invalid policy")

// Policy describes one quota policy for the RateLimit-Policy field.
type Policy struct {
	// Name is the item's value. It must be a non-empty RFC 9651 String: printable
	// ASCII (0x20–0x7E) only, and unique within a policy set.
	Name string
	// Quota is q, the units allowed per Window: 0 to 999,999,999,999,999.
	Quota int64
	// Window is w. It is sent in whole seconds, rounded up so that q/w never overstates
	// the allowed rate; if zero (concurrency policies), w is omitted.
	Window time.Duration
	// Unit is qu. If empty or UnitRequests, qu is omitted (requests is the default).
	Unit Unit
}

// PolicyField returns the RateLimit-Policy value describing ps, for example
// `"burst";q=100;w=60, "daily";q=1000;w=86400`. Items follow the order of ps; an empty ps
// gives "" (send no field). The value depends on ps alone, so callers compute it once per
// policy set. The error wraps ErrInvalidPolicy and names the offending policy.
func PolicyField(ps []Policy) (string, error) {
	n := 0
	for _, p := range ps {
		n += len(p.Name) + len(`"";q=999999999999999;qu="concurrent-requests";w=9223372037, `)
	}
	b := make([]byte, 0, n)
	for i, p := range ps {
		if err := p.validate(); err != nil {
			return "", fmt.Errorf("%w %d (%q): %v", ErrInvalidPolicy, i, p.Name, err)
		}
		for _, q := range ps[:i] {
			if q.Name == p.Name {
				return "", fmt.Errorf("%w %d (%q): duplicate name", ErrInvalidPolicy, i, p.Name)
			}
		}
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendString(b, p.Name)
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, p.Quota, 10)
		if p.Unit != "" && p.Unit != UnitRequests {
			b = append(b, ";qu="...)
			b = appendString(b, string(p.Unit))
		}
		if p.Window > 0 {
			b = append(b, ";w="...)
			b = strconv.AppendInt(b, ceilSeconds(p.Window), 10)
		}
	}
	return string(b), nil
}

func (p Policy) validate() error {
	switch {
	case p.Name == "":
		return errors.New("empty name")
	case !validString(p.Name):
		return errors.New("name is not a structured-field String (printable ASCII only)")
	case p.Quota < 0 || p.Quota > maxInteger:
		return fmt.Errorf("quota %d out of range [0, %d]", p.Quota, int64(maxInteger))
	case p.Window < 0:
		return fmt.Errorf("negative window %v", p.Window)
	}
	switch p.Unit {
	case "", UnitRequests, UnitContentBytes, UnitConcurrentRequests:
		return nil
	}
	return fmt.Errorf("unknown unit %q", p.Unit)
}

// Limit is one policy's state after a decision, for the RateLimit field.
type Limit struct {
	// Name is the policy name, as given to PolicyField (which validates it).
	Name string
	// Remaining is r, the units still available; negative values are sent as 0 and
	// values above 999,999,999,999,999 as that maximum.
	Remaining int64
	// Reset is the time until Remaining next rises, sent as t in whole seconds rounded
	// up (1ns gives 1, zero or negative gives 0).
	Reset time.Duration
	// Concurrency marks a concurrency policy: its units come back when requests end,
	// not at a time, so t is omitted.
	Concurrency bool
	// PartitionKey, if non-nil, is sent as pk (a Byte Sequence). h3edge passes the first
	// 8 bytes of the client key's hash, never the key.
	PartitionKey []byte
}

// AppendLimitField appends the RateLimit value for ls to dst and returns the extended
// slice, for example `"burst";r=42;t=17, "daily";r=913;t=80211`. Parameters come in the
// order r, t, pk. It allocates only if dst lacks capacity.
//
// Names are expected to be valid (PolicyField rejects the others): `"` and `\` are escaped
// as RFC 9651 requires, and any byte outside printable ASCII is written as '?' so the
// field stays well-formed and can never carry CR or LF.
func AppendLimitField(dst []byte, ls []Limit) []byte {
	var pk []byte // the previous item's encoded pk
	for i := range ls {
		l := &ls[i]
		if i > 0 {
			dst = append(dst, ", "...)
		}
		dst = appendString(dst, l.Name)
		dst = append(dst, ";r="...)
		dst = strconv.AppendInt(dst, min(max(l.Remaining, 0), maxInteger), 10)
		if !l.Concurrency {
			dst = append(dst, ";t="...)
			dst = strconv.AppendInt(dst, ceilSeconds(l.Reset), 10)
		}
		if l.PartitionKey != nil {
			dst = append(dst, ";pk=:"...)
			if i > 0 && pk != nil && bytes.Equal(l.PartitionKey, ls[i-1].PartitionKey) {
				// Policies of one client key share it: copy its encoding.
				dst = append(dst, pk...)
			} else {
				n := len(dst)
				dst = base64.StdEncoding.AppendEncode(dst, l.PartitionKey)
				pk = dst[n:]
			}
			dst = append(dst, ':')
		} else {
			pk = nil
		}
	}
	return dst
}

// ceilSeconds converts d to whole seconds rounded up; zero or negative gives 0.
// A time.Duration holds at most ~9.2e9 s, well inside the Integer range.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// validString reports whether s can be an RFC 9651 String: printable ASCII only.
func validString(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// appendString appends s as an RFC 9651 String. Bytes a String cannot hold become '?'.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	// Fast path: most names need no escaping at all.
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			plain = false
			break
		}
	}
	if plain {
		dst = append(dst, s...)
		return append(dst, '"')
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20 || c > 0x7e:
			dst = append(dst, '?')
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
