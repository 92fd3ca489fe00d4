package metrics

import (
	"errors"
	"strconv"

	"github.com/h3edge/h3edge/edge/admission"
	"github.com/h3edge/h3edge/quicconn"
)

// Namespace prefixes every metric name of the edge: h3edge_<name>.
const Namespace = "h3edge"

// Proto is a request's protocol, as the proto label spells it.
type Proto int

// The request protocols.
const (
	H1 Proto = iota
	H2
	H3
	numProtos
)

var protoNames = [numProtos]string{"h1", "h2", "h3"}

// String is the proto label's value.
func (p Proto) String() string { return protoNames[p] }

// ProtoOf maps a request's ProtoMajor to its protocol.
func ProtoOf(major int) Proto {
	switch major {
	case 3:
		return H3
	case 2:
		return H2
	}
	return H1
}

// Status codes counted without a lookup: 100 to 599. Others (net/http allows up to
// 999) take a mutex.
const (
	minCode  = 100
	maxCode  = 599
	numCodes = maxCode - minCode + 1
)

var codeNames = func() (n [numCodes]string) {
	for i := range n {
		n[i] = strconv.Itoa(minCode + i)
	}
	return n
}()

// Reason is why a connection or a stream was refused (the reason label).
type Reason int

// The reasons of refused_connections_total and refused_streams_total.
const (
	Banned   Reason = iota // the source is in the penalty box
	Rate                   // over the source's connection or stream budget
	MaxConns               // the source holds max_connections already
	Other                  // any other refusal
	Capped                 // shed by limits.max_connections or max_pending_connections (TCP)
	Overload               // shed while the edge is overloaded (limits.max_goroutines, memory)
	numReasons
)

var reasonNames = [numReasons]string{"banned", "rate", "max_connections", "other", "capped", "overload"}

// String is the reason label's value.
func (r Reason) String() string { return reasonNames[r] }

// reasonOf classifies an error of quicconn.Guard's ConnContext.
func reasonOf(err error) Reason {
	switch {
	case errors.Is(err, quicconn.ErrBanned):
		return Banned
	case errors.Is(err, quicconn.ErrRate):
		return Rate
	case errors.Is(err, quicconn.ErrMaxConns):
		return MaxConns
	case errors.Is(err, admission.ErrOverload):
		return Overload
	}
	return Other
}

// Results of ratelimit_decisions_total.
const (
	resultAllowed      = "allowed"       // admitted and charged
	resultDenied       = "denied"        // this enforced policy denied the request
	resultShadowDenied = "shadow_denied" // this shadow policy would have denied it
	resultVetoed       = "vetoed"        // this policy admitted it, another denied it: not charged
	resultFailedOpen   = "failed_open"   // the store failed; admitted by on_store_failure
	resultFailedClosed = "failed_closed" // the store failed; denied by on_store_failure
)
