package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/netip"
	"time"

	"github.com/h3edge/h3edge/edge/config"
)

// Ban is one entry of the penalty box as the admin API shows it.
type Ban struct {
	// Prefix is the banned source prefix (per ip.ipv4_prefix / ip.ipv6_prefix).
	Prefix netip.Prefix `json:"prefix"`
	// Since and Until bound the ban.
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until"`
	// Reason is "abuse" (rejections over abuse.rejections) or "manual" (the admin
	// API), or the reason given when banned through the API.
	Reason string `json:"reason"`
	// Strikes counts the source's bans in a row; each doubles the ban's length.
	Strikes int `json:"strikes,omitempty"`
}

// BanList is the penalty box as the admin API uses it. Its methods are called
// concurrently.
type BanList interface {
	// List returns the bans in force at now.
	List(now time.Time) []Ban
	// Add bans p from now for d; banning a banned prefix replaces its ban.
	Add(ctx context.Context, p netip.Prefix, now time.Time, d time.Duration, reason string) (Ban, error)
	// Lift ends p's ban at once, reporting whether there was one.
	Lift(ctx context.Context, p netip.Prefix) (bool, error)
}

// banRequest is the body of POST /api/v1/bans.
type banRequest struct {
	// Prefix is a prefix such as "203.0.113.0/24", or one address (its /32 or /128).
	Prefix string `json:"prefix"`
	// Duration is a Go duration such as "10m", at most 720h. If empty, abuse.ban.
	Duration string `json:"duration"`
	// Reason is shown in the ban list. If empty, "manual".
	Reason string `json:"reason"`
}

// maxBan bounds a ban set through the API, like abuse.max_ban.
const maxBan = 720 * time.Hour

// banList returns Bans, or answers 501 and returns nil when there is none.
func (h *Handler) banList(w http.ResponseWriter) BanList {
	if h.Bans == nil {
		writeProblem(w, http.StatusNotImplemented, "this admin API has no penalty box", nil)
	}
	return h.Bans
}

// banListBody is the body of GET /api/v1/bans.
type banListBody struct {
	Bans []Ban `json:"bans"`
}

// listBans answers the bans in force.
func (h *Handler) listBans(w http.ResponseWriter, r *http.Request) {
	bl := h.banList(w)
	if bl == nil {
		return
	}
	bans := bl.List(time.Now())
	if bans == nil {
		bans = []Ban{}
	}
	WriteJSON(w, http.StatusOK, banListBody{Bans: bans})
}

// addBan bans a prefix: 201 with the ban.
func (h *Handler) addBan(w http.ResponseWriter, r *http.Request) {
	bl := h.banList(w)
	if bl == nil {
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		writeProblem(w, http.StatusUnsupportedMediaType, "send the ban as application/json", nil)
		return
	}
	var req banRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeProblem(w, http.StatusBadRequest, "reading the ban: "+err.Error(), nil)
		return
	}
	p, ok := config.ParsePrefix(req.Prefix)
	if !ok {
		writeProblem(w, http.StatusBadRequest, fmt.Sprintf("prefix: want an address or a CIDR prefix such as 203.0.113.0/24 (got %q)", req.Prefix), nil)
		return
	}
	d := h.Config().Abuse.Ban
	if req.Duration != "" {
		var err error
		if d, err = time.ParseDuration(req.Duration); err != nil || d <= 0 || d > maxBan {
			writeProblem(w, http.StatusBadRequest, fmt.Sprintf("duration: want a duration such as 10m, more than 0 and at most 720h (got %q)", req.Duration), nil)
			return
		}
	}
	reason := req.Reason
	if reason == "" {
		reason = "manual"
	}
	if len(reason) > 200 || !config.ValidKey(reason) {
		writeProblem(w, http.StatusBadRequest, "reason: at most 200 bytes, no control characters", nil)
		return
	}
	b, err := bl.Add(r.Context(), p, time.Now(), d, reason)
	if err != nil {
		writeProblem(w, http.StatusServiceUnavailable, "banning failed: "+err.Error(), nil)
		return
	}
	h.logger().Info("admin: ban", "prefix", p, "until", b.Until, "reason", reason)
	w.Header().Set("Location", "/api/v1/bans/"+p.String())
	WriteJSON(w, http.StatusCreated, b)
}

// liftBan ends a ban: 204, or 404 when the prefix is not banned. The prefix is the rest
// of the path (203.0.113.0/24, its slash escaped or not, or one address).
func (h *Handler) liftBan(w http.ResponseWriter, r *http.Request) {
	bl := h.banList(w)
	if bl == nil {
		return
	}
	raw := r.PathValue("prefix")
	p, ok := config.ParsePrefix(raw)
	if !ok {
		writeProblem(w, http.StatusBadRequest, fmt.Sprintf("want an address or a CIDR prefix such as 203.0.113.0/24 (got %q)", raw), nil)
		return
	}
	found, err := bl.Lift(r.Context(), p)
	switch {
	case err != nil:
		writeProblem(w, http.StatusServiceUnavailable, "lifting the ban failed: "+err.Error(), nil)
	case !found:
		writeProblem(w, http.StatusNotFound, p.String()+" is not banned", nil)
	default:
		h.logger().Info("admin: ban lifted", "prefix", p)
		w.WriteHeader(http.StatusNoContent)
	}
}
