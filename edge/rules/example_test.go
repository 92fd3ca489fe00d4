package rules_test

import (
	"fmt"
	"time"

	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/rules"
)

func ExampleCompile() {
	cfg := config.Default()
	cfg.Policies = []config.Policy{
		{Name: "burst", Key: []string{"header:X-API-Key", "ip"}, Quota: 100, Window: time.Minute},
		{Name: "inflight", Unit: "concurrent-requests", Algorithm: "concurrency", Quota: 20},
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	rs, err := rules.Compile(cfg, nil)
	if err != nil {
		panic(err)
	}
	for _, r := range rs.Policies {
		fmt.Println(r.Name, r.Unit == rules.ConcurrentRequests, rs.Chains[r.Chain])
	}
	fmt.Println(rs.PolicyField(rs.Policies[0].Bit | rs.Policies[1].Bit))
	// Output:
	// burst false [header:X-Api-Key ip]
	// inflight true [ip]
	// ["burst";q=100;w=60, "inflight";q=20;qu="concurrent-requests"]
}
