package admin

import "net/http"

// Readiness is the body of /readyz. The edge's Ready hook fills Listeners and Store;
// the handler sets Status from them.
type Readiness struct {
	// Status is "ready", "degraded" (serving, but the store's breaker is open and
	// decisions follow on_store_failure, or a tls.acme domain has no certificate) or
	// "not_ready" (503).
	Status string `json:"status"`
	// Listeners is "up", "down" (not bound yet) or "shutting_down".
	Listeners string `json:"listeners"`
	// Store is "local" (quota in memory), "ok" (Redis answers) or "breaker_open".
	Store string `json:"store"`
	// Certificates is, with tls.acme, "ok" or "missing" (degraded: a domain has no
	// valid certificate; GET /api/v1/certificates names it); absent without.
	Certificates string `json:"certificates,omitempty"`
}

// readiness asks the Ready hook and derives the status.
func (h *Handler) readiness() Readiness {
	rd := Readiness{Listeners: "up", Store: "local"}
	if h.Ready != nil {
		rd = h.Ready()
	}
	switch {
	case rd.Listeners != "up":
		rd.Status = "not_ready"
	case rd.Store == "breaker_open", rd.Certificates == "missing":
		rd.Status = "degraded"
	default:
		rd.Status = "ready"
	}
	return rd
}

// healthz answers while the process runs.
func healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}

// readyz answers 200 while the public sockets are bound and the server is not shutting
// down, so a load balancer stops sending traffic as soon as draining begins.
func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	rd := h.readiness()
	status := http.StatusOK
	if rd.Status == "not_ready" {
		status = http.StatusServiceUnavailable
	}
	WriteJSON(w, status, rd)
}
