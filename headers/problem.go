package headers

import (
	"net/http"
	"strconv"
	"unicode/utf8"
)

// ProblemContentType is the media type of RFC 9457 problem documents.
const ProblemContentType = "application/problem+json"

// Problem types defined by draft-ietf-httpapi-ratelimit-headers-11.
const (
	QuotaExceededType             = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	TemporaryReducedCapacityType  = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
	quotaExceededTitle            = "Too Many Requests"
	temporaryReducedCapacityTitle = "Service Unavailable"
)

// AppendQuotaExceeded appends the problem document of a 429 refused by policy to dst:
// `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
// "title":"Too Many Requests","status":429,"detail":"…","violated-policies":["burst"]}`.
// detail is omitted when empty; violated-policies (the names of the denying policies) is
// always present, [] when violated is empty.
func AppendQuotaExceeded(dst []byte, detail string, violated []string) []byte {
	return appendRateProblem(dst, QuotaExceededType, quotaExceededTitle, http.StatusTooManyRequests, detail, violated)
}

// AppendTemporaryReducedCapacity appends the problem document of a 503 sent because the
// server lowered quota under load, shaped like AppendQuotaExceeded's with type
// "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity" and title
// "Service Unavailable".
func AppendTemporaryReducedCapacity(dst []byte, detail string, violated []string) []byte {
	return appendRateProblem(dst, TemporaryReducedCapacityType, temporaryReducedCapacityTitle, http.StatusServiceUnavailable, detail, violated)
}

func appendRateProblem(dst []byte, typ, title string, status int, detail string, violated []string) []byte {
	dst = appendProblemHead(dst, typ, title, status, detail)
	dst = append(dst, `,"violated-policies":[`...)
	for i, v := range violated {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, v)
	}
	return append(dst, "]}"...)
}

// AppendProblem appends a problem document with the members type, title, status and
// detail to dst, for the server's other errors (400, 502, 504, …). An empty typ is written
// as "about:blank", an empty title as the status's reason phrase (http.StatusText), and an
// empty detail is omitted.
func AppendProblem(dst []byte, typ, title string, status int, detail string) []byte {
	return append(appendProblemHead(dst, typ, title, status, detail), '}')
}

func appendProblemHead(dst []byte, typ, title string, status int, detail string) []byte {
	if typ == "" {
		typ = "about:blank"
	}
	if title == "" {
		title = http.StatusText(status)
	}
	dst = append(dst, `{"type":`...)
	dst = appendJSONString(dst, typ)
	dst = append(dst, `,"title":`...)
	dst = appendJSONString(dst, title)
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(status), 10)
	if detail != "" {
		dst = append(dst, `,"detail":`...)
		dst = appendJSONString(dst, detail)
	}
	return dst
}

// appendJSONString appends s as a JSON string exactly as encoding/json.Marshal writes it
// (HTML-safe): <, > and & are escaped so a document shown by a browser cannot become
// markup, invalid UTF-8 becomes U+FFFD (written as the character since Go 1.27, whose
// encoding/json does so), and U+2028/U+2029 are escaped.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\uFFFD"...) // as Go 1.27's encoding/json: the character, not an escape
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
