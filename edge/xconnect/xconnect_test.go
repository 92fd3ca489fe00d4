package xconnect_test

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/h3edge/h3edge/edge/xconnect"
)

// TestNoNetHTTP: the package must be initialised before net/http's HTTP/2 server, so
// it must not depend on net/http (its init would then run after net/http's).
func TestNoNetHTTP(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/h3edge/h3edge/edge/xconnect").Output()
	if err != nil {
		t.Fatal(err)
	}
	deps := strings.Fields(string(out))
	if i := slices.IndexFunc(deps, func(p string) bool { return strings.HasPrefix(p, "net/http") }); i >= 0 {
		t.Errorf("edge/xconnect depends on %s", deps[i])
	}
}

func ExampleEnabled() {
	// In a binary that links edge (or this package), net/http's HTTP/2 server
	// advertises extended CONNECT unless the operator's GODEBUG says otherwise.
	fmt.Println(xconnect.Enabled())
	// Output: true
}
