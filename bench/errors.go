package bench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// ErrorKind names a class of failed request in Result.Errors.
type ErrorKind string

// The error kinds, in the order reports list them.
const (
	// ErrRefused: the server refused the connection (QUIC CONNECTION_REFUSED,
	// TCP ECONNREFUSED).
	ErrRefused ErrorKind = "refused"
	// ErrReset: the request or its connection was torn down by the peer (QUIC stream
	// reset such as H3_REQUEST_REJECTED, connection closed by the application, TCP reset
	// or early EOF, HTTP/2 RST_STREAM or GOAWAY).
	ErrReset ErrorKind = "reset"
	// ErrTimeout: the request's deadline (Config.Timeout) or a transport timeout passed.
	ErrTimeout ErrorKind = "timeout"
	// ErrTLS: certificate verification, pin mismatch or another TLS handshake failure.
	ErrTLS ErrorKind = "tls"
	// ErrOther: anything else.
	ErrOther ErrorKind = "other"
)

// ErrorKinds lists every kind, in report order.
var ErrorKinds = []ErrorKind{ErrRefused, ErrReset, ErrTimeout, ErrTLS, ErrOther}

func (k ErrorKind) index() int {
	switch k {
	case ErrRefused:
		return 0
	case ErrReset:
		return 1
	case ErrTimeout:
		return 2
	case ErrTLS:
		return 3
	}
	return 4
}

// h2StreamError mirrors net/http's bundled HTTP/2 StreamError, which converts itself
// into any struct of this shape through errors.As (net/http/h2_error.go). It saves a
// dependency on golang.org/x/net/http2 just to name the type.
type h2StreamError struct {
	StreamID uint32
	Code     uint32
	Cause    error
}

func (e h2StreamError) Error() string {
	return fmt.Sprintf("http2 stream %d reset (code %#x)", e.StreamID, e.Code)
}

// Classify sorts a request error into an ErrorKind. A nil error has no kind ("").
// TLS failures are checked first, then refusals, timeouts and resets.
func Classify(err error) ErrorKind {
	switch {
	case err == nil:
		return ""
	case isTLS(err):
		return ErrTLS
	case isRefused(err):
		return ErrRefused
	case isTimeout(err):
		return ErrTimeout
	case isReset(err):
		return ErrReset
	}
	return ErrOther
}

func isTLS(err error) bool {
	if errors.Is(err, ErrPinMismatch) {
		return true
	}
	if te, ok := errors.AsType[*quic.TransportError](err); ok && te.ErrorCode.IsCryptoError() {
		return true
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.CertificateInvalidError](err); ok {
		return true
	}
	if _, ok := errors.AsType[tls.AlertError](err); ok {
		return true
	}
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return true
	}
	// net/http reports a plain-HTTP answer to a TLS hello with an unwrapped string.
	return strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")
}

func isRefused(err error) bool {
	if te, ok := errors.AsType[*quic.TransportError](err); ok && te.ErrorCode == quic.ConnectionRefused {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return true
	}
	return false
}

func isReset(err error) bool {
	if _, ok := errors.AsType[*quic.StreamError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*http3.Error](err); ok {
		return true
	}
	if _, ok := errors.AsType[*quic.ApplicationError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*quic.StatelessResetError](err); ok {
		return true
	}
	if _, ok := errors.AsType[h2StreamError](err); ok {
		return true
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	// net/http's HTTP/2 transport reports GOAWAY and lost connections with plain strings.
	msg := err.Error()
	return strings.Contains(msg, "GOAWAY") || strings.Contains(msg, "connection lost") ||
		strings.Contains(msg, "connection reset")
}
