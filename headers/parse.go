package headers

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrMalformedField is returned (wrapped, with the byte offset) by the parsers when a field
// is not a valid RFC 9651 List. Clients must then ignore the whole field.
var ErrMalformedField = errors.New("headers: malformed structured field list")

// PolicyItem is one well-formed item of a RateLimit-Policy field.
type PolicyItem struct {
	Name   string // the item's String value
	Quota  int64  // q
	Window int64  // w in seconds; 0 if absent (w is always positive when present)
	// Unit is qu: UnitRequests when absent; a String the draft does not define is kept
	// as given.
	Unit         Unit
	PartitionKey []byte // pk; nil if absent
}

// LimitItem is one well-formed item of a RateLimit field.
type LimitItem struct {
	Name         string // the item's String value
	Remaining    int64  // r
	Reset        int64  // t in seconds, valid if HasReset
	HasReset     bool
	PartitionKey []byte // pk; nil if absent
}

// ParsePolicyField parses the RateLimit-Policy field lines in values (as from
// http.Header.Values). Lines are joined with ", " and parsed as one RFC 9651 List; if that
// fails, it returns no items and an error wrapping ErrMalformedField. Otherwise it returns
// the well-formed items in order and skips the others, as the draft requires: a value that
// is not a String (or is an Inner List), a missing q or one that is not a non-negative
// Integer, a w that is not a positive Integer, a qu that is not a String, or a pk that is
// not a Byte Sequence. Unknown parameters are ignored; a repeated parameter counts with its
// last value (RFC 9651). No field or an empty List gives nil, nil.
func ParsePolicyField(values []string) ([]PolicyItem, error) {
	var out []PolicyItem
	p := newParser(values)
	for p.next() {
		var it PolicyItem
		q, ok := p.param(paramQ)
		if !ok || q.kind != kindInteger || q.i < 0 {
			continue
		}
		it.Quota = q.i
		if w, ok := p.param(paramW); ok {
			if w.kind != kindInteger || w.i <= 0 {
				continue
			}
			it.Window = w.i
		}
		it.Unit = UnitRequests
		if qu, ok := p.param(paramQU); ok {
			if qu.kind != kindString {
				continue
			}
			it.Unit = Unit(qu.text())
		}
		if pk, ok := p.param(paramPK); ok {
			if pk.kind != kindBytes {
				continue
			}
			it.PartitionKey = pk.bytes()
		}
		it.Name = p.value.text()
		if out == nil {
			out = make([]PolicyItem, 0, p.capHint())
		}
		out = append(out, it)
	}
	if p.err != nil {
		return nil, p.err
	}
	return out, nil
}

// ParseLimitField parses the RateLimit field lines in values like ParsePolicyField, skipping
// items whose value is not a String, whose r is missing or not a non-negative Integer, whose
// t is not a non-negative Integer, or whose pk is not a Byte Sequence.
func ParseLimitField(values []string) ([]LimitItem, error) {
	var out []LimitItem
	p := newParser(values)
	for p.next() {
		var it LimitItem
		r, ok := p.param(paramR)
		if !ok || r.kind != kindInteger || r.i < 0 {
			continue
		}
		it.Remaining = r.i
		if t, ok := p.param(paramT); ok {
			if t.kind != kindInteger || t.i < 0 {
				continue
			}
			it.Reset, it.HasReset = t.i, true
		}
		if pk, ok := p.param(paramPK); ok {
			if pk.kind != kindBytes {
				continue
			}
			it.PartitionKey = pk.bytes()
		}
		it.Name = p.value.text()
		if out == nil {
			out = make([]LimitItem, 0, p.capHint())
		}
		out = append(out, it)
	}
	if p.err != nil {
		return nil, p.err
	}
	return out, nil
}

type bareKind uint8

const (
	kindInteger bareKind = iota
	kindDecimal
	kindString
	kindToken
	kindBytes
	kindBoolean
	kindDate
	kindDisplayString
)

