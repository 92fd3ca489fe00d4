package headers

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
)

// sfName maps arbitrary bytes onto printable ASCII, the characters an sf-string may hold.
func sfName(b string) string {
	out := make([]byte, len(b))
	for i := range len(b) {
		out[i] = 0x20 + b[i]%95
	}
	return string(out)
}

// refLimitList builds with httpsfv the List AppendLimitField should produce.
func refLimitList(ls []Limit) httpsfv.List {
	var l httpsfv.List
	for _, x := range ls {
		it := httpsfv.NewItem(x.Name)
		it.Params.Add("r", min(max(x.Remaining, 0), maxInteger))
		if !x.Concurrency {
			it.Params.Add("t", ceilSeconds(x.Reset))
		}
		if x.PartitionKey != nil {
			it.Params.Add("pk", x.PartitionKey)
		}
		l = append(l, it)
	}
	return l
}

func FuzzLimitField(f *testing.F) {
	f.Add("burst\ndaily", int64(42), int64(17*time.Second), uint8(0), []byte(nil))
	f.Add("default", int64(50), int64(30*time.Second), uint8(0), []byte(nil))
	f.Add("dynamic", int64(15), int64(40*time.Second), uint8(0), []byte(nil))
	f.Add("default", int64(300000000), int64(60*time.Second), uint8(0b10), []byte("App-999"))
	f.Add("inflight", int64(-3), int64(0), uint8(0b01), []byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Add("a\"b\\c\nx", int64(1<<62), int64(time.Nanosecond), uint8(0b1111), []byte{})
	f.Add("", int64(0), int64(-1), uint8(0), []byte(nil))
	f.Fuzz(func(t *testing.T, names string, remaining, reset int64, flags uint8, pk []byte) {
		var ls []Limit
		for i, n := range strings.SplitN(names, "\n", 4) {
			l := Limit{
				Name:        sfName(n),
				Remaining:   remaining >> i,
				Reset:       time.Duration(reset) >> i,
				Concurrency: flags&(1<<(2*i)) != 0,
			}
			if flags&(2<<(2*i)) != 0 {
				l.PartitionKey = pk
				if l.PartitionKey == nil {
					l.PartitionKey = []byte{}
				}
			}
			ls = append(ls, l)
		}
		got := AppendLimitField(nil, ls)
		want, err := httpsfv.Marshal(refLimitList(ls))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Fatalf("AppendLimitField(%+v)\n got %s\nwant %s", ls, got, want)
		}
		l, err := httpsfv.UnmarshalList([]string{string(got)})
		if err != nil {
			t.Fatalf("httpsfv cannot parse %s: %v", got, err)
		}
		if len(l) != len(ls) {
			t.Fatalf("%s: %d items, want %d", got, len(l), len(ls))
		}
		for i, m := range l {
			it, ok := m.(httpsfv.Item)
			if !ok || it.Value != ls[i].Name {
				t.Fatalf("%s: item %d = %#v, want String %q", got, i, m, ls[i].Name)
			}
			wantNames := []string{"r"}
			if !ls[i].Concurrency {
				wantNames = append(wantNames, "t")
			}
			if ls[i].PartitionKey != nil {
				wantNames = append(wantNames, "pk")
			}
			if !reflect.DeepEqual(it.Params.Names(), wantNames) {
				t.Fatalf("%s: item %d params %v, want %v", got, i, it.Params.Names(), wantNames)
			}
			if r, _ := it.Params.Get("r"); r != min(max(ls[i].Remaining, 0), maxInteger) {
				t.Fatalf("%s: item %d r = %#v", got, i, r)
			}
			if tv, ok := it.Params.Get("t"); ok && tv != ceilSeconds(ls[i].Reset) {
				t.Fatalf("%s: item %d t = %#v", got, i, tv)
			}
			if p, ok := it.Params.Get("pk"); ok && !bytes.Equal(p.([]byte), ls[i].PartitionKey) {
				t.Fatalf("%s: item %d pk = %#v", got, i, p)
			}
		}

		// Names that are not valid sf-strings still give a well-formed field.
		for i := range ls {
			ls[i].Name = strings.SplitN(names, "\n", 4)[i]
		}
		raw := AppendLimitField(nil, ls)
		if l, err := httpsfv.UnmarshalList([]string{string(raw)}); err != nil || len(l) != len(ls) {
			t.Fatalf("raw names: %q parses to %d items, %v", raw, len(l), err)
		}
	})
}

