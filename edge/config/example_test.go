package config_test

import (
	"fmt"
	"strings"

	"github.com/h3edge/h3edge/edge/config"
)

// Parse reports every problem of a file at once, each at its place.
func ExampleParse() {
	file := []byte(`listen: ":8443"
upstream: 127.0.0.1:9000
shutdown_timout: 5s
log_format: yaml
`)
	c, err := config.Parse("h3edge.yaml", file)
	if c == nil {
		fmt.Println(err) // not YAML at all
		return
	}
	c.ApplyDefaults()
	fmt.Println(c.Validate())
	// Output:
	// h3edge.yaml:2:11: upstream: must be an absolute http or https URL such as http://127.0.0.1:9000 (got "127.0.0.1:9000")
	// h3edge.yaml:3:1: shutdown_timout: unknown field; did you mean "shutdown_timeout"?
	// h3edge.yaml:4:13: log_format: unknown log format "yaml"; use one of text, json
}

// The order cmd/h3edge follows: load, let flags override, resolve defaults, validate.
func ExampleConfig_Validate() {
	c, err := config.Parse("h3edge.yaml", []byte("listen: \":8443\"\n"))
	if err != nil {
		fmt.Println(err)
		return
	}
	c.Listen = ":9443" // -listen :9443
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.Listen, c.ShutdownTimeout, c.AltSvcValue())
	// Output:
	// :9443 10s h3=":9443"; ma=86400
}

func ExampleDefault() {
	c := config.Default()
	fmt.Println(c.Listen, c.Admin.Listen, c.IP.Streams, c.LogFormat, c.AltSvcValue())
	// Output:
	// :8443 127.0.0.1:9090 {200 400} text h3=":8443"; ma=86400
}

func ExampleConfig_TrustedProxyPrefixes() {
	c := &config.Config{TrustedProxies: []string{"10.0.0.0/8", "192.0.2.7", "2001:db8::/32"}}
	c.ApplyDefaults()
	fmt.Println(c.TrustedProxyPrefixes())
	// Output:
	// [10.0.0.0/8 192.0.2.7/32 2001:db8::/32]
}

// ReadKeys keeps each key as hash gives it: the edge hashes them as it does client keys,
// this example keeps them as they are.
func ExampleReadKeys() {
	asIs := func(key string) string { return key }
	keys, err := config.ReadKeys(strings.NewReader("alpha: gold\nbeta: free\n"), "keys.yaml", asIs)
	fmt.Println(keys, err)
	_, err = config.ReadKeys(strings.NewReader("alpha: gold\nalpha: free\n"), "keys.yaml", asIs)
	fmt.Println(err)
	// Output:
	// map[alpha:gold beta:free] <nil>
	// keys.yaml:2:1: repeated key; it is already set on line 1
}
