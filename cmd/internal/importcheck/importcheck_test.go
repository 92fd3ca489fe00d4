package importcheck

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestModuleImports: every import of every package of the module, as go list reports
// it for Linux, macOS and Windows (files with build constraints included), keeps to
// DESIGN §2's table.
func TestModuleImports(t *testing.T) {
	pkgs := map[string]imports{}
	for _, goos := range []string{"linux", "darwin", "windows"} {
		goList(t, goos, pkgs)
	}
	if len(pkgs) < len(rules) {
		t.Fatalf("go list found %d packages, fewer than the table's %d rows", len(pkgs), len(rules))
	}
	for _, p := range check(pkgs) {
		t.Error(p)
	}
}

// goList adds the imports of the module's packages for goos to pkgs; a package go list
// cannot load (an import cycle, say) is an error, and its imports are still checked.
// The go command is the one running the test (go test puts its GOROOT/bin first in
// PATH), with the environment's GOFLAGS.
func goList(t *testing.T, goos string, pkgs map[string]imports) {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,TestImports,XTestImports,Error", module+"/...")
	cmd.Env = append(os.Environ(), "GOOS="+goos)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("GOOS=%s go list: %v\n%s", goos, err, stderr.Bytes())
	}
	for d := json.NewDecoder(bytes.NewReader(out)); ; {
		var p struct {
			ImportPath                         string
			Imports, TestImports, XTestImports []string
			Error                              *struct{ Err string }
		}
		if err := d.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("GOOS=%s go list: %v", goos, err)
		}
		if p.Error != nil {
			t.Errorf("GOOS=%s %s: %s", goos, p.ImportPath, p.Error.Err)
		}
		imp := pkgs[p.ImportPath]
		imp.code = append(imp.code, p.Imports...)
		imp.tests = append(append(imp.tests, p.TestImports...), p.XTestImports...)
		pkgs[p.ImportPath] = imp
	}
}