func FuzzPolicyField(f *testing.F) {
	f.Add("burst\ndaily", int64(100), int64(60*time.Second), uint8(0))
	f.Add("peruser", int64(65535), int64(10*time.Second), uint8(2))
	f.Add("inflight", int64(10), int64(0), uint8(3))
	f.Add("x", int64(maxInteger+1), int64(1500*time.Millisecond), uint8(1))
	f.Add("a\"b\\c", int64(-1), int64(-1), uint8(4))
	f.Add("dup\ndup", int64(1), int64(time.Second), uint8(0))
	f.Add("", int64(1), int64(time.Second), uint8(0))
	f.Fuzz(func(t *testing.T, names string, quota, window int64, unit uint8) {
		units := []Unit{"", UnitRequests, UnitContentBytes, UnitConcurrentRequests, "bogus"}
		var ps []Policy
		for i, n := range strings.SplitN(names, "\n", 4) {
			ps = append(ps, Policy{
				Name:   sfName(n),
				Quota:  quota >> i,
				Window: time.Duration(window) >> i,
				Unit:   units[int(unit>>i)%len(units)],
			})
		}
		valid := true
		for i, p := range ps {
			if p.Name == "" || p.Quota < 0 || p.Quota > maxInteger || p.Window < 0 || p.Unit == "bogus" {
				valid = false
			}
			for _, q := range ps[:i] {
				if q.Name == p.Name {
					valid = false
				}
			}
		}
		got, err := PolicyField(ps)
		if valid != (err == nil) {
			t.Fatalf("PolicyField(%+v) error = %v, want valid=%v", ps, err, valid)
		}
		if err != nil {
			return
		}

		var ref httpsfv.List
		for _, p := range ps {
			it := httpsfv.NewItem(p.Name)
			it.Params.Add("q", p.Quota)
			if p.Unit != "" && p.Unit != UnitRequests {
				it.Params.Add("qu", string(p.Unit))
			}
			if p.Window > 0 {
				it.Params.Add("w", ceilSeconds(p.Window))
			}
			ref = append(ref, it)
		}
		want, err := httpsfv.Marshal(ref)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("PolicyField(%+v)\n got %s\nwant %s", ps, got, want)
		}

		// httpsfv reads back what we wrote as well-formed items (the draft's rules: q a
		// non-negative Integer, w absent or a positive Integer, qu absent or a String).
		l, err := httpsfv.UnmarshalList([]string{got})
		if err != nil || len(l) != len(ps) {
			t.Fatalf("httpsfv parses %s to %d items, %v", got, len(l), err)
		}
		for i, m := range l {
			p := ps[i]
			it, _ := m.(httpsfv.Item)
			q, _ := it.Params.Get("q")
			w, hasW := it.Params.Get("w")
			window, _ := w.(int64)
			unit := UnitRequests
			if qu, ok := it.Params.Get("qu"); ok {
				s, _ := qu.(string)
				unit = Unit(s)
			}
			wantUnit := p.Unit
			if wantUnit == "" {
				wantUnit = UnitRequests
			}
			secs := p.Window.Seconds()
			if it.Value != p.Name || q != p.Quota || unit != wantUnit || hasW != (window > 0) ||
				window != ceilSeconds(p.Window) || float64(window) < secs || float64(window) >= secs+1 {
				t.Fatalf("httpsfv reads %s item %d as %#v, from %+v", got, i, m, p)
			}
		}
	})
}

// FuzzJSONString checks that problem documents escape strings exactly as encoding/json.
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "quote\" back\\ nl\n tab\t", "<script>&</script>", "\x00\x1f\x7f", "caf\xc3\xa9 \xff \u2028\u2029 \U0001F600"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("appendJSONString(%q) = %s, want %s", s, got, want)
		}
	})
}
