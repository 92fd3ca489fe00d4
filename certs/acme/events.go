package acme

import (
	"context"
	"sync"
	"time"
)

// outages tells certmagic's events to the operator: a failure to obtain or renew a
// certificate is logged at Error once per outage of a domain (later attempts at
// Debug, with their count), its end once at Info; every failure is counted.
type outages struct {
	m *Manager

	mu       sync.Mutex
	failures map[string]int // domain → failed attempts since its last success
}

// onEvent is certmagic.Config.OnEvent. It never refuses an event.
func (o *outages) onEvent(_ context.Context, event string, data map[string]any) error {
	name, _ := data["identifier"].(string)
	renewal, _ := data["renewal"].(bool)
	switch event {
	case "cert_failed":
		err, _ := data["error"].(error)
		o.failed(name, renewal, err)
	case "cert_obtained":
		o.obtained(name, renewal)
	}
	return nil
}

func (o *outages) failed(name string, renewal bool, err error) {
	o.m.countError()
	o.mu.Lock()
	o.failures[name]++
	n := o.failures[name]
	o.mu.Unlock()
	what := "obtaining"
	if renewal {
		what = "renewing"
	}
	log := o.m.log.With("domain", name, "error", err)
	if n > 1 {
		log.Debug("ACME "+what+" failed again", "attempts", n)
		return
	}
	if c := o.m.Lookup(name); c != nil {
		log.Error("ACME "+what+" failed; serving the certificate in storage and retrying with backoff",
			"not_after", c.Leaf.NotAfter.UTC().Format(time.RFC3339))
		return
	}
	log.Error("ACME " + what + " failed; this domain has no certificate yet (readyz: degraded); retrying with backoff")
}

func (o *outages) obtained(name string, renewal bool) {
	o.mu.Lock()
	n := o.failures[name]
	delete(o.failures, name)
	o.mu.Unlock()
	what := "obtained"
	if renewal {
		what = "renewed"
	}
	if n > 0 {
		o.m.log.Info("ACME works again", "domain", name, "failed_attempts", n)
	}
	// The cache has the new certificate only after the event: the log line says what
	// was issued; Certificates tells what is served.
	o.m.log.Info("certificate "+what, "domain", name)
}
