package scenario

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestAttacks runs every attack in short mode against a real h3edge on loopback and
// asserts its functional outcome (RunAttack's checks: h3edge alive and serving the
// legitimate clients, the attacker banned, its connections ended in time, the 408,
// memory within 4× idle). The attacker runs in this process: short mode asserts no
// latency figure.
func TestAttacks(t *testing.T) {
	for _, name := range AttackNames() {
		t.Run(name, func(t *testing.T) {
			opt := scenarioOptions(t)
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			rep, err := RunAttack(ctx, name, opt)
			if err != nil {
				t.Fatal(err)
			}
			var text strings.Builder
			rep.WriteText(&text)
			t.Logf("\n%s", text.String())
			if !rep.Holds {
				t.Errorf("claim does not hold: %s", rep.Verdict)
			}
			if b, err := json.Marshal(rep); err != nil || !json.Valid(b) {
				t.Errorf("JSON: %v %s", err, b)
			}
		})
	}
}
