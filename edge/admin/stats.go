package admin

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// statsBody is the body of /api/v1/stats, the dashboard's one poll: cumulative
// counters (the page derives rates) and current state. The counters are read from
// Gatherer, the samples /metrics shows, so the dashboard and a scrape cannot disagree.
type statsBody struct {
	Time time.Time `json:"time"`
	// Requests counts answered requests by protocol: total and by status class, with
	// 429 apart from the other 4xx. The stream budget's prebuilt 429s on HTTP/1.1 and
	// HTTP/2 are answers too: they are in total and 429 here, as in
	// refused_streams_total (not in requests_total). HTTP/3 refusals are stream
	// resets, not 429s: they are in transport.refused_streams only.
	Requests  map[string]map[string]uint64 `json:"requests"`
	Inflight  int64                        `json:"inflight"`
	Decisions []decisionRow                `json:"decisions"`
	Transport transportBody                `json:"transport"`
	Store     storeBody                    `json:"store"`
	Bans      bansBody                     `json:"bans"`
	Top       topBody                      `json:"top"`
}

// decisionRow is one policy's ratelimit_decisions_total.
type decisionRow struct {
	Policy       string `json:"policy"`
	Shadow       bool   `json:"shadow"`
	Allowed      uint64 `json:"allowed"`
	Denied       uint64 `json:"denied"` // shadow_denied for a shadow policy
	Vetoed       uint64 `json:"vetoed"`
	FailedOpen   uint64 `json:"failed_open"`
	FailedClosed uint64 `json:"failed_closed"`
	// Held is the units held now (inflight{policy}), for concurrency policies.
	Held *int64 `json:"held,omitempty"`
}

type transportBody struct {
	DroppedDatagrams   uint64            `json:"dropped_datagrams"`
	RefusedConnections map[string]uint64 `json:"refused_connections"` // by h3, tcp
	RefusedStreams     map[string]uint64 `json:"refused_streams"`     // by h1, h2, h3
	TrackedSources     int               `json:"tracked_sources"`
	OpenConnections    int               `json:"open_connections"`
}

type storeBody struct {
	Kind   string `json:"kind"`  // "local" or "shared"
	State  string `json:"state"` // "ok" or "breaker_open"
	Errors uint64 `json:"errors"`
}

type bansBody struct {
	Available bool   `json:"available"` // false without Bans
	Active    int    `json:"active"`
	Total     uint64 `json:"total"`
	List      []Ban  `json:"list"` // the first 100
}

// sample is one series of a gathered family.
type sample struct {
	labels map[string]string
	value  float64
}

// samples reads the h3edge families of the Gatherer, by name without the prefix.
// What fails to gather is left out, as promhttp's ContinueOnError leaves it out of
// /metrics.
func (h *Handler) samples() map[string][]sample {
	out := map[string][]sample{}
	if h.Gatherer == nil {
		return out
	}
	fams, _ := h.Gatherer.Gather()
	for _, f := range fams {
		name, ok := strings.CutPrefix(f.GetName(), "h3edge_")
		if !ok {
			continue
		}
		for _, m := range f.Metric {
			s := sample{labels: map[string]string{}}
			for _, l := range m.Label {
				s.labels[l.GetName()] = l.GetValue()
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				s.value = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				s.value = m.GetGauge().GetValue()
			default:
				continue
			}
			out[name] = append(out[name], s)
		}
	}
	return out
}

// first is the value of name's series whose labels include want; 0 if none.
func first(ss map[string][]sample, name string, want ...string) float64 {
	for _, s := range ss[name] {
		ok := true
		for i := 0; i+1 < len(want); i += 2 {
			ok = ok && s.labels[want[i]] == want[i+1]
		}
		if ok {
			return s.value
		}
	}
	return 0
}

// stats answers everything the dashboard shows, in one document.
func (h *Handler) stats(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	ss := h.samples()
	b := statsBody{Time: now, Requests: map[string]map[string]uint64{},
		Inflight: int64(first(ss, "inflight", "policy", "")), Decisions: h.decisions(ss), Top: h.Top.rows(10)}
	for _, p := range []string{"h1", "h2", "h3"} {
		b.Requests[p] = map[string]uint64{"total": 0, "2xx": 0, "3xx": 0, "4xx": 0, "429": 0, "5xx": 0}
	}
	for _, s := range ss["requests_total"] {
		c := b.Requests[s.labels["proto"]]
		code, _ := strconv.Atoi(s.labels["code"])
		if c == nil || code < 100 || code > 599 {
			continue
		}
		v := uint64(s.value)
		c["total"] += v
		switch {
		case code == http.StatusTooManyRequests:
			c["429"] += v
		case code >= 200:
			c[strconv.Itoa(code/100)+"xx"] += v
		}
	}
	t := transportBody{DroppedDatagrams: uint64(first(ss, "dropped_datagrams_total", "reason", "banned")),
		TrackedSources: int(first(ss, "tracked_sources")), RefusedConnections: map[string]uint64{}, RefusedStreams: map[string]uint64{}}
	if h.Connections != nil {
		t.OpenConnections = h.Connections()
	}
	for _, s := range ss["refused_connections_total"] {
		t.RefusedConnections[s.labels["proto"]] += uint64(s.value)
	}
	for _, s := range ss["refused_streams_total"] {
		p, v := s.labels["proto"], uint64(s.value)
		t.RefusedStreams[p] += v
		if c := b.Requests[p]; c != nil && p != "h3" {
			c["total"] += v
			c["429"] += v
		}
	}
	b.Transport = t
	b.Store = storeBody{Kind: "shared", State: "ok", Errors: uint64(first(ss, "store_errors_total"))}
	if h.readiness().Store == "local" {
		b.Store.Kind = "local"
	}
	if first(ss, "store_breaker_open") == 1 {
		b.Store.State = "breaker_open"
	}
	b.Bans = bansBody{Active: int(first(ss, "bans_active")), Total: uint64(first(ss, "bans_total")), List: []Ban{}}
	if h.Bans != nil {
		b.Bans.Available = true
		list := h.Bans.List(now)
		b.Bans.List = list[:min(len(list), 100)]
	}
	WriteJSON(w, http.StatusOK, b)
}

// decisions reads ratelimit_decisions_total and the held units by policy, in the
// configuration's order of policies.
func (h *Handler) decisions(ss map[string][]sample) []decisionRow {
	rows := map[string]*decisionRow{}
	for _, s := range ss["ratelimit_decisions_total"] {
		name := s.labels["policy"]
		d := rows[name]
		if d == nil {
			d = &decisionRow{Policy: name}
			rows[name] = d
		}
		v := uint64(s.value)
		switch s.labels["result"] {
		case "allowed":
			d.Allowed = v
		case "denied":
			d.Denied = v
		case "shadow_denied":
			d.Denied, d.Shadow = v, true
		case "vetoed":
			d.Vetoed = v
		case "failed_open":
			d.FailedOpen = v
		case "failed_closed":
			d.FailedClosed = v
		}
	}
	for _, s := range ss["inflight"] {
		if d := rows[s.labels["policy"]]; d != nil {
			n := int64(s.value)
			d.Held = &n
		}
	}
	out := []decisionRow{}
	for _, p := range h.Config().Policies {
		if d := rows[p.Name]; d != nil {
			out = append(out, *d)
			delete(rows, p.Name)
		}
	}
	rest := make([]decisionRow, 0, len(rows))
	for _, d := range rows {
		rest = append(rest, *d)
	}
	slices.SortFunc(rest, func(a, b decisionRow) int { return strings.Compare(a.Policy, b.Policy) })
	return append(out, rest...)
}