// TestCheck: check passes the module's graph as the table draws it, and names the
// package, the import and the rule of each planted violation.
func TestCheck(t *testing.T) {
	const m = module + "/"
	base := func() map[string]imports {
		return map[string]imports{
			m + "headers":            {code: []string{"net/http", "github.com/dunglas/httpsfv"}, tests: []string{"testing", m + "headers"}},
			m + "limiter":            {code: []string{"sync"}, tests: []string{"golang.org/x/time/rate", m + "limiter"}},
			m + "limiter/redisstore": {code: []string{m + "limiter", "github.com/redis/go-redis/v9"}, tests: []string{"github.com/go-redis/redis_rate/v10"}},
			m + "quicconn":           {code: []string{"github.com/quic-go/quic-go", "golang.org/x/net/bpf"}},
			m + "certs":              {code: []string{"crypto/tls"}},
			m + "edge": {
				code: []string{m + "headers", m + "limiter", m + "limiter/redisstore", m + "quicconn", m + "certs",
					"github.com/prometheus/client_golang/prometheus/promhttp", "github.com/quic-go/quic-go/http3", "go.yaml.in/yaml/v3"},
				tests: []string{m + "bench", m + "bench/scenario", m + "edge", "github.com/redis/go-redis/v9", "github.com/chromedp/chromedp"},
			},
			m + "bench": {code: []string{m + "headers", "github.com/quic-go/quic-go/http3", "github.com/HdrHistogram/hdrhistogram-go"}},
			m + "bench/scenario": {code: []string{m + "bench", m + "bench/chart", m + "headers", "github.com/prometheus/common/expfmt"},
				tests: []string{m + "bench/scenario", "github.com/prometheus/client_golang/prometheus"}},
			m + "bench/chart":              {code: []string{"encoding/xml"}},
			m + "cmd/h3edge":               {code: []string{m + "edge"}, tests: []string{m + "bench"}},
			m + "cmd/h3bench":              {code: []string{m + "bench", m + "bench/scenario"}},
			m + "cmd/internal/importcheck": {tests: []string{"os/exec"}},
		}
	}
	for _, tc := range []struct {
		name     string
		pkg, imp string
		test     bool
		want     []string // in the one problem; none: no problem
	}{
		{name: "headers imports edge", pkg: "headers", imp: m + "edge",
			want: []string{"headers imports github.com/h3edge/h3edge/edge: nothing imports edge but cmd", "headers imports std, github.com/dunglas/httpsfv)"}},
		{name: "edge imports go-redis", pkg: "edge", imp: "github.com/redis/go-redis/v9",
			want: []string{"edge imports github.com/redis/go-redis/v9: only limiter/redisstore imports go-redis"}},
		{name: "limiter imports its store", pkg: "limiter", imp: m + "limiter/redisstore",
			want: []string{"limiter imports github.com/h3edge/h3edge/limiter/redisstore: limiter does not know its Redis store"}},
		{name: "bench imports a limiter sub-package", pkg: "bench", imp: m + "limiter/penalty",
			want: []string{"bench imports github.com/h3edge/h3edge/limiter/penalty: bench never imports edge or limiter"}},
		{name: "bench/scenario imports limiter", pkg: "bench/scenario", imp: m + "limiter",
			want: []string{"bench/scenario imports github.com/h3edge/h3edge/limiter: bench never imports edge or limiter"}},
		{name: "bench/chart imports edge", pkg: "bench/chart", imp: m + "edge",
			want: []string{"bench/chart imports github.com/h3edge/h3edge/edge: nothing imports edge but cmd"}},
		{name: "bench imports its scenarios", pkg: "bench", imp: m + "bench/scenario",
			want: []string{"bench imports github.com/h3edge/h3edge/bench/scenario: not in its row of the table"}},
		{name: "headers imports quic-go", pkg: "headers", imp: "github.com/quic-go/quic-go",
			want: []string{"headers imports github.com/quic-go/quic-go: headers and limiter know no server"}},
		{name: "certs imports http3", pkg: "certs", imp: "github.com/quic-go/quic-go/http3",
			want: []string{"certs imports github.com/quic-go/quic-go/http3: quicconn and certs know no HTTP server"}},
		{name: "quicconn imports prometheus", pkg: "quicconn", imp: "github.com/prometheus/client_golang/prometheus",
			want: []string{"quicconn imports github.com/prometheus/client_golang/prometheus: only edge imports Prometheus"}},
		{name: "cmd/h3bench imports quicconn", pkg: "cmd/h3bench", imp: m + "quicconn",
			want: []string{"cmd/h3bench imports github.com/h3edge/h3edge/quicconn: not in its row of the table (DESIGN §2: cmd/h3bench imports std, bench, bench/attack, bench/scenario)"}},
		{name: "a package outside the table", pkg: "util", imp: "fmt",
			want: []string{"github.com/h3edge/h3edge/util: not a package of DESIGN §2's table"}},
		{name: "bench's tests import edge", pkg: "bench", imp: m + "edge", test: true,
			want: []string{"bench's tests import github.com/h3edge/h3edge/edge: nothing imports edge but cmd", "any third-party package"}},
		{name: "limiter's tests import its store", pkg: "limiter", imp: m + "limiter/redisstore", test: true,
			want: []string{"limiter's tests import github.com/h3edge/h3edge/limiter/redisstore: limiter does not know its Redis store"}},

		{name: "the demo origin imports its server", pkg: "edge/demo", imp: m + "edge",
			want: []string{"edge/demo imports github.com/h3edge/h3edge/edge: nothing imports edge but cmd"}},
		{name: "the test helpers import go-redis", pkg: "bench/testkit", imp: "github.com/redis/go-redis/v9",
			want: []string{"bench/testkit imports github.com/redis/go-redis/v9: only limiter/redisstore imports go-redis"}},
		{name: "bench imports the demo origin", pkg: "bench", imp: m + "edge/demo",
			want: []string{"bench imports github.com/h3edge/h3edge/edge/demo: not in its row of the table"}},

		{name: "the bare baseline serves the demo origin", pkg: "bench/scenario", imp: m + "edge/demo"},
		{name: "any package's tests use the test helpers", pkg: "quicconn", imp: m + "bench/testkit", test: true},
		{name: "edge's sub-packages use the heap", pkg: "edge/admin", imp: m + "limiter/minheap"},
		{name: "a sub-package lives in its parent's room", pkg: "limiter/penalty", imp: m + "limiter"},
		{name: "edge imports a limiter sub-package", pkg: "edge", imp: m + "limiter/penalty"},
		{name: "a store imports a limiter sub-package", pkg: "limiter/redisstore", imp: m + "limiter/penalty"},
		{name: "tests import any third-party package", pkg: "headers", imp: "github.com/redis/go-redis/v9", test: true},
		{name: "the standard library", pkg: "certs", imp: "net/http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkgs := base()
			imp := pkgs[m+tc.pkg]
			if tc.test {
				imp.tests = append(imp.tests, tc.imp)
			} else {
				imp.code = append(imp.code, tc.imp)
			}
			pkgs[m+tc.pkg] = imp
			got := check(pkgs)
			if len(tc.want) == 0 {
				if len(got) != 0 {
					t.Errorf("problems %q, want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("problems %q, want one", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got[0], w) {
					t.Errorf("problem %q\ndoes not say %q", got[0], w)
				}
			}
		})
	}
}
