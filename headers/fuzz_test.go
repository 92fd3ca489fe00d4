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

// The draft's examples and a few shapes that stress the grammar.
var parseSeeds = []string{
	`"burst";q=100;w=60,"daily";q=1000;w=86400`,
	`"burst";q=100;w=60, "daily";q=1000;w=86400`,
	`"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:`,
	`"default";r=50;t=30`,
	`"dynamic";q=100;w=60`,
	`"dynamic";r=15;t=40`,
	`"default";r=300000000;t=60;pk=:QXBwLTk5OQ==:`,
	`"burst";r=42;t=17, "daily";r=913;t=80211`,
	`"c";r=3;pk=::`,
	`"x";q=-1, "y";q=5;q=-1;q=7, token;q=1, ("a" "b");q=1, "z";w=0;q=1`,
	`"a";r=1;t=1.5, "b";r=1.0, "c";r=?1, "d";r=@1700000000, "e";r=1;t=%"caf%c3%a9"`,
	"\t\"a\";r=1",
	`"a";r=1,`,
	`"a\"b\\c";r=1;*vendor=*tok;v-x.y_z*=:AAEC:`,
	`"a";q=999999999999999;w=1, "b";q=1000000000000000`,
	`"u";q=10;qu="concurrent-requests", "v";q=1;qu=requests`,
	"\"a\";r=1\n\"b\";r=2",
	``,
	` `,
}

// refPolicies interprets an httpsfv List with the draft's rules, independently of our parser.
func refPolicies(l httpsfv.List) []PolicyItem {
	var out []PolicyItem
	for _, m := range l {
		it, ok := m.(httpsfv.Item)
		if !ok {
			continue
		}
		name, ok := it.Value.(string)
		if !ok {
			continue
		}
		pi := PolicyItem{Name: name, Unit: UnitRequests}
		q, ok := it.Params.Get("q")
		if pi.Quota, ok = q.(int64); !ok || pi.Quota < 0 {
			continue
		}
		if w, ok := it.Params.Get("w"); ok {
			if pi.Window, ok = w.(int64); !ok || pi.Window <= 0 {
				continue
			}
		}
		if qu, ok := it.Params.Get("qu"); ok {
			s, ok := qu.(string)
			if !ok {
				continue
			}
			pi.Unit = Unit(s)
		}
		if pk, ok := it.Params.Get("pk"); ok {
			if pi.PartitionKey, ok = pk.([]byte); !ok {
				continue
			}
		}
		out = append(out, pi)
	}
	return out
}

func refLimits(l httpsfv.List) []LimitItem {
	var out []LimitItem
	for _, m := range l {
		it, ok := m.(httpsfv.Item)
		if !ok {
			continue
		}
		name, ok := it.Value.(string)
		if !ok {
			continue
		}
		li := LimitItem{Name: name}
		r, ok := it.Params.Get("r")
		if li.Remaining, ok = r.(int64); !ok || li.Remaining < 0 {
			continue
		}
		if t, ok := it.Params.Get("t"); ok {
			if li.Reset, ok = t.(int64); !ok || li.Reset < 0 {
				continue
			}
			li.HasReset = true
		}
		if pk, ok := it.Params.Get("pk"); ok {
			if li.PartitionKey, ok = pk.([]byte); !ok {
				continue
			}
		}
		out = append(out, li)
	}
	return out
}

func FuzzParse(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		values := strings.Split(s, "\n") // several field lines
		ref, refErr := httpsfv.UnmarshalList(values)

		ps, err := ParsePolicyField(values)
		if (err != nil) != (refErr != nil) {
			t.Fatalf("ParsePolicyField(%q) error = %v, httpsfv error = %v", values, err, refErr)
		}
		if err == nil && !reflect.DeepEqual(ps, refPolicies(ref)) {
			t.Fatalf("ParsePolicyField(%q)\n got %#v\nwant %#v", values, ps, refPolicies(ref))
		}
		if err != nil && ps != nil {
			t.Fatalf("ParsePolicyField(%q) returned items with error %v", values, err)
		}

		ls, err := ParseLimitField(values)
		if (err != nil) != (refErr != nil) {
			t.Fatalf("ParseLimitField(%q) error = %v, httpsfv error = %v", values, err, refErr)
		}
		if err == nil && !reflect.DeepEqual(ls, refLimits(ref)) {
			t.Fatalf("ParseLimitField(%q)\n got %#v\nwant %#v", values, ls, refLimits(ref))
		}
		if err != nil && ls != nil {
			t.Fatalf("ParseLimitField(%q) returned items with error %v", values, err)
		}
	})
}

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

		// Our own parser reads back what we wrote.
		items, err := ParsePolicyField([]string{got})
		if err != nil || len(items) != len(ps) {
			t.Fatalf("ParsePolicyField(%s) = %d items, %v", got, len(items), err)
		}
		for i, it := range items {
			p := ps[i]
			wantUnit := p.Unit
			if wantUnit == "" {
				wantUnit = UnitRequests
			}
			secs := p.Window.Seconds()
			if it.Name != p.Name || it.Quota != p.Quota || it.Unit != wantUnit ||
				it.Window != ceilSeconds(p.Window) || float64(it.Window) < secs || float64(it.Window) >= secs+1 {
				t.Fatalf("ParsePolicyField(%s)[%d] = %+v, from %+v", got, i, it, p)
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