// bare is a parsed bare item. Strings and byte sequences keep their raw text and are
// decoded only when asked for, so values nobody reads cost nothing.
type bare struct {
	kind    bareKind
	escaped bool   // kindString: raw contains backslash escapes
	i       int64  // kindInteger, kindDate, kindBoolean (0 or 1)
	raw     string // kindString: between the quotes; kindBytes: the base64 text
}

// text returns a String's value.
func (b bare) text() string {
	if !b.escaped {
		return b.raw
	}
	buf := make([]byte, 0, len(b.raw))
	for i := 0; i < len(b.raw); i++ {
		if b.raw[i] == '\\' {
			i++
		}
		buf = append(buf, b.raw[i])
	}
	return string(buf)
}

// bytes returns a Byte Sequence's value (non-nil, possibly empty); raw was validated.
func (b bare) bytes() []byte {
	out, _ := base64.StdEncoding.AppendDecode(make([]byte, 0, base64.StdEncoding.DecodedLen(len(b.raw))), []byte(b.raw))
	return out
}

// The parameters the fields define; all others are comments to skip.
const (
	paramQ = iota
	paramW
	paramQU
	paramPK
	paramR
	paramT
	numParams
)

// paramIndex returns the index of a parameter the fields define, or -1.
func paramIndex(k string) int {
	switch k {
	case "q":
		return paramQ
	case "w":
		return paramW
	case "qu":
		return paramQU
	case "pk":
		return paramPK
	case "r":
		return paramR
	case "t":
		return paramT
	}
	return -1
}

// parser is an RFC 9651 List parser specialised for the rate-limit fields. It accepts
// exactly what github.com/dunglas/httpsfv v1.1.2's UnmarshalList accepts (FuzzParse and
// TestParseAgreesWithHTTPSFV check this), but decodes only what the fields use.
type parser struct {
	s       string
	off     int
	started bool
	err     error // why next returned false, if not the end of the List

	// The current member, valid until the next call of next.
	isItem bool
	value  bare
	params [numParams]bare // the last value of each defined parameter (RFC 9651)
	has    uint8           // bit i set: params[i] is present
}

// newParser returns a parser of the field lines in values, joined with ", " as RFC 9651
// requires (github.com/dunglas/httpsfv joins them the same way).
func newParser(values []string) parser {
	switch len(values) {
	case 0:
		return parser{}
	case 1:
		return parser{s: values[0]}
	}
	return parser{s: strings.Join(values, ", ")}
}

// capHint guesses how many items the List holds, to size the result once.
func (p *parser) capHint() int {
	return min(strings.Count(p.s, ",")+1, 16)
}

// next advances to the next member that is an Item whose value is a String, described by
// p.value and p.param. It returns false at the end of the List or, with p.err set, at a
// syntax error; items seen before an error must then be discarded.
func (p *parser) next() bool {
	for {
		if !p.started {
			p.started = true
			p.skipSP()
			if p.eof() {
				return false
			}
		} else {
			p.skipOWS()
			if p.eof() {
				return false
			}
			if p.s[p.off] != ',' {
				p.err = p.fail()
				return false
			}
			p.off++
			p.skipOWS()
			if p.eof() {
				p.err = p.fail() // trailing comma
				return false
			}
		}
		p.has = 0
		p.isItem = false
		if err := p.member(); err != nil {
			p.err = err
			return false
		}
		if p.isItem && p.value.kind == kindString {
			return true
		}
	}
}

// param returns the value of parameter i of the current item. RFC 9651 keeps the last
// value of a repeated key.
func (p *parser) param(i int) (bare, bool) {
	return p.params[i], p.has&(1<<i) != 0
}

func (p *parser) fail() error {
	return fmt.Errorf("%w at offset %d", ErrMalformedField, p.off)
}

func (p *parser) eof() bool { return p.off >= len(p.s) }

func (p *parser) skipSP() {
	for p.off < len(p.s) && p.s[p.off] == ' ' {
		p.off++
	}
}

