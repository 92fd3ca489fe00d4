package admin

import (
	"net/http"

	"go.yaml.in/yaml/v3"
)

// config answers the effective configuration with its secrets redacted, keyed as in
// the configuration file: JSON, or YAML with ?format=yaml.
func (h *Handler) config(w http.ResponseWriter, r *http.Request) {
	doc, err := yaml.Marshal(h.Config().Redacted())
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, err.Error(), nil)
		return
	}
	if r.URL.Query().Get("format") == "yaml" {
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(doc)
		return
	}
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		writeProblem(w, http.StatusInternalServerError, err.Error(), nil)
		return
	}
	WriteJSON(w, http.StatusOK, v)
}

// reloadSummary is the body of a successful POST /api/v1/reload.
type reloadSummary struct {
	Status   string   `json:"status"` // "reloaded"
	File     string   `json:"file"`
	Policies []string `json:"policies"`
}

// reload applies the configuration file anew: 200 with a summary of what is in force
// now, or 422 with every problem when the new configuration is refused and the running
// one stays.
func (h *Handler) reload(w http.ResponseWriter, r *http.Request) {
	if h.Reload == nil {
		writeProblem(w, http.StatusNotImplemented, "this admin API cannot reload", nil)
		return
	}
	if err := h.Reload(); err != nil {
		writeProblem(w, http.StatusUnprocessableEntity,
			"the new configuration was refused; the running one is unchanged", errorLines(err))
		return
	}
	cfg := h.Config()
	sum := reloadSummary{Status: "reloaded", File: cfg.File, Policies: []string{}}
	for _, p := range cfg.Policies {
		sum.Policies = append(sum.Policies, p.Name)
	}
	WriteJSON(w, http.StatusOK, sum)
}
