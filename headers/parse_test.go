package headers

import (
	"errors"
	"reflect"
	"testing"

	"github.com/dunglas/httpsfv"
)

func TestParsePolicyField(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   []PolicyItem
	}{
		{
			name:   "draft example without space",
			values: []string{`"burst";q=100;w=60,"daily";q=1000;w=86400`},
			want: []PolicyItem{
				{Name: "burst", Quota: 100, Window: 60, Unit: UnitRequests},
				{Name: "daily", Quota: 1000, Window: 86400, Unit: UnitRequests},
			},
		},
		{
			name:   "draft example with pk",
			values: []string{`"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:`},
			want: []PolicyItem{{Name: "peruser", Quota: 65535, Window: 10, Unit: UnitContentBytes,
				PartitionKey: []byte{0xb1, 0xd7, 0xe3, 0x2c, 0x95, 0x0e, 0x50}}},
		},
		{
			name:   "split across field lines",
			values: []string{`"burst";q=100;w=60`, `"inflight";q=10;qu="concurrent-requests"`},
			want: []PolicyItem{
				{Name: "burst", Quota: 100, Window: 60, Unit: UnitRequests},
				{Name: "inflight", Quota: 10, Unit: UnitConcurrentRequests},
			},
		},
		{
			name:   "malformed items skipped, others kept",
			values: []string{`token;q=1, ("a");q=1, "noq";w=1, "negq";q=-1, "decq";q=1.5, "strq";q="1", "w0";q=1;w=0, "wneg";q=1;w=-5, "wtok";q=1;w=x, "qutok";q=1;qu=requests, "pkstr";q=1;pk="x", "ok";q=0`},
			want:   []PolicyItem{{Name: "ok", Quota: 0, Unit: UnitRequests}},
		},
		{
			name:   "unknown parameters and units kept as comments",
			values: []string{`"a";q=5;*vendor-x=?1;comment="hi";qu="parsecs"`},
			want:   []PolicyItem{{Name: "a", Quota: 5, Unit: "parsecs"}},
		},
		{
			name:   "repeated parameter: last value wins",
			values: []string{`"a";q=-1;q=7, "b";q=7;q=-1`},
			want:   []PolicyItem{{Name: "a", Quota: 7, Unit: UnitRequests}},
		},
		{
			name:   "escaped name",
			values: []string{`"a\"b\\c";q=1`},
			want:   []PolicyItem{{Name: `a"b\c`, Quota: 1, Unit: UnitRequests}},
		},
		{name: "absent", values: nil, want: nil},
		{name: "empty", values: []string{""}, want: nil},
		{name: "only bad items", values: []string{`"x";w=1`}, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePolicyField(tt.values)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParsePolicyField() = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestParseLimitField(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   []LimitItem
	}{
		{
			name:   "draft example",
			values: []string{`"default";r=50;t=30`},
			want:   []LimitItem{{Name: "default", Remaining: 50, Reset: 30, HasReset: true}},
		},
		{
			name:   "draft example with pk",
			values: []string{`"default";r=300000000;t=60;pk=:QXBwLTk5OQ==:`},
			want:   []LimitItem{{Name: "default", Remaining: 300000000, Reset: 60, HasReset: true, PartitionKey: []byte("App-999")}},
		},
		{
			name:   "ours, concurrency without t",
			values: []string{`"burst";r=42;t=17, "inflight";r=3`},
			want: []LimitItem{
				{Name: "burst", Remaining: 42, Reset: 17, HasReset: true},
				{Name: "inflight", Remaining: 3},
			},
		},
		{
			name:   "malformed items skipped",
			values: []string{`"nor";t=1, "negr";r=-1, "decr";r=1.0, "boolr";r, "negt";r=1;t=-1, "dect";r=1;t=1.5, "datet";r=1;t=@5, tok;r=1, ("i");r=1, "pk";r=1;pk=?1, "t0";r=0;t=0`},
			want:   []LimitItem{{Name: "t0", Remaining: 0, Reset: 0, HasReset: true}},
		},
		{
			name:   "whitespace tolerated where RFC 9651 allows",
			values: []string{`   "a";r=1 ,	"b";r=2;  t=3   `},
			want:   []LimitItem{{Name: "a", Remaining: 1}, {Name: "b", Remaining: 2, Reset: 3, HasReset: true}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLimitField(tt.values)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseLimitField() = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestParseMalformedField(t *testing.T) {
	for _, v := range [][]string{
		{`"a";r=1,`},               // trailing comma
		{`"a";r=1`, ``},            // empty line joins to a trailing comma
		{`"a";r=1 "b";r=2`},        // missing comma
		{`"a;r=1`},                 // unterminated String
		{`"a";R=1`},                // upper-case key
		{`"a";r=1000000000000000`}, // 16 digits
		{`"a";pk=:AAA:`},           // base64 without padding
		{`"a";r=1;x=%"%C3%A9"`},    // upper-case hex in Display String
		{`"a";r=1;x=%"%ff"`},       // Display String not UTF-8
		{"\t\"a\";r=1"},            // leading tab
		{`"é";r=1`},                // non-ASCII in String
	} {
		ps, perr := ParsePolicyField(v)
		ls, lerr := ParseLimitField(v)
		if !errors.Is(perr, ErrMalformedField) || !errors.Is(lerr, ErrMalformedField) || ps != nil || ls != nil {
			t.Errorf("%q: got %v, %v, %v, %v; want ErrMalformedField and no items", v, ps, perr, ls, lerr)
		}
	}
}

// TestParseAgreesWithHTTPSFV pins the grammar corners random fuzzing reaches slowly.
func TestParseAgreesWithHTTPSFV(t *testing.T) {
	inputs := append([]string{
		`"a";r=1;x=123456789012345`, `"a";r=1;x=1234567890123456`, `"a";r=-999999999999999`,
		`"a";r=-0`, `"a";r=-`, `"a";r=-x`, `"a";r=1;x=-`,
		`"a";r=1;x=123456789012.123`, `"a";r=1;x=1234567890123.1`, `"a";r=1;x=1.1234`, `"a";r=1;x=1.`,
		`"a";r=1;x=1.2.3`, `"a";r=1;x=-1.5`, `"a";r=1;x=12345678901.1234`,
		`"a";r=1;x=@`, `"a";r=1;x=@-1`, `"a";r=1;x=@1.5`, `"a";r=1;x=@x`,
		`"a";r=1;x=?0`, `"a";r=1;x=?2`, `"a";r=1;x=?`,
		`"a";r=1;x=%"plain"`, `"a";r=1;x=%"%e2%82%ac"`, `"a";r=1;x=%"%e2%82"`, `"a";r=1;x=%"%ed%a0%80"`,
		`"a";r=1;x=%"%ef%bf%bd"`, `"a";r=1;x=%"%c3a"`, `"a";r=1;x=%"%c"`, `"a";r=1;x=%"%`, `"a";r=1;x=%x`, `"a";r=1;x=%`,
		"\"a\";r=1;x=%\"\x7f\"", `"a";r=1;x=%"unterminated`,
		`"a";r=1;pk=:YQ==:`, `"a";r=1;pk=:YR==:`, `"a";r=1;pk=:YQ=:`, `"a";r=1;pk=:Y===:`, `"a";r=1;pk=:====:`,
		`"a";r=1;pk=:YQ==`, `"a";r=1;pk=:Y-Q=:`, `"a";r=1;pk=:` + "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFB" + `:`,
		`"a";r=1;x=*`, `"a";r=1;x=*a:b/c`, `"a";r=1;x=a!#$%&'*+-.^_|~`, `"a";r=1;x=1a`,
		`"a";r=1;*=1`, `"a";r=1;a*._-9=1`, `"a";r=1;9=1`, `"a";r=1;`, `"a";r=1; x`, `"a";r=1;x=`,
		`("a" "b");r=1`, `("a";x=1 "b");r=1, "c";r=2`, `()`, `( )`, `("a")x`, `("a"`, `("a"  "b" )`, `("a"x)`,
		`"a";r=1	,	"b";r=2`, `"a";r=1, ,"b";r=2`, `"a";r=1,,"b";r=2`, `"a";r=1 `, "\"a\";r=1\t", "\"a\";r=1\t,",
		` `, `,`, `"`, `"\`, `"\"`, `"\a"`, `"a"`, `"a";q=1;r=1`, `x`, `!`, `"a";r=1;x=é`,
	}, parseSeeds...)
	for _, s := range inputs {
		for _, values := range [][]string{{s}, {s, `"z";r=9;q=9`}, {`"z";r=9;q=9`, s}} {
			ref, refErr := httpsfv.UnmarshalList(values)
			ps, perr := ParsePolicyField(values)
			ls, lerr := ParseLimitField(values)
			if (perr != nil) != (refErr != nil) || (lerr != nil) != (refErr != nil) {
				t.Errorf("%q: errors %v, %v; httpsfv %v", values, perr, lerr, refErr)
				continue
			}
			if refErr != nil {
				continue
			}
			if !reflect.DeepEqual(ps, refPolicies(ref)) {
				t.Errorf("%q: ParsePolicyField = %#v; httpsfv gives %#v", values, ps, refPolicies(ref))
			}
			if !reflect.DeepEqual(ls, refLimits(ref)) {
				t.Errorf("%q: ParseLimitField = %#v; httpsfv gives %#v", values, ls, refLimits(ref))
			}
		}
	}
}