func (p *parser) skipOWS() {
	for p.off < len(p.s) && (p.s[p.off] == ' ' || p.s[p.off] == '\t') {
		p.off++
	}
}

func (p *parser) member() error {
	if p.s[p.off] != '(' {
		v, err := p.bareItem()
		if err != nil {
			return err
		}
		p.value, p.isItem = v, true
		return p.parameters(true)
	}
	// Inner List: parsed for validity only; its items' parameters are discarded.
	p.off++
	for !p.eof() {
		p.skipSP()
		if p.eof() {
			return p.fail()
		}
		if p.s[p.off] == ')' {
			p.off++
			return p.parameters(false)
		}
		if _, err := p.bareItem(); err != nil {
			return err
		}
		if err := p.parameters(false); err != nil {
			return err
		}
		if p.eof() || (p.s[p.off] != ')' && p.s[p.off] != ' ') {
			return p.fail()
		}
	}
	return p.fail()
}

// parameters parses a parameter list, recording the defined ones in p.params when keep is
// set.
func (p *parser) parameters(keep bool) error {
	for !p.eof() && p.s[p.off] == ';' {
		p.off++
		p.skipSP()
		k, err := p.key()
		if err != nil {
			return err
		}
		v := bare{kind: kindBoolean, i: 1}
		if !p.eof() && p.s[p.off] == '=' {
			p.off++
			if v, err = p.bareItem(); err != nil {
				return err
			}
		}
		if keep {
			if i := paramIndex(k); i >= 0 {
				p.params[i] = v
				p.has |= 1 << i
			}
		}
	}
	return nil
}

func (p *parser) key() (string, error) {
	if p.eof() {
		return "", p.fail()
	}
	if c := p.s[p.off]; !(c >= 'a' && c <= 'z') && c != '*' {
		return "", p.fail()
	}
	start := p.off
	for p.off++; p.off < len(p.s); p.off++ {
		c := p.s[p.off]
		if !(c >= 'a' && c <= 'z') && !isDigit(c) && c != '_' && c != '-' && c != '.' && c != '*' {
			break
		}
	}
	return p.s[start:p.off], nil
}

func (p *parser) bareItem() (bare, error) {
	if p.eof() {
		return bare{}, p.fail()
	}
	switch c := p.s[p.off]; {
	case c == '"':
		return p.str()
	case c == '?':
		return p.boolean()
	case c == ':':
		return p.byteSeq()
	case c == '-' || isDigit(c):
		return p.number()
	case c == '@':
		p.off++
		v, err := p.number()
		if err != nil || v.kind != kindInteger {
			return bare{}, p.fail()
		}
		v.kind = kindDate
		return v, nil
	case c == '%':
		return p.displayString()
	case c == '*' || isAlpha(c):
		return p.token(), nil
	}
	return bare{}, p.fail()
}

func (p *parser) str() (bare, error) {
	p.off++ // '"'
	start := p.off
	escaped := false
	for p.off < len(p.s) {
		c := p.s[p.off]
		p.off++
		switch {
		case c == '\\':
			if p.eof() || (p.s[p.off] != '"' && p.s[p.off] != '\\') {
				return bare{}, p.fail()
			}
			p.off++
			escaped = true
		case c == '"':
			return bare{kind: kindString, raw: p.s[start : p.off-1], escaped: escaped}, nil
		case c < 0x20 || c > 0x7e:
			return bare{}, p.fail()
		}
	}
	return bare{}, p.fail()
}

func (p *parser) boolean() (bare, error) {
	p.off++ // '?'
	if p.eof() || (p.s[p.off] != '0' && p.s[p.off] != '1') {
		return bare{}, p.fail()
	}
	v := bare{kind: kindBoolean, i: int64(p.s[p.off] - '0')}
	p.off++
	return v, nil
}

