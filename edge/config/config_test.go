package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/config/*.golden")

// TestConfigGolden renders each testdata/config/*.yaml as its effective configuration
// (Parse, ApplyDefaults) with Validate's problems
// and compares the result with the .golden file beside it. -update rewrites them.
func TestConfigGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/config/*.yaml")
	if err != nil || len(files) < 5 {
		t.Fatalf("want the golden inputs in testdata/config, got %v, %v", files, err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			got := effective(t, file)
			golden := strings.TrimSuffix(file, ".yaml") + ".golden"
			if *updateGolden {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./edge/config -run TestConfigGolden -update)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from %s (rewrite with -update if intended):\n%s", file, golden, lineDiff(string(want), got))
			}
		})
	}
}

// effective renders what file means; see TestConfigGolden.
func effective(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(file)
	c, err := Parse(name, data)
	if c == nil {
		t.Fatalf("Parse: %v", err)
	}
	c.ApplyDefaults()
	var b strings.Builder
	fmt.Fprintf(&b, "# %s after Parse and ApplyDefaults; go test ./edge/config -run TestConfigGolden -update\n", name)
	b.WriteString("# rewrites this file.\n")
	if err := c.Validate(); err != nil {
		b.WriteString("# problems:\n")
		for line := range strings.Lines(err.Error()) {
			b.WriteString("#   " + strings.TrimSuffix(line, "\n") + "\n")
		}
	} else {
		b.WriteString("# problems: none\n")
	}
	fmt.Fprintf(&b, "# AltSvcValue: %s\n# TrustedProxyPrefixes: %v\n", c.AltSvcValue(), c.TrustedProxyPrefixes())
	out := marshal(t, c)
	b.WriteString(out)

	// The effective configuration reads back as itself (GET /api/v1/config shows it).
	again, err := Parse(name, []byte(out))
	if err != nil {
		t.Fatalf("the effective configuration does not parse: %v", err)
	}
	again.ApplyDefaults()
	if got := marshal(t, again); got != out {
		t.Errorf("the effective configuration reads back differently:\n%s", lineDiff(out, got))
	}
	return b.String()
}

func marshal(t testing.TB, c *Config) string {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// lineDiff shows the lines of got that differ from want.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  want %q\n  got  %q\n", i+1, wl, gl)
		}
	}
	return b.String()
}

// TestConfigEmptyIsDefault: a file without settings runs the built-in defaults.
func TestConfigEmptyIsDefault(t *testing.T) {
	want := marshal(t, Default())
	for _, data := range []string{"", "# only a comment\n", "---\n", "~\n", "---\n# comment\n...\n"} {
		c, err := Parse("h3edge.yaml", []byte(data))
		if err != nil {
			t.Fatalf("Parse(%q): %v", data, err)
		}
		c.ApplyDefaults()
		if got := marshal(t, c); got != want {
			t.Errorf("Parse(%q) + ApplyDefaults:\n%s\nwant Default():\n%s", data, got, want)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("Parse(%q): Validate: %v", data, err)
		}
	}
	if err := Default().Validate(); err != nil {
		t.Errorf("Default().Validate() = %v", err)
	}
}

// TestConfigFourMistakes is the case "h3edge validate" shows too: each of the four
// mistakes in testdata/config/four-mistakes.yaml gives exactly one line, at its place:
//
//	line 3  shutdown_timeout: 30      a duration without a unit
//	line 4  upstream: 127.0.0.1:9000  no scheme
//	line 5  10.1.0.0/33               a prefix longer than 32 bits
//	line 8  kye: site.key             a misspelled key (its "key: required" is not repeated)
func TestConfigFourMistakes(t *testing.T) {
	const file = "testdata/config/four-mistakes.yaml"
	want := []string{
		file + `:3:19: shutdown_timeout: must be a duration such as 10s (got "30")`,
		file + `:4:11: upstream: must be an absolute http or https URL such as http://127.0.0.1:9000 (got "127.0.0.1:9000")`,
		file + `:5:31: trusted_proxies[1]: must be a CIDR prefix such as 10.0.0.0/8, or an IP address (got "10.1.0.0/33")`,
		file + `:8:24: tls.certificates[0].kye: unknown field; did you mean "key"?`,
	}
	c, err := Load(file)
	if c == nil {
		t.Fatalf("Load: %v", err)
	}
	// Parse reports the two decode mistakes; Validate all four.
	if got := lines(err); !slices.Equal(got, []string{want[0], want[3]}) {
		t.Errorf("Load error:\n%s\nwant:\n%s\n%s", err, want[0], want[3])
	}
	c.ApplyDefaults()
	err = c.Validate()
	if got := lines(err); !slices.Equal(got, want) {
		t.Errorf("Validate:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
	}
	var ve ValidationError
	if !errors.As(err, &ve) || len(ve) != 4 {
		t.Fatalf("errors.As(ValidationError) = %v, %d problems", errors.As(err, &ve), len(ve))
	}
	var fe FieldError
	if !errors.As(err, &fe) || fe.Path != "shutdown_timeout" || fe.Line != 3 || fe.Col != 19 {
		t.Errorf("errors.As(FieldError) = %+v", fe)
	}
}

func lines(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}

// TestConfigParseErrors covers what Parse refuses, each with its place.
func TestConfigParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"unclosed list", "listen: [\n", []string{
			"t.yaml:1:1: invalid YAML: did not find expected node content"}},
		{"nested mapping on one line", "listen: x\nupstream: b: c\n", []string{
			"t.yaml:2:1: invalid YAML: mapping values are not allowed in this context"}},
		{"error on the first line", "a: b: c\n", []string{
			"t.yaml:1:1: invalid YAML: mapping values are not allowed in this context"}},
		{"unknown anchor", "listen: x\nupstream: *nope\n", []string{
			"t.yaml:2:11: invalid YAML: unknown anchor 'nope' referenced"}},
		{"control character", "listen: x\nupstream: \"a\x01\"\n", []string{
			"t.yaml:2:13: invalid YAML: control characters are not allowed"}},
		{"two documents", "listen: \":1\"\n---\nlisten: \":2\"\n", []string{
			`t.yaml:2:1: a second YAML document; the file must hold one (remove this "---" and what follows)`}},
		{"not a mapping", "- listen\n", []string{
			"t.yaml:1:1: must be a mapping (name: value lines), not a list"}},
		{"unknown key", "policies:\n  - name: p\n    qouta: 5\n", []string{
			`t.yaml:3:5: policies[0].qouta: unknown field; did you mean "quota"?`}},
		{"wrong case", "Listen: x\n", []string{
			`t.yaml:1:1: Listen: unknown field; did you mean "listen"?`}},
		{"unknown key, nothing close", "frobnicate: 1\n", []string{
			`t.yaml:1:1: frobnicate: unknown field`}},
		{"repeated key", "listen: a\nlisten: b\n", []string{
			`t.yaml:2:1: listen: repeated key; it is already set on line 1`}},
		{"duration without unit", "abuse:\n  within: 10\n", []string{
			`t.yaml:2:11: abuse.within: must be a duration such as 10s (got "10")`}},
		{"number", "ip:\n  streams:\n    rate: fast\n", []string{
			`t.yaml:3:11: ip.streams.rate: must be a number (got "fast")`}},
		{"whole number", "policies: [{name: p, quota: 1.5}]\n", []string{
			`t.yaml:1:29: policies[0].quota: must be a whole number (got "1.5")`}},
		{"bool", "abuse: {share: maybe}\n", []string{
			`t.yaml:1:16: abuse.share: must be true or false (got "maybe")`}},
		{"list expected", "trusted_proxies: 10.0.0.0/8\n", []string{
			`t.yaml:1:18: trusted_proxies: must be a list such as [a, b], not a single value`}},
		{"mapping expected", "tls: [a]\n", []string{
			`t.yaml:1:6: tls: must be a mapping (name: value lines), not a list`}},
		{"string expected", "listen: {a: 1}\n", []string{
			`t.yaml:1:9: listen: must be a string, not a mapping`}},
		{"bad merge", "<<: 5\n", []string{
			`t.yaml:1:5: a merge (<<) takes a mapping or a list of mappings`}},
		{"key not a name", "? [a]\n: 1\n", []string{
			`t.yaml:1:3: a key must be a plain name, not a list`}},
		{"all at once", "listen: [1]\nshutdown_timeout: soon\nlog_formt: json\n", []string{
			`t.yaml:1:9: listen: must be a string, not a list`,
			`t.yaml:2:19: shutdown_timeout: must be a duration such as 10s (got "soon")`,
			`t.yaml:3:1: log_formt: unknown field; did you mean "log_format"?`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tc.yaml))
			if got := lines(err); !slices.Equal(got, tc.want) {
				t.Errorf("Parse(%q):\n%v\nwant:\n%s", tc.yaml, err, strings.Join(tc.want, "\n"))
			}
			if _, ok := err.(ValidationError); !ok {
				t.Errorf("error is %T, want ValidationError", err)
			}
		})
	}
}

// TestConfigAliases: anchors, aliases and merge keys decode as YAML means them, and a
// document that repeats a subtree without bound is refused quickly.
func TestConfigAliases(t *testing.T) {
	c, err := Parse("t.yaml", []byte(`
policies:
  - &base {name: a, quota: 5, window: 1s, key: [bearer]}
  - <<: *base
    name: b
  - <<: [{quota: 7}, *base]
    name: c
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range c.Policies {
		got = append(got, fmt.Sprint(p.Name, p.Quota, p.Window, p.Key))
	}
	if want := []string{"a5 1s [bearer]", "b5 1s [bearer]", "c7 1s [bearer]"}; !slices.Equal(got, want) {
		t.Errorf("policies = %q, want %q", got, want)
	}

	var b strings.Builder
	b.WriteString("x: &k [")
	for i := range 1000 {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("ip")
	}
	b.WriteString("]\npolicies: &p\n")
	for i := range 1000 {
		fmt.Fprintf(&b, "  - {name: p%d, key: *k}\n", i)
	}
	// Merges of merges of empty mappings: 10^20 visits without a budget.
	var m strings.Builder
	m.WriteString("policies:\n  - &m0 {}\n")
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&m, "  - &m%d {<<: [*m%[2]d, *m%[2]d, *m%[2]d, *m%[2]d, *m%[2]d, *m%[2]d, *m%[2]d, *m%[2]d, *m%[2]d, *m%[2]d]}\n", i, i-1)
	}
	for name, doc := range map[string]string{"aliases": b.String(), "merges": m.String()} {
		start := time.Now()
		_, err = Parse("t.yaml", []byte(doc))
		if err == nil || !strings.Contains(err.Error(), "too many values") {
			t.Errorf("%s: %v", name, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: took %s", name, d)
		}
	}
	_, err = Parse("t.yaml", []byte("policies:\n  - &p\n    <<: *p\n    name: p\n"))
	if want := "t.yaml:3:9: policies[0]: a merge (<<) takes in the mapping that holds it"; err == nil || err.Error() != want {
		t.Errorf("a mapping merging itself: %v, want %s", err, want)
	}
}

// TestConfigPositions: every field path gets its place in the file.
func TestConfigPositions(t *testing.T) {
	c, err := Parse("t.yaml", []byte(`listen: ":8443"
tls:
  certificates:
    - cert: a.pem
      key: a.key
ip:
  streams: {rate: 5, burst: 9}
redis:
  url: redis://x:6379
policies:
  - {name: a, quota: 1, window: 1s}
  - name: b
    quota:   2
`))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]position{
		"listen":                   {1, 9},
		"tls":                      {2, 1},
		"tls.certificates":         {3, 3},
		"tls.certificates[0]":      {4, 7},
		"tls.certificates[0].cert": {4, 13},
		"tls.certificates[0].key":  {5, 12},
		"ip.streams":               {7, 3},
		"ip.streams.rate":          {7, 19},
		"ip.streams.burst":         {7, 29},
		"redis":                    {8, 1},
		"redis.url":                {9, 8},
		"policies[0]":              {11, 5},
		"policies[0].quota":        {11, 22},
		"policies[1]":              {12, 5},
		"policies[1].quota":        {13, 14},
	} {
		if got := c.pos[path]; got != want {
			t.Errorf("pos[%q] = %v, want %v", path, got, want)
		}
	}
}

// validationCase is one rule of Validate: a file and the problems it has, each as
// "path: problem" or the start of it. TestConfigFieldsAccountedFor requires a case
// for every field that configFields marks checked.
type validationCase struct {
	name, yaml string
	want       []string
}

const pol = "policies:\n  - {name: p, quota: 10, window: 1s, "

var validationCases = []validationCase{
	{"valid", "listen: :1\nupstream: http://o\n", nil},
	{"listen not host:port", "listen: localhost\n", []string{`listen: must be host:port, such as ":8443" or "127.0.0.1:8443" (got "localhost")`}},
	{"listen port range", `listen: ":99999"`, []string{`listen: port "99999" must be a number from 0 to 65535`}},
	{"listen named port", `listen: ":https"`, []string{`listen: port "https" must be a number`}},
	{"listen port 0", `listen: "127.0.0.1:0"`, nil},
	{"alt_svc without =", "alt_svc: h3\n", []string{`alt_svc: must be an Alt-Svc field value such as 'h3=":8443"; ma=86400', or "" to send none (got "h3")`}},
	{"alt_svc newline", `alt_svc: "h3=\":1\"\r\nX: y"`, []string{`alt_svc: must be an Alt-Svc field value`}},
	{"alt_svc empty", `alt_svc: ""`, nil},
	{"shutdown_timeout negative", "shutdown_timeout: -1s", []string{"shutdown_timeout: must be more than 0, a duration such as 10s (got -1s)"}},
	{"shutdown_timeout long", "shutdown_timeout: 11m", []string{"shutdown_timeout: must be at most 10m (got 11m0s)"}},
	{"limits.body_read_timeout negative", "limits: {body_read_timeout: -1s}", []string{"limits.body_read_timeout: must be more than 0, a duration such as 10s (got -1s)"}},
	{"limits.write_timeout long", "limits: {write_timeout: 11m}", []string{"limits.write_timeout: must be at most 10m (got 11m0s)"}},
	{"limits.max_connections negative", "limits: {max_connections: -2}", []string{"limits.max_connections: must be a cap, 0 (sized from the machine) or -1 (not capped) (got -2)"}},
	{"limits.max_pending_connections negative", "limits: {max_pending_connections: -5}", []string{"limits.max_pending_connections: must be a cap, 0 (sized from the machine) or -1 (not capped) (got -5)"}},
	{"limits caps", "limits: {max_connections: 10000, max_pending_connections: -1}", nil},
	{"limits.max_inflight_requests negative", "limits: {max_inflight_requests: -2}", []string{"limits.max_inflight_requests: must be a cap, 0 (sized from the machine) or -1 (not capped) (got -2)"}},
	{"limits.max_goroutines negative", "limits: {max_goroutines: -3}", []string{"limits.max_goroutines: must be a cap, 0 (sized from the machine) or -1 (not capped) (got -3)"}},
	{"limits overload caps", "limits: {max_inflight_requests: 500, max_goroutines: -1}", nil},
	{"limits short", "limits: {body_read_timeout: 2s, write_timeout: 1s}", nil},
	{"upstream_timeout negative", "upstream_timeout: -1s", []string{"upstream_timeout: must be more than 0, a duration such as 10s (got -1s)"}},
	{"upstream without scheme", "upstream: 127.0.0.1:9000", []string{`upstream: must be an absolute http or https URL such as http://127.0.0.1:9000 (got "127.0.0.1:9000")`}},
	{"upstream scheme", "upstream: ftp://o", []string{`upstream: must be an absolute http or https URL`}},
	{"upstream without host", `upstream: "http:///x"`, []string{`upstream: must be an absolute http or https URL`}},
	{"upstream port", "upstream: http://o:70000", []string{`upstream: port "70000" must be from 1 to 65535`}},
	{"upstream fragment", "upstream: http://o/#x", []string{`upstream: must not have a #fragment`}},
	{"trusted_proxies", `trusted_proxies: [10.0.0.0/33, 1.2.3, "fe80::1%eth0", 10.1.2.3/8, "::1"]`, []string{
		`trusted_proxies[0]: must be a CIDR prefix such as 10.0.0.0/8, or an IP address (got "10.0.0.0/33")`,
		`trusted_proxies[1]: must be a CIDR prefix`,
		`trusted_proxies[2]: must be a CIDR prefix`}},
	{"tls pairs", "tls: {certificates: [{cert: a.pem}, {key: b.key}]}", []string{
		"tls.certificates[0].key: required: the path of the PEM private key",
		"tls.certificates[1].cert: required: the path of a PEM certificate chain"}},
	{"http_listen not host:port", "http_listen: 80\n", []string{`http_listen: must be host:port, such as ":80" (got "80")`}},
	{"http_listen on the public port", "listen: \":8443\"\nhttp_listen: \"127.0.0.1:8443\"\n", []string{"http_listen: must not be the public listen address (:8443)"}},
	{"http_listen on the admin port", "http_listen: \"127.0.0.1:9090\"\n", []string{"http_listen: must not be the admin listen address (127.0.0.1:9090)"}},
	{"acme valid", "http_listen: \":80\"\ntls: {acme: {email: ops@example.com, domains: [api.example.com, www.example.com.], challenges: [http-01, tls-alpn-01]}}", nil},
	{"acme domains required", "tls: {acme: {email: ops@example.com}}", []string{"tls.acme.domains: required: the names to obtain certificates for"}},
	{"acme domains", `tls: {acme: {domains: ["*.example.com", 192.0.2.1, "[::1]", "a..b", "-a.example", "a_b.example", API.example.com, api.example.com]}}`, []string{
		`tls.acme.domains[0]: a wildcard needs the dns-01 challenge, which h3edge does not have built in; list each name (got "*.example.com")`,
		`tls.acme.domains[1]: is an IP address; ACME certificates here are for DNS names`,
		`tls.acme.domains[2]: is an IP address`,
		`tls.acme.domains[3]: must be a DNS name such as api.example.com: labels of 1 to 63 letters, digits and inner hyphens (got "a..b")`,
		`tls.acme.domains[4]: must be a DNS name`,
		`tls.acme.domains[5]: must be a DNS name`,
		`tls.acme.domains[7]: "api.example.com" is already tls.acme.domains[6]`}},
	{"acme email", "tls: {acme: {email: ops, domains: [a.example]}}", []string{`tls.acme.email: must be an e-mail address such as ops@example.com (got "ops")`}},
	{"acme ca", "tls: {acme: {ca: http://acme.example/dir, domains: [a.example]}}", []string{`tls.acme.ca: must be an absolute https URL such as https://acme-v02.api.letsencrypt.org/directory (got "http://acme.example/dir")`}},
	{"acme ca_roots empty", `tls: {acme: {ca_roots: [""], domains: [a.example]}}`, []string{"tls.acme.ca_roots[0]: must be the path of a PEM file of CA certificates"}},
	{"acme challenges", "tls: {acme: {challenges: [dns-01, http-01, http-01], domains: [a.example]}}", []string{
		`tls.acme.challenges[0]: unknown challenge type "dns-01"; use one of tls-alpn-01, http-01`,
		`tls.acme.challenges[1]: http-01 needs http_listen, where the CA connects over plain HTTP (port 80): set http_listen: ":80", or answer tls-alpn-01 only`,
		`tls.acme.challenges[2]: "http-01" is listed twice`,
		`tls.acme.challenges[2]: http-01 needs http_listen`}},
	{"acme storage redis without redis", "tls: {acme: {storage: redis, domains: [a.example]}}", []string{"tls.acme.storage: redis needs redis: configure redis.url"}},
	{"redis empty", "redis: {}", []string{"redis: set one of url, cluster or sentinel"}},
	{"redis two kinds", "redis: {url: redis://a:6379, cluster: [b:6379]}", []string{"redis: set only one of url, cluster and sentinel"}},
	{"redis url scheme", "redis: {url: http://a:6379}", []string{`redis.url: must be an absolute redis or rediss URL such as redis://127.0.0.1:6379/0 (got "http://a:6379")`}},
	{"redis url db", "redis: {url: redis://a:6379/x}", []string{`redis.url: the path must be a database number such as /0 (got "/x")`}},
	{"redis url ok", "redis: {url: \"rediss://u:p@a:6379/3\"}", nil},
	{"redis url with cluster options", "redis: {url: redis://a:6379, username: u, password: p, tls: true}", []string{
		"redis.username: applies to cluster and sentinel; with url, put it in the url",
		"redis.password: applies to cluster and sentinel; with url, put it in the url",
		"redis.tls: applies to cluster and sentinel; with url, use a rediss:// url instead"}},
	{"redis cluster", "redis: {cluster: [a:6379, b], username: u, password: p, tls: true}", []string{`redis.cluster[1]: must be host:port, such as 10.0.0.1:6379 (got "b")`}},
	{"redis sentinel empty", "redis: {sentinel: {}}", []string{
		"redis.sentinel.master: required: the name of the master set",
		"redis.sentinel.addrs: required: the sentinels' addresses"}},
	{"redis sentinel addr", `redis: {sentinel: {master: m, addrs: [":0"]}}`, []string{`redis.sentinel.addrs[0]: port "0" must be a number from 1 to 65535, such as 10.0.0.5:26379 (got ":0")`}},
	{"redis timeout long", "redis: {url: redis://a:6379, timeout: 6s}", []string{"redis.timeout: must be at most 5s (got 6s)"}},
	{"redis timeout negative", "redis: {url: redis://a:6379, timeout: -1ms}", []string{"redis.timeout: must be more than 0"}},
	{"access_log defaults", "access_log: {}", nil},
	{"access_log", "access_log: {path: /nonexistent-h3edge/a.log, format: clf, sample: 1.5}", []string{
		`access_log.path: the directory "/nonexistent-h3edge" does not exist: create it, or write to stdout`,
		`access_log.format: unknown access log format "clf"; use one of json, common`,
		"access_log.sample: must be more than 0 and at most 1, the fraction of requests logged (got 1.5)"}},
	{"access_log directory", "access_log: {path: /, sample: -0.1}", []string{
		`access_log.path: must be a file or stdout, not a directory (got "/")`,
		"access_log.sample: must be more than 0 and at most 1"}},
	{"access_log file", "access_log: {path: /tmp/h3edge-access.log, format: common, sample: 0.01}", nil},
	{"admin listen", "admin: {listen: nowhere}", []string{`admin.listen: must be host:port, such as "127.0.0.1:9090", or "off" (got "nowhere")`}},
	{"admin public without token", `admin: {listen: ":9090"}`, []string{"admin.token: required when admin.listen is not a loopback address"}},
	{"admin public with token", `admin: {listen: "0.0.0.0:9090", token: t}`, nil},
	{"admin loopback", `admin: {listen: "[::1]:9090"}`, nil},
	{"admin localhost", `admin: {listen: "localhost:9090"}`, nil},
	{"admin off", `admin: {listen: "off"}`, nil},
	{"admin on the public port", "listen: \":9443\"\nadmin: {listen: \"127.0.0.1:9443\"}", []string{"admin.listen: must not be the public listen address"}},
	{"ip rates", "ip: {connections: {rate: -1, burst: 5}, streams: {rate: .nan, burst: -2}}", []string{
		"ip.connections.rate: must be more than 0 and at most 1000000 per second (got -1)",
		"ip.streams.rate: must be more than 0 and at most 1000000 per second (got NaN)",
		"ip.streams.burst: must be from 1 to 10000000 (got -2)"}},
	{"ip rate high", "ip: {connections: {rate: 2e6}, streams: {rate: 0.5e7, burst: 0x7fffffff}}", []string{
		"ip.connections.rate: must be more than 0 and at most 1000000 per second (got 2e+06)",
		"ip.streams.rate: must be more than 0 and at most 1000000 per second (got 5e+06)",
		"ip.streams.burst: must be from 1 to 10000000 (got 2147483647)"}},
	{"ip burst", "ip: {connections: {rate: 5, burst: -1}}", []string{"ip.connections.burst: must be from 1 to 10000000 (got -1)"}},
	{"ip burst default", "ip: {connections: {rate: 0.2}, streams: {rate: 1000000}}", nil},
	{"ip ranges", "ip: {max_connections: -1, max_streams_per_connection: 70000, retry_above: -5, max_tracked: 200000000, ipv4_prefix: 7, ipv6_prefix: 129}", []string{
		"ip.max_connections: must be from 1 to 1000000 (got -1)",
		"ip.max_streams_per_connection: must be from 1 to 65535 (got 70000)",
		"ip.retry_above: must be from 1 to 10000000 (got -5)",
		"ip.max_tracked: must be from 1 to 100000000 (got 200000000)",
		"ip.ipv4_prefix: must be from 8 to 32 (got 7)",
		"ip.ipv6_prefix: must be from 16 to 128 (got 129)"}},
	{"keys file and hash", "redis: {url: redis://a:6379}\nkeys: {file: k.yaml, redis_hash: h}", []string{"keys.redis_hash: set either keys.file or keys.redis_hash, not both"}},
	{"keys redis_hash without redis", "keys: {redis_hash: h}", []string{"keys.redis_hash: needs redis: configure redis.url, redis.cluster or redis.sentinel, or use keys.file"}},
	{"policy name required", "policies: [{quota: 1, window: 1s}]", []string{"policies[0].name: required: the policy's name in the RateLimit fields"}},
	{"policy name sf-string", `policies: [{name: "a\"b", quota: 1, window: 1s}, {name: "é", quota: 1, window: 1s}]`, []string{
		`policies[0].name: must be printable ASCII without '"' or '\' (got "a\"b")`,
		`policies[1].name: must be printable ASCII`}},
	{"policy name unique", "policies: [{name: p, quota: 1, window: 1s}, {name: q, quota: 1, window: 1s}, {name: p, quota: 1, window: 1s}]", []string{
		`policies[2].name: "p" is already the name of policies[0]; names must be unique`}},
	{"policy algorithm", pol + "algorithm: tokenbucket}", []string{`policies[0].algorithm: unknown algorithm "tokenbucket"; use one of token_bucket, gcra, fixed_window, sliding_window, sliding_log, leaky_bucket, concurrency`}},
	{"policy algorithms", "policies: [{name: a, quota: 1, window: 1s, algorithm: gcra}, {name: b, quota: 1, window: 1s, algorithm: fixed_window}, {name: c, quota: 1, window: 1s, algorithm: sliding_log}, {name: d, quota: 1, algorithm: concurrency}]", nil},
	{"policy quota required", "policies: [{name: p, window: 1s}]", []string{"policies[0].quota: required: the units per window, more than 0"}},
	{"policy quota negative", "policies: [{name: p, quota: -1, window: 1s}]", []string{"policies[0].quota: must be more than 0 (got -1)"}},
	{"policy window required", "policies: [{name: p, quota: 1}]", []string{"policies[0].window: required: the period in whole seconds, such as 60s"}},
	{"policy window whole seconds", "policies: [{name: p, quota: 1, window: 1500ms}]", []string{"policies[0].window: must be whole seconds, such as 1s or 60s (got 1.5s)"}},
	{"policy window negative", "policies: [{name: p, quota: 1, window: -1s}]", []string{"policies[0].window: must be more than 0, such as 60s (got -1s)"}},
	{"policy concurrency window", "policies: [{name: p, quota: 1, window: 1s, algorithm: concurrency}]", []string{"policies[0].window: must be absent: the concurrency algorithm has no window"}},
	{"policy unit", pol + "unit: bytes}", []string{`policies[0].unit: unknown unit "bytes"; use one of requests, content-bytes, concurrent-requests`}},
	{"policy concurrency unit", "policies: [{name: p, quota: 1, algorithm: concurrency, unit: requests}]", []string{"policies[0].unit: must be concurrent-requests with the concurrency algorithm"}},
	{"policy concurrent-requests algorithm", pol + "algorithm: gcra, unit: concurrent-requests}", []string{"policies[0].algorithm: must be concurrency with unit concurrent-requests"}},
	{"policy concurrency defaults", "policies: [{name: a, quota: 1, algorithm: concurrency}, {name: b, quota: 1, unit: concurrent-requests}]", nil},
	{"policy scope", pol + "scope: fleet}", []string{`policies[0].scope: unknown scope "fleet"; use one of global, local`}},
	{"policy global without redis", pol + "scope: global}", []string{"policies[0].scope: global needs redis to be configured; use local, or configure redis"}},
	{"policy on_store_failure", pol + "on_store_failure: retry}", []string{`policies[0].on_store_failure: unknown on_store_failure value "retry"; use one of open, closed, local`}},
	{"policy mode", pol + "mode: dry-run}", []string{`policies[0].mode: unknown mode "dry-run"; use one of enforce, shadow`}},
	{"policy max_delay", pol + "max_delay: 1s}", []string{"policies[0].max_delay: applies only to the leaky_bucket algorithm; remove it"}},
	{"policy max_delay negative", pol + "algorithm: leaky_bucket, max_delay: -1s}", []string{"policies[0].max_delay: must not be negative (got -1s)"}},
	{"policy max_delay leaky", pol + "algorithm: leaky_bucket, max_delay: 250ms}", nil},
	{"policy lease negative", pol + "lease: -1}", []string{"policies[0].lease: must not be negative (got -1)"}},
	{"policy lease local", pol + "lease: 2}", []string{"policies[0].lease: applies only to scope global; remove it"}},
	{"policy lease above quota", "redis: {url: redis://a:6379}\n" + pol + "lease: 11}", []string{"policies[0].lease: must be at most quota (10)"}},
	{"policy lease global", "redis: {url: redis://a:6379}\n" + pol + "lease: 10}", nil},
	{"policy key", pol + `key: ["header:", "header:X API", bearer, "query:", "cookie:x", ip, "header:X-API-Key", "query:k"]}`, []string{
		`policies[0].key[0]: "" is not a header field name; use header:NAME such as header:X-API-Key`,
		`policies[0].key[1]: "X API" is not a header field name`,
		`policies[0].key[3]: query:NAME needs a parameter name, such as query:api_key`,
		`policies[0].key[4]: unknown key source "cookie:x"; use header:NAME, bearer, query:NAME or ip`}},
	{"policy match", pol + `match: {methods: [get, "GET POST", PATCH], path_prefix: api, host: "http://x"}}`, []string{
		`policies[0].match.methods[0]: must be an upper-case method such as GET (got "get")`,
		`policies[0].match.methods[1]: must be an upper-case method`,
		`policies[0].match.path_prefix: must start with "/", such as /api/ (got "api")`,
		`policies[0].match.host: must be a host name such as api.example.com, without scheme or path (got "http://x")`}},
	{"abuse", "abuse: {rejections: -1, within: -1s, ban: 2h, max_ban: 1h}", []string{
		"abuse.rejections: must be more than 0 (got -1)",
		"abuse.within: must be more than 0",
		"abuse.ban: must be at most abuse.max_ban (1h); raise max_ban or lower ban"}},
	{"abuse long", "abuse: {within: 25h, ban: 800h, max_ban: -1h}", []string{
		"abuse.within: must be at most 24h (got 25h0m0s)",
		"abuse.ban: must be at most 720h (got 800h0m0s)",
		"abuse.max_ban: must be more than 0"}},
	{"upstream and upstreams", "upstream: http://a:1\nupstreams: {api: {targets: [http://b:1]}}\nroutes: [{name: r, upstream: api}]", []string{
		"upstream: set either upstream (one origin) or upstreams with routes, not both"}},
	{"upstreams without routes", "upstreams: {api: {targets: [http://b:1]}}", []string{"upstreams: no route sends requests to these upstreams"}},
	{"upstream targets", "upstreams: {api: {targets: [http://a:1/v1, ftp://b, \"http://c:1#w=0\", \"h2c://d:2#w=3\", \"https://e:3/\", http://u:p@f:4, https://e:3]}, none: {}}\nroutes: [{name: r, upstream: api, match: {host: a}}, {name: s, upstream: none}]", []string{
		`upstreams.api.targets[0]: must be scheme://host:port only: a target has no path or query`,
		`upstreams.api.targets[1]: must be an absolute http, https or h2c URL such as http://10.0.0.1:9000 (got "ftp://b")`,
		`upstreams.api.targets[2]: the weight must be #w=N with N from 1 to 1000 (got #w=0)`,
		`upstreams.api.targets[5]: must not carry a user or password`,
		`upstreams.api.targets[6]: https://e:3 is already targets[4]; give it a weight`,
		`upstreams.none.targets: required: at least one target`}},
	{"upstream options", "upstreams: {api: {targets: [http://a:1], balance: random, retries: 9, timeout: -1s, read_timeout: 721h, max_connections: -1, passive: {failures: -1, within: 2h, eject: -1s}}}\nroutes: [{name: r, upstream: api}]", []string{
		`upstreams.api.balance: unknown balance "random"; use one of round_robin, least_requests, hash`,
		"upstreams.api.retries: must be from 0 to 5 (got 9)",
		"upstreams.api.timeout: must be more than 0",
		"upstreams.api.read_timeout: must be at most 720h (got 721h0m0s)",
		"upstreams.api.max_connections: must be from 1 to 1000000 (got -1)",
		"upstreams.api.passive.failures: must be from 1 to 10000 (got -1)",
		"upstreams.api.passive.within: must be at most 1h (got 2h0m0s)",
		"upstreams.api.passive.eject: must be more than 0"}},
	{"upstream health", "upstreams: {api: {targets: [http://a:1], health: {path: healthz, interval: 10ms, timeout: 2s, unhealthy: -1, healthy: 101}}}\nroutes: [{name: r, upstream: api}]", []string{
		`upstreams.api.health.path: must be a path starting with "/", such as /healthz (got "healthz")`,
		"upstreams.api.health.interval: must be at least 50ms (got 10ms)",
		"upstreams.api.health.timeout: must be at most the interval (10ms)",
		"upstreams.api.health.unhealthy: must be from 1 to 100 (got -1)",
		"upstreams.api.health.healthy: must be from 1 to 100 (got 101)"}},
	{"upstream grpc health", "upstreams: {api: {targets: [http://a:1, h2c://b:2], health: {protocol: grpc, path: /hz}}, web: {targets: [http://c:3], health: {protocol: tcp}}, db: {targets: [http://d:4], health: {service: x}}}\nroutes: [{name: r, upstream: api, match: {path_prefix: /a/}}, {name: q, upstream: db, match: {path_prefix: /d/}}, {name: s, upstream: web}]", []string{
		"upstreams.api.targets[0]: a grpc health check needs HTTP/2: write h2c:// (or https://) instead of http://",
		"upstreams.api.health.path: is for protocol: http only; a grpc check asks grpc.health.v1.Health/Check about service",
		`upstreams.web.health.protocol: must be http or grpc (got "tcp")`,
		"upstreams.db.health.service: is for protocol: grpc only; an http check asks for path"}},
	{"upstream grpc health ok", "upstreams: {api: {targets: [h2c://b:2, https://c:3], health: {protocol: grpc, service: my.pkg.Svc}}}\nroutes: [{name: r, upstream: api}]", nil},
	{"upstreams ok", "upstreams: {api: {targets: [\"http://a:1#w=3\", https://b:2, h2c://c:3], balance: hash, retries: 0, health: {path: /hz, interval: 1s, timeout: 1s}}}\nroutes: [{name: r, upstream: api, max_body: 10MiB, max_duration: 1h, strip_prefix: /v1, match: {path_prefix: /v1/, host: \"*.example.com\", headers: {X-Tenant: acme}}}]", nil},
	{"route names and upstream", "upstreams: {api: {targets: [http://a:1]}}\nroutes: [{upstream: api, match: {host: w}}, {name: \"a\\\"b\", upstream: api, match: {host: x}}, {name: r, upstream: apl, match: {host: y}}, {name: r, match: {host: z}}]", []string{
		"routes[0].name: required: the route's name",
		`routes[1].name: must be printable ASCII`,
		`routes[2].upstream: unknown upstream "apl"; use one of api, or define it under upstreams:`,
		"routes[3].upstream: required: the name of a pool under upstreams:",
		`routes[3].name: "r" is already the name of routes[2]; names must be unique`}},
	{"route limits ok", "upstreams: {api: {targets: [http://a:1]}}\nroutes: [{name: r, upstream: api, limits: {body_read_timeout: 2s, write_timeout: 60s}}]", nil},
	{"route limits", "limits: {write_timeout: 20s}\nupstreams: {api: {targets: [http://a:1]}}\nroutes: [{name: r, upstream: api, limits: {body_read_timeout: -1s, write_timeout: 30s, max_connections: 5, max_pending_connections: 1, max_inflight_requests: 10, max_goroutines: 100}}]", []string{
		"routes[0].limits.body_read_timeout: must be more than 0, a duration such as 10s (got -1s)",
		"routes[0].limits.write_timeout: must be at most limits.write_timeout (20s), which bounds every HTTP/1.1 and HTTP/2 connection whatever its routes; raise that one or shorten this (got 30s)",
		"routes[0].limits.max_connections: the cap is the whole edge's: top-level limits only",
		"routes[0].limits.max_pending_connections: the cap is the whole edge's: top-level limits only",
		"routes[0].limits.max_inflight_requests: the cap is the whole edge's: top-level limits only",
		"routes[0].limits.max_goroutines: the cap is the whole edge's: top-level limits only",
	}},
	{"route limits long", "upstreams: {api: {targets: [http://a:1]}}\nroutes: [{name: r, upstream: api, limits: {write_timeout: 11m}}]", []string{
		"routes[0].limits.write_timeout: must be at most 10m (got 11m0s)",
	}},
	{"route match", "upstreams: {api: {targets: [http://a:1]}}\nroutes: [{name: r, upstream: api, strip_prefix: /v2, max_body: 5XB, max_duration: -1s, match: {methods: [get], path_prefix: v1, host: \"http://x\", headers: {\"X Y\": a}}}]", []string{
		`routes[0].strip_prefix: must be the start of match.path_prefix`,
		`routes[0].max_body: must be a size such as 65536, 64KiB or 10MiB (got "5XB")`,
		"routes[0].max_duration: must be more than 0",
		`routes[0].match.methods[0]: must be an upper-case method such as GET (got "get")`,
		`routes[0].match.path_prefix: must start with "/", such as /api/ (got "v1")`,
		`routes[0].match.host: must be a host name such as api.example.com or *.example.com`,
		`routes[0].match.headers: "X Y" is not a header field name`}},
	{"route shadowed", "upstreams: {api: {targets: [http://a:1]}}\nroutes: [{name: all-api, upstream: api, match: {path_prefix: /api/}}, {name: v1, upstream: api, match: {path_prefix: /api/v1/, methods: [GET]}}, {name: wild, upstream: api, match: {host: \"*.example.com\"}}, {name: a, upstream: api, match: {host: a.example.com}}, {name: apex, upstream: api, match: {host: example.com}}]", []string{
		"routes[1].match: can never match: routes[0] (all-api) comes first",
		"routes[3].match: can never match: routes[2] (wild) comes first"}},
	{"policy route", "upstreams: {api: {targets: [http://a:1]}}\nroutes: [{name: api, upstream: api}]\n" + "policies: [{name: p, quota: 1, window: 1s, match: {route: api}}, {name: q, quota: 1, window: 1s, match: {route: apl}}]", []string{
		`policies[1].match.route: no route is named "apl"; use one of the names under routes: (api)`}},
	{"policy route of the shorthand", "upstream: http://a:1\npolicies: [{name: p, quota: 1, window: 1s, match: {route: default}}]", nil},
	{"log_format", "log_format: yaml", []string{`log_format: unknown log format "yaml"; use one of text, json`}},
}

// TestConfigValidate runs validationCases.
func TestConfigValidate(t *testing.T) {
	for _, tc := range validationCases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("t.yaml", []byte(tc.yaml))
			if c == nil {
				t.Fatalf("Parse: %v", err)
			}
			c.ApplyDefaults()
			var ve ValidationError
			if err := c.report(c.problems()); err != nil && !errors.As(err, &ve) {
				t.Fatalf("error is %T", err)
			}
			var got []string
			for _, e := range ve {
				got = append(got, e.Path+": "+e.Problem)
			}
			ok := len(got) == len(tc.want)
			for i := 0; ok && i < len(got); i++ {
				ok = strings.HasPrefix(got[i], tc.want[i])
			}
			if !ok {
				t.Errorf("%s\ngot:\n%s\nwant (prefixes):\n%s", tc.yaml, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			for _, e := range ve {
				if e.Line == 0 || e.File != "t.yaml" {
					t.Errorf("%s: no place in the file", e)
				}
			}
		})
	}
}

// TestConfigFlags: the order cmd/h3edge follows (Load, set fields from flags,
// ApplyDefaults, Validate) works: a flag's value is checked without a place in the file
// and Alt-Svc follows a Listen a flag set.
func TestConfigFlags(t *testing.T) {
	c, err := Parse("t.yaml", []byte("listen: \":9443\"\nupstream: 'http://o'\nlog_format: xml\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.ApplyDefaults()
	if got, want := c.AltSvcValue(), `h3=":9443"; ma=86400`; got != want {
		t.Errorf("AltSvcValue() = %q, want %q", got, want)
	}
	c.Listen = ":7443"  // -listen
	c.LogFormat = "csv" // -log-format
	c.ApplyDefaults()
	if got, want := c.AltSvcValue(), `h3=":7443"; ma=86400`; got != want {
		t.Errorf("after -listen: AltSvcValue() = %q, want %q", got, want)
	}
	c.Listen = "nowhere"
	want := []string{
		`listen: must be host:port, such as ":8443" or "127.0.0.1:8443" (got "nowhere")`,
		`log_format: unknown log format "csv"; use one of text, json`,
	}
	if got := lines(c.Validate()); !slices.Equal(got, want) {
		t.Errorf("Validate:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Without flags, the same mistakes are placed in the file.
	c, _ = Parse("t.yaml", []byte("listen: nowhere\nlog_format: csv\n"))
	c.ApplyDefaults()
	want = []string{"t.yaml:1:9: " + want[0], "t.yaml:2:13: " + want[1]}
	if got := lines(c.Validate()); !slices.Equal(got, want) {
		t.Errorf("Validate:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestConfigAltSvcValue(t *testing.T) {
	s := func(v string) *string { return &v }
	for _, tc := range []struct {
		listen string
		altSvc *string
		want   string
	}{
		{"", nil, `h3=":8443"; ma=86400`},
		{"127.0.0.1:443", nil, `h3=":443"; ma=86400`},
		{"[::1]:8443", nil, `h3=":8443"; ma=86400`},
		{":0", nil, ""},
		{"nowhere", nil, ""},
		{":443", s(""), ""},
		{":443", s(`h3=":443"; ma=60, h3-29=":443"`), `h3=":443"; ma=60, h3-29=":443"`},
	} {
		c := &Config{Listen: tc.listen, AltSvc: tc.altSvc}
		if got := c.AltSvcValue(); got != tc.want {
			t.Errorf("Listen %q, AltSvc %v: AltSvcValue() = %q, want %q", tc.listen, tc.altSvc, got, tc.want)
		}
	}
}

func TestConfigTrustedProxyPrefixes(t *testing.T) {
	c := &Config{TrustedProxies: []string{"10.0.0.0/8", "10.1.2.3/16", "192.0.2.7", "2001:db8::1", "2001:db8::/32", "bogus"}}
	c.ApplyDefaults()
	got := fmt.Sprint(c.TrustedProxyPrefixes())
	if want := "[10.0.0.0/8 10.1.0.0/16 192.0.2.7/32 2001:db8::1/128 2001:db8::/32]"; got != want {
		t.Errorf("TrustedProxyPrefixes() = %s, want %s", got, want)
	}
	c.ApplyDefaults()
	if again := fmt.Sprint(c.TrustedProxyPrefixes()); again != got {
		t.Errorf("after a second ApplyDefaults: %s, want %s", again, got)
	}
	if p := Default().TrustedProxyPrefixes(); len(p) != 0 {
		t.Errorf("Default().TrustedProxyPrefixes() = %v", p)
	}
}

func TestConfigRedacted(t *testing.T) {
	c, err := Parse("t.yaml", []byte(`
redis: {url: "redis://u:pw@a:6379/0", password: pw2}
admin: {token: tok}
keys: {secret: sec}
`))
	if err != nil {
		t.Fatal(err)
	}
	c.ApplyDefaults()
	before := marshal(t, c)
	out := marshal(t, c.Redacted())
	for _, secret := range []string{"pw", "pw2", "tok", "sec"} {
		if regexp.MustCompile(`\b` + secret + `\b`).MatchString(out) {
			t.Errorf("Redacted() shows %q:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, "redis://u:REDACTED@a:6379/0") {
		t.Errorf("Redacted() URL:\n%s", out)
	}
	if after := marshal(t, c); after != before {
		t.Errorf("Redacted() changed the original:\n%s", after)
	}
	c.Redis.URL = "redis://u:p w@a:6379" // does not parse
	if got := c.Redacted().Redis.URL; got != "REDACTED" {
		t.Errorf("Redacted() of an unparsable URL = %q", got)
	}
}

// TestConfigApplyDefaultsIdempotent: a second ApplyDefaults changes nothing.
func TestConfigApplyDefaultsIdempotent(t *testing.T) {
	files, _ := filepath.Glob("testdata/config/*.yaml")
	for _, file := range files {
		c, _ := Load(file)
		c.ApplyDefaults()
		once := marshal(t, c)
		c.ApplyDefaults()
		if twice := marshal(t, c); twice != once {
			t.Errorf("%s: second ApplyDefaults:\n%s", file, lineDiff(once, twice))
		}
	}
}

// configFields accounts for every field of Config (quic-go's "all fields must be
// accounted for"): a new field fails TestConfigFieldsAccountedFor until it is added
// here with its default (as fmt prints it after ApplyDefaults; the zero value when it
// has none), and, when checked, a case in validationCases. doc is what the field's
// doc comment must say of a default, when it differs from def.
var configFields = map[string]struct {
	def, doc string
	checked  bool
}{
	"listen":                            {def: ":8443", checked: true},
	"alt_svc":                           {def: "<nil>", checked: true},
	"shutdown_timeout":                  {def: "10s", checked: true},
	"upstream_timeout":                  {def: "30s", checked: true},
	"upstream":                          {def: "", checked: true},
	"trusted_proxies":                   {def: "[]", checked: true},
	"tls.certificates[].cert":           {def: "", checked: true},
	"tls.certificates[].key":            {def: "", checked: true},
	"http_listen":                       {def: "", checked: true},
	"tls.acme.email":                    {def: "", checked: true},
	"tls.acme.domains":                  {def: "[]", checked: true},
	"tls.acme.ca":                       {def: "https://acme-v02.api.letsencrypt.org/directory", checked: true},
	"tls.acme.ca_roots":                 {def: "[]", checked: true},
	"tls.acme.challenges":               {def: "[tls-alpn-01]", checked: true},
	"tls.acme.storage":                  {def: ""},
	"redis.url":                         {def: "", checked: true},
	"redis.cluster":                     {def: "[]", checked: true},
	"redis.sentinel.master":             {def: "", checked: true},
	"redis.sentinel.addrs":              {def: "[]", checked: true},
	"redis.username":                    {def: "", checked: true},
	"redis.password":                    {def: "", checked: true},
	"redis.tls":                         {def: "false", checked: true},
	"redis.timeout":                     {def: "10ms", checked: true},
	"admin.listen":                      {def: "127.0.0.1:9090", checked: true},
	"admin.token":                       {def: "", checked: true},
	"ip.connections.rate":               {def: "20", checked: true},
	"ip.connections.burst":              {def: "40", checked: true},
	"ip.streams.rate":                   {def: "200", checked: true},
	"ip.streams.burst":                  {def: "400", checked: true},
	"ip.max_connections":                {def: "64", checked: true},
	"ip.max_streams_per_connection":     {def: "100", checked: true},
	"ip.retry_above":                    {def: "1000", checked: true},
	"ip.max_tracked":                    {def: "1000000", checked: true},
	"ip.ipv4_prefix":                    {def: "32", checked: true},
	"ip.ipv6_prefix":                    {def: "64", checked: true},
	"keys.file":                         {def: ""}, // a path; keys.redis_hash's check covers both
	"keys.redis_hash":                   {def: "", checked: true},
	"keys.default_plan":                 {def: "anonymous"},
	"keys.secret":                       {def: ""},
	"policies[].name":                   {def: "", checked: true},
	"policies[].match.path_prefix":      {def: "", checked: true},
	"policies[].match.methods":          {def: "[]", checked: true},
	"policies[].match.host":             {def: "", checked: true},
	"policies[].match.plan":             {def: ""},
	"policies[].match.route":            {def: "", checked: true},
	"upstreams.<name>.targets":          {def: "[]", checked: true},
	"upstreams.<name>.balance":          {def: "round_robin", checked: true},
	"upstreams.<name>.health.protocol":  {def: "http", checked: true},
	"upstreams.<name>.health.path":      {def: "/healthz", checked: true},
	"upstreams.<name>.health.service":   {checked: true},
	"upstreams.<name>.health.interval":  {def: "5s", checked: true},
	"upstreams.<name>.health.timeout":   {def: "1s", checked: true},
	"upstreams.<name>.health.unhealthy": {def: "3", checked: true},
	"upstreams.<name>.health.healthy":   {def: "2", checked: true},
	"upstreams.<name>.passive.failures": {def: "5", checked: true},
	"upstreams.<name>.passive.within":   {def: "10s", checked: true},
	"upstreams.<name>.passive.eject":    {def: "30s", checked: true},
	"upstreams.<name>.retries":          {def: "1", checked: true},
	"upstreams.<name>.timeout":          {def: "30s", checked: true},
	"upstreams.<name>.read_timeout":     {def: "5m0s", doc: "5m", checked: true},
	"upstreams.<name>.max_connections":  {def: "1024", checked: true},
	"upstreams.<name>.ca":               {def: ""}, // a path, read when the pool is built
	"routes[].name":                     {def: "", checked: true},
	"routes[].match.host":               {def: "", checked: true},
	"routes[].match.path_prefix":        {def: "", checked: true},
	"routes[].match.methods":            {def: "[]", checked: true},
	"routes[].match.headers":            {def: "map[]", checked: true},
	"routes[].upstream":                 {def: "", checked: true},
	"routes[].strip_prefix":             {def: "", checked: true},
	"routes[].max_body":                 {def: "0", checked: true},
	"routes[].max_duration":             {def: "0s", checked: true},

	// A route's own limits: zero takes the top level's.
	"routes[].limits.body_read_timeout":       {def: "0s", checked: true},
	"routes[].limits.write_timeout":           {def: "0s", checked: true},
	"routes[].limits.max_connections":         {def: "0", checked: true},
	"routes[].limits.max_pending_connections": {def: "0", checked: true},
	"routes[].limits.max_inflight_requests":   {def: "0", checked: true},
	"routes[].limits.max_goroutines":          {def: "0", checked: true},

	"policies[].key":                 {def: "[ip]", checked: true},
	"policies[].algorithm":           {def: "token_bucket", checked: true},
	"policies[].quota":               {def: "0", checked: true},
	"policies[].window":              {def: "0s", checked: true},
	"policies[].unit":                {def: "requests", checked: true},
	"policies[].scope":               {def: "global", checked: true}, // redis is set
	"policies[].on_store_failure":    {def: "open", checked: true},
	"policies[].mode":                {def: "enforce", checked: true},
	"policies[].max_delay":           {def: "0s", checked: true},
	"policies[].lease":               {def: "0", checked: true},
	"abuse.rejections":               {def: "50", checked: true},
	"abuse.within":                   {def: "10s", checked: true},
	"abuse.ban":                      {def: "1m0s", doc: "1m", checked: true},
	"abuse.max_ban":                  {def: "1h0m0s", doc: "1h", checked: true},
	"abuse.share":                    {def: "true"},
	"limits.body_read_timeout":       {def: "30s", checked: true},
	"limits.write_timeout":           {def: "1m0s", doc: "60s", checked: true},
	"limits.max_connections":         {def: "0", checked: true},
	"limits.max_pending_connections": {def: "0", checked: true},
	"limits.max_inflight_requests":   {def: "0", checked: true},
	"limits.max_goroutines":          {def: "0", checked: true},
	"legacy_headers":                 {def: "false"},
	"log_format":                     {def: "text", checked: true},
	"access_log.path":                {def: "stdout", checked: true},
	"access_log.format":              {def: "json", checked: true},
	"access_log.sample":              {def: "1", checked: true},
}

// TestConfigFieldsAccountedFor fails when a field of Config, at any depth, is not in
// configFields; when its default is not the one listed there, or not stated on its doc
// comment; or when a checked field has no case in validationCases.
func TestConfigFieldsAccountedFor(t *testing.T) {
	var paths []string
	leaves(reflect.TypeFor[Config](), "", &paths)
	for _, p := range paths {
		if _, ok := configFields[p]; !ok {
			t.Errorf("field %s is not accounted for: give it a default in ApplyDefaults (or none), a check in Validate (or none), and list it in configFields", p)
		}
	}
	for p := range configFields {
		if !slices.Contains(paths, p) {
			t.Errorf("configFields lists %s, which Config does not have", p)
		}
	}

	// Defaults: every pointer set, every list of structs holding one, all else zero.
	c := &Config{}
	allocate(reflect.ValueOf(c).Elem())
	c.ApplyDefaults()
	docs := fieldDocs(t)
	for _, p := range paths {
		f := configFields[p]
		v := valueAt(reflect.ValueOf(c), strings.ReplaceAll(strings.ReplaceAll(p, "[]", "[0]"), "<name>", "x"))
		got := "<nil>"
		if v.IsValid() {
			got = fmt.Sprint(v.Interface())
		}
		if got != f.def {
			t.Errorf("%s: default %q, configFields says %q", p, got, f.def)
		}
		if want := cmpOr(f.doc, f.def); !slices.Contains([]string{"", "0", "0s", "[]", "map[]", "false", "<nil>"}, f.def) {
			if doc := strings.Join(docs(p), ""); !strings.Contains(doc, want) {
				t.Errorf("%s: the doc comment does not state the default %s: %q", p, want, doc)
			}
		}
	}

	// Checks: a validation case names every checked field.
	checked := map[string]bool{}
	index := regexp.MustCompile(`\[\d+\]`)
	upstreamName := regexp.MustCompile(`^upstreams\.[^.]+`)
	for _, tc := range validationCases {
		for _, w := range tc.want {
			path, _, _ := strings.Cut(w, ": ")
			path = upstreamName.ReplaceAllString(path, "upstreams.<name>")
			checked[strings.TrimSuffix(index.ReplaceAllString(path, "[]"), "[]")] = true
		}
	}
	for _, p := range paths {
		if configFields[p].checked && !checked[p] {
			t.Errorf("%s is checked, but no case of validationCases shows it", p)
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// leaves lists the YAML paths of the settings below t, "[]" standing for a list index.
func leaves(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Struct:
		for i := range t.NumField() {
			if name := yamlName(t.Field(i)); name != "" {
				leaves(t.Field(i).Type, join(prefix, name), out)
			}
		}
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		leaves(t.Elem(), prefix+"[]", out)
	case t.Kind() == reflect.Map && t.Elem().Kind() == reflect.Struct:
		leaves(t.Elem(), prefix+".<name>", out)
	default:
		*out = append(*out, prefix)
	}
}

// allocate sets every nil pointer to a struct and gives every list of structs one
// element, so that every setting has a place.
func allocate(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.Type().Elem().Kind() == reflect.Struct {
			v.Set(reflect.New(v.Type().Elem()))
			allocate(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				allocate(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Struct {
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
			allocate(v.Index(0))
		}
	case reflect.Map:
		if v.Type().Elem().Kind() == reflect.Struct {
			e := reflect.New(v.Type().Elem()).Elem()
			allocate(e)
			v.Set(reflect.MakeMap(v.Type()))
			v.SetMapIndex(reflect.ValueOf("x"), e)
		}
	}
}

// fieldDocs returns a function giving the doc comments of the fields along a path,
// from config.go.
func fieldDocs(t *testing.T) func(path string) []string {
	fset := token.NewFileSet()
	// The types live in config.go and, one concern to a file, beside it (acme.go).
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{} // "Type.Field"
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		inspectDocs(f, docs)
	}
	return fieldDocsOf(docs)
}

// inspectDocs records the doc comment of every struct field of f as docs["Type.Field"].
func inspectDocs(f *ast.File, docs map[string]string) {
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		if st, ok := ts.Type.(*ast.StructType); ok {
			for _, field := range st.Fields.List {
				for _, name := range field.Names {
					docs[ts.Name.Name+"."+name.Name] = field.Doc.Text()
				}
			}
		}
		return false
	})
}

// fieldDocsOf returns the doc comments along a field path, from docs.
func fieldDocsOf(docs map[string]string) func(path string) []string {
	return func(path string) []string {
		var along []string
		typ := reflect.TypeFor[Config]()
		for _, seg := range strings.Split(strings.ReplaceAll(path, "[]", ""), ".") {
			if seg == "<name>" {
				continue
			}
			for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
				typ = typ.Elem()
			}
			_, index := yamlFields(typ)
			field := typ.Field(index[seg])
			along = append(along, docs[typ.Name()+"."+field.Name])
			typ = field.Type
		}
		return along
	}
}

// TestConfigDocumented: every setting has a doc comment (STYLE.md, "Configuration").
func TestConfigDocumented(t *testing.T) {
	docs := fieldDocs(t)
	var paths []string
	leaves(reflect.TypeFor[Config](), "", &paths)
	for _, p := range paths {
		for i, doc := range docs(p) {
			if doc == "" {
				t.Errorf("%s: field %d of the path has no doc comment", p, i+1)
			}
		}
	}
}

// FuzzParse: Parse, ApplyDefaults and Validate never panic, every problem comes out as
// a FieldError line, Validate repeats Parse's problems, and ApplyDefaults is idempotent.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/config/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("f.yaml", data)
		checkErr(t, err)
		if c == nil {
			if err == nil {
				t.Fatal("Parse returned neither a Config nor an error")
			}
			return
		}
		c.ApplyDefaults()
		verr := c.Validate()
		checkErr(t, verr)
		if err != nil && verr == nil {
			t.Fatalf("Parse: %v; Validate: nil", err)
		}
		_ = c.AltSvcValue()
		_ = c.Redacted()
		once := marshal(t, c)
		c.ApplyDefaults()
		if twice := marshal(t, c); twice != once {
			t.Fatalf("ApplyDefaults is not idempotent:\n%s", lineDiff(once, twice))
		}
	})
}

func checkErr(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	ve, ok := err.(ValidationError)
	if !ok || len(ve) == 0 {
		t.Fatalf("error %T %v, want a non-empty ValidationError", err, err)
	}
	for _, e := range ve {
		if e.Problem == "" || strings.Contains(e.Problem, "\n") || strings.Contains(e.Path, "\n") {
			t.Fatalf("malformed FieldError %#v", e)
		}
	}
}
