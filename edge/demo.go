package edge

import (
	"net/http"
	"net/netip"

	"github.com/h3edge/h3edge/edge/answer"
	"github.com/h3edge/h3edge/edge/demo"
	"github.com/h3edge/h3edge/edge/enforce"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/edge/slowbody"
)

// demoOrigin is the built-in origin used when no upstream is configured (package demo),
// reporting the client address the edge believes and answering its errors with the
// edge's problem documents.
func demoOrigin(trusted []netip.Prefix) http.Handler {
	badRequest := func(w http.ResponseWriter, r *http.Request, detail string) {
		answer.Problem(w, r, http.StatusBadRequest, "Bad Request", detail)
	}
	return demo.New(demo.Config{
		ClientAddr: func(r *http.Request) string { return identity.ClientAddr(r, trusted).String() },
		BadRequest: badRequest,
		BodyFailed: func(w http.ResponseWriter, r *http.Request, _ error) {
			if enforce.BodyCutOff(r) {
				enforce.AnswerBodyCutOff(w, r)
			} else if slowbody.TimedOut(r) {
				writeBodyTimeout(w, r)
			} else {
				badRequest(w, r, "reading the request body failed")
			}
		},
	})
}