func (p *parser) byteSeq() (bare, error) {
	p.off++ // ':'
	start := p.off
	for p.off < len(p.s) {
		c := p.s[p.off]
		if c == ':' {
			raw := p.s[start:p.off]
			// Validate exactly as encoding/base64 (and so httpsfv) decodes: padding
			// required, trailing bits tolerated. Decoding into a stack buffer keeps short
			// sequences free of allocations.
			var tmp [64]byte
			buf := tmp[:0]
			if n := base64.StdEncoding.DecodedLen(len(raw)); n > len(tmp) {
				buf = make([]byte, 0, n)
			}
			if _, err := base64.StdEncoding.AppendDecode(buf, []byte(raw)); err != nil {
				return bare{}, p.fail()
			}
			p.off++
			return bare{kind: kindBytes, raw: raw}, nil
		}
		if !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' && c != '=' {
			return bare{}, p.fail()
		}
		p.off++
	}
	return bare{}, p.fail()
}

// number follows httpsfv's length limits: at most 15 digits for an Integer, 12 before and
// 3 after the point for a Decimal.
func (p *parser) number() (bare, error) {
	if p.eof() {
		return bare{}, p.fail()
	}
	neg := p.s[p.off] == '-'
	if neg {
		p.off++
	}
	if p.eof() || !isDigit(p.s[p.off]) {
		return bare{}, p.fail()
	}
	start := p.off
	dot := -1
	for p.off++; p.off < len(p.s); {
		c := p.s[p.off]
		if isDigit(c) {
			p.off++
			if n := p.off - start; (dot < 0 && n > 15) || n > 16 {
				return bare{}, p.fail()
			}
			continue
		}
		if dot < 0 && c == '.' {
			if p.off-start > 12 {
				return bare{}, p.fail()
			}
			dot = p.off
			p.off++
			continue
		}
		break
	}
	if dot >= 0 {
		if dot == p.off-1 || p.off-dot-1 > 3 {
			return bare{}, p.fail()
		}
		return bare{kind: kindDecimal}, nil
	}
	var v int64
	for i := start; i < p.off; i++ {
		v = v*10 + int64(p.s[i]-'0')
	}
	if neg {
		v = -v
	}
	return bare{kind: kindInteger, i: v}, nil
}

func (p *parser) displayString() (bare, error) {
	if !strings.HasPrefix(p.s[p.off:], `%"`) {
		return bare{}, p.fail()
	}
	p.off += 2
	// The decoded bytes must be UTF-8: check them with a small rolling window instead of
	// materialising the string.
	var pend [utf8.UTFMax]byte
	n := 0
	flush := func(all bool) bool {
		for n > 0 {
			if !all && !utf8.FullRune(pend[:n]) {
				return true
			}
			r, size := utf8.DecodeRune(pend[:n])
			if r == utf8.RuneError && size <= 1 {
				return false
			}
			copy(pend[:], pend[size:n])
			n -= size
		}
		return true
	}
	for p.off < len(p.s) {
		c := p.s[p.off]
		p.off++
		switch {
		case c == '%':
			if len(p.s)-p.off < 2 {
				return bare{}, p.fail()
			}
			hi, ok1 := unhex(p.s[p.off])
			lo, ok2 := unhex(p.s[p.off+1])
			if !ok1 || !ok2 {
				return bare{}, p.fail()
			}
			p.off += 2
			pend[n] = hi<<4 | lo
			n++
			if !flush(false) {
				return bare{}, p.fail()
			}
		case c == '"':
			if !flush(true) {
				return bare{}, p.fail()
			}
			return bare{kind: kindDisplayString}, nil
		case c < 0x20 || c > 0x7e:
			return bare{}, p.fail()
		default:
			pend[n] = c
			n++
			if !flush(false) {
				return bare{}, p.fail()
			}
		}
	}
	return bare{}, p.fail()
}

func (p *parser) token() bare {
	for p.off++; p.off < len(p.s) && isTchar(p.s[p.off]); p.off++ {
	}
	return bare{kind: kindToken}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isAlpha(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

// isTchar reports whether c may follow a Token's first character.
func isTchar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~', ':', '/':
		return true
	}
	return false
}

// unhex decodes a lowercase hex digit, the only case RFC 9651 display strings allow.
func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
