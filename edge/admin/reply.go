package admin

import (
	"encoding/json"
	"net/http"
	"strings"
)

// problem is an RFC 9457 problem document, with the list of errors of a refused
// reload.
type problem struct {
	Type   string   `json:"type"`
	Title  string   `json:"title"`
	Status int      `json:"status"`
	Detail string   `json:"detail,omitempty"`
	Errors []string `json:"errors,omitempty"`
}

// writeProblem answers with a problem document; errs lists a refused reload's
// problems.
func writeProblem(w http.ResponseWriter, status int, detail string, errs []string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(problem{Type: "about:blank", Title: http.StatusText(status), Status: status,
		Detail: detail, Errors: errs})
}

// WriteJSON answers v as indented JSON, as the API's own endpoints do; for Extra
// endpoints.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// errorLines flattens an error into one line per problem: the members of joined
// errors (a config.ValidationError's FieldErrors among them), else the lines of its
// message.
func errorLines(err error) []string {
	var out []string
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		for line := range strings.SplitSeq(err.Error(), "\n") {
			if line != "" {
				out = append(out, line)
			}
		}
	}
	walk(err)
	return out
}
