package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The admin API of h3edge, as the scenarios use it.

// scrapeMetrics reads h3edge's Prometheus text exposition from its admin listener into
// a map from series (name{labels} as printed) to value.
func scrapeMetrics(ctx context.Context, admin netip.AddrPort) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin.String()+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: scrape metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: scrape metrics: %s", resp.Status)
	}
	return parseExposition(resp.Body)
}

// parseExposition parses a Prometheus text exposition with expfmt into a map from series
// to value. A series is spelled as client_golang prints it: name{label="value",…}, labels
// in name order but for a histogram bucket's le and a summary's quantile, which come last.
func parseExposition(r io.Reader) (map[string]float64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("bench: metrics: %w", err)
	}
	out := make(map[string]float64)
	for _, f := range fams {
		samples, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{}, f)
		if err != nil {
			return nil, fmt.Errorf("bench: metrics: %w", err)
		}
		for _, s := range samples {
			out[seriesName(s.Metric)] = float64(s.Value)
		}
	}
	return out, nil
}

// labelEscaper escapes a label value as the text exposition does.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// seriesName spells m as parseExposition's keys do.
func seriesName(m model.Metric) string {
	names := make([]model.LabelName, 0, len(m))
	for k := range m {
		if k != model.MetricNameLabel {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return string(m[model.MetricNameLabel])
	}
	last := func(k model.LabelName) bool { return k == model.BucketLabel || k == model.QuantileLabel }
	slices.SortFunc(names, func(a, b model.LabelName) int {
		if la, lb := last(a), last(b); la != lb {
			if la {
				return 1
			}
			return -1
		}
		return strings.Compare(string(a), string(b))
	})
	var b strings.Builder
	b.WriteString(string(m[model.MetricNameLabel]))
	for i, k := range names {
		if i == 0 {
			b.WriteByte('{')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(string(k))
		b.WriteString(`="`)
		labelEscaper.WriteString(&b, string(m[k]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// banSource bans prefix on h3edge through its admin API for d.
func banSource(ctx context.Context, admin netip.AddrPort, prefix netip.Prefix, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	body, _ := json.Marshal(map[string]string{"prefix": prefix.String(), "duration": d.String(), "reason": "drop-cost"})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+admin.String()+"/api/v1/bans", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("bench: ban %v: %w", prefix, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return fmt.Errorf("bench: ban %v: %s: %s", prefix, resp.Status, b)
	}
	return nil
}
