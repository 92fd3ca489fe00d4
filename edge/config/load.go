package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// MaxFileSize bounds a configuration file: 256 KiB, some thirty times a large one (a
// thousand policies). Past it Load and Parse refuse the file before they parse it, so
// that what a file costs to check stays bounded: a file of one-character values at the
// limit is 130 000 values, checked in a fraction of a second and some tens of MB.
const MaxFileSize = 256 << 10

// Load reads the configuration file at path and decodes it with Parse; an error reading
// it is returned as it is (an *fs.PathError). A file larger than MaxFileSize is refused
// unread. Load applies no defaults: callers set fields from flags, then call
// ApplyDefaults and Validate.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse decodes one YAML document (DESIGN.md §4) into a Config, strictly: an unknown
// key, a repeated key or a value of the wrong type is an error, and so is a second
// document, and data longer than MaxFileSize. Durations read as "250ms" or "10s". An
// empty file, or one with only comments, is the built-in defaults. file names the
// source in error messages.
//
// Parse applies no defaults. Its error is a ValidationError; after a syntax error the
// Config is nil, otherwise it holds whatever did decode, and Validate reports the
// decode problems again together with all the others, so "h3edge validate" can print
// every problem at once (the first 50, and how many more there are).
func Parse(file string, data []byte) (*Config, error) {
	if len(data) > MaxFileSize {
		return nil, ValidationError{{File: file, Problem: fmt.Sprintf(
			"the file is larger than %d KiB, the limit of a configuration file", MaxFileSize>>10)}}
	}
	c := &Config{File: file}
	root, err := document(file, data)
	if err != nil {
		return nil, err
	}
	if root == nil {
		return c, nil
	}
	// The budget lets every node of the file be visited once (mappings twice: see
	// mapping), and maxNodes more: what aliases repeat.
	budget := 2*countNodes(root) + maxNodes
	d := decoder{file: file, pos: map[string]position{}, shadowed: map[string]bool{}, budget: budget}
	d.value(root, reflect.ValueOf(c).Elem(), "")
	d.errs.trim()
	c.pos, c.decodeErrs, c.shadowed = d.pos, d.errs, d.shadowed

	// A second decoding, defaulted, tells which values a flag replaced since (see
	// Config.locate).
	parsed := &Config{}
	q := decoder{shadowed: map[string]bool{}, budget: budget}
	q.value(root, reflect.ValueOf(parsed).Elem(), "")
	parsed.ApplyDefaults()
	c.parsed = parsed

	return c, c.decodeErrs.err()
}

// Default returns the built-in configuration: what h3edge runs with no file.
func Default() *Config {
	c := &Config{}
	c.ApplyDefaults()
	return c
}

// maxNodes bounds the visits one decoding makes beyond the nodes of the file: aliases
// can repeat a subtree many times ("billion laughs").
const maxNodes = 100000

// countNodes counts the nodes of the tree at n, each once: aliases are not followed.
func countNodes(n *yaml.Node) int {
	c := 1
	for _, m := range n.Content {
		c += countNodes(m)
	}
	return c
}

// document parses data as a single YAML document and returns its root node, nil if
// there is none.
func document(file string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, syntaxError(file, data, err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, syntaxError(file, data, err)
	default:
		return nil, ValidationError{{File: file, Line: extra.Line, Col: extra.Column,
			Problem: `a second YAML document; the file must hold one (remove this "---" and what follows)`}}
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	root := doc.Content[0]
	if isNull(resolve(root)) {
		return nil, nil
	}
	return root, nil
}

// yamlLine matches the position prefix of go-yaml's syntax errors, which tell the
// line only.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// syntaxError turns a go-yaml syntax error into a ValidationError with a position.
func syntaxError(file string, data []byte, err error) error {
	msg := err.Error()
	line, col := 1, 1 // go-yaml omits "line N" for errors on the first line
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
		var anchor string
		if _, e := fmt.Sscanf(msg, "unknown anchor %s referenced", &anchor); e == nil {
			if i := bytes.Index(data, []byte("*"+strings.Trim(anchor, "'"))); i >= 0 {
				line, col = lineCol(data, i)
			}
		} else if i := badChar(data); i >= 0 {
			line, col = lineCol(data, i)
		}
	}
	return ValidationError{{File: file, Line: line, Col: col, Problem: "invalid YAML: " + msg}}
}

// badChar returns the offset of the first byte YAML does not allow, or -1.
func badChar(data []byte) int {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n <= 1 || r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f {
			return i
		}
		i += n
	}
	return -1
}

// lineCol returns the 1-based line and column (in characters) of offset i.
func lineCol(data []byte, i int) (line, col int) {
	before := data[:i]
	line = bytes.Count(before, []byte("\n")) + 1
	return line, utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:]) + 1
}

// decoder fills Config from a YAML node tree, guided by the Go types, recording the
// position of every field path and every problem, and going on after a problem so
// that all come out at once.
type decoder struct {
	file     string
	pos      map[string]position // nil: not recorded
	errs     problemList
	shadowed map[string]bool
	budget   int
	merging  map[*yaml.Node]bool // mappings being decoded, against "&a {<<: *a}"
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	stringType   = reflect.TypeFor[string]()
	sizeType     = reflect.TypeFor[Size]()
)

func (d *decoder) fail(n *yaml.Node, path, problem string) {
	d.shadowed[path] = true
	d.errs.add(FieldError{File: d.file, Line: n.Line, Col: n.Column, Path: clip(path), Problem: problem})
}

// spend counts one more node visited, and reports whether the budget allows it. A
// value the budget does not allow stays unset, and its path shadowed: a problem
// Validate found in it would not be true.
func (d *decoder) spend(n *yaml.Node, path string) bool {
	if d.budget--; d.budget < 0 {
		if d.budget == -1 {
			d.fail(n, path, "too many values (is an alias repeated?)")
		}
		d.shadowed[path] = true
		return false
	}
	return true
}

// value decodes n into v.
func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	if !d.spend(n, path) {
		return
	}
	r := resolve(n)
	if isNull(r) {
		v.Set(reflect.Zero(v.Type()))
		return
	}
	switch t := v.Type(); {
	case t.Kind() == reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		d.value(n, v.Elem(), path)
	case t.Kind() == reflect.Struct:
		d.mapping(n, r, v, path)
	case t.Kind() == reflect.Slice:
		d.sequence(n, r, v, path)
	case t.Kind() == reflect.Map:
		d.dict(n, r, v, path)
	default:
		d.scalar(n, r, v, path)
	}
}

func (d *decoder) scalar(n, r *yaml.Node, v reflect.Value, path string) {
	if r.Kind != yaml.ScalarNode {
		d.fail(n, path, "must be "+describe(v.Type())+", not "+kindName(r.Kind))
		return
	}
	if v.Type() == stringType && r.ShortTag() != "!!binary" {
		v.SetString(r.Value) // what r.Decode does, without its allocations
		return
	}
	x := reflect.New(v.Type())
	err := r.Decode(x.Interface())
	if err == nil && x.Elem().CanInt() && r.ShortTag() == "!!float" {
		// go-yaml truncates 1.5 to 1; a whole number written as 1e6 is fine.
		var f float64
		if r.Decode(&f) != nil || f != math.Trunc(f) {
			err = errors.New("not a whole number")
		}
	}
	if err != nil {
		got := r.Value
		if len(got) > 40 {
			got = got[:37] + "..."
		}
		d.fail(n, path, fmt.Sprintf("must be %s (got %q)", describe(v.Type()), got))
		return
	}
	v.Set(x.Elem())
}

func (d *decoder) sequence(n, r *yaml.Node, v reflect.Value, path string) {
	if r.Kind != yaml.SequenceNode {
		d.fail(n, path, "must be "+describe(v.Type())+", not "+kindName(r.Kind))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(r.Content), len(r.Content))
	for i, item := range r.Content {
		p := path
		if d.pos != nil { // paths name problems and positions, which a decoder without pos drops
			p += "[" + strconv.Itoa(i) + "]"
		}
		if d.pos != nil {
			d.pos[p] = place(item, item)
		}
		d.value(item, s.Index(i), p)
	}
	v.Set(s)
}

func (d *decoder) mapping(n, r *yaml.Node, v reflect.Value, path string) {
	if r.Kind != yaml.MappingNode {
		d.fail(n, path, "must be "+describe(v.Type())+", not "+kindName(r.Kind))
		return
	}
	if d.merging[r] {
		d.fail(n, path, "a merge (<<) takes in the mapping that holds it")
		return
	}
	if !d.spend(n, path) { // merges visit mappings without value
		return
	}
	if d.merging == nil {
		d.merging = map[*yaml.Node]bool{}
	}
	d.merging[r] = true
	defer delete(d.merging, r)
	names, index := yamlFields(v.Type())

	// Merge keys ("<<: *base") first, the later of several first, so that what is
	// written out in the mapping wins, as YAML wants.
	for i := 0; i+1 < len(r.Content); i += 2 {
		if !isMerge(r.Content[i]) {
			continue
		}
		m := resolve(r.Content[i+1])
		srcs := []*yaml.Node{r.Content[i+1]}
		if m.Kind == yaml.SequenceNode {
			srcs = m.Content
		}
		for j := len(srcs) - 1; j >= 0; j-- {
			if src := resolve(srcs[j]); src.Kind == yaml.MappingNode {
				d.mapping(srcs[j], src, v, path)
			} else {
				d.fail(srcs[j], path, "a merge (<<) takes a mapping or a list of mappings")
			}
		}
	}

	seen := map[string]int{}
	for i := 0; i+1 < len(r.Content); i += 2 {
		k, val := r.Content[i], r.Content[i+1]
		if isMerge(k) {
			continue
		}
		name, p, ok := d.key(k, path, seen)
		if !ok {
			continue
		}
		f, ok := index[name]
		if !ok {
			problem := "unknown field"
			if s := suggest(name, names); s != "" {
				problem += fmt.Sprintf("; did you mean %q?", s)
				d.shadowed[join(path, s)] = true
			}
			d.fail(k, p, problem)
			continue
		}
		if d.pos != nil {
			d.pos[p] = place(k, val)
		}
		d.value(val, v.Field(f), p)
	}
}

// key reads the key k of a mapping at path, with seen the keys so far and their lines,
// and returns its name and path; false after a problem (not a plain name, repeated).
func (d *decoder) key(k *yaml.Node, path string, seen map[string]int) (name, p string, ok bool) {
	kr := resolve(k)
	if kr.Kind != yaml.ScalarNode {
		d.fail(k, path, "a key must be a plain name, not "+kindName(kr.Kind))
		return "", "", false
	}
	name = kr.Value
	p = join(path, name)
	if line, dup := seen[name]; dup {
		d.fail(k, p, fmt.Sprintf("repeated key; it is already set on line %d", line))
		return "", "", false
	}
	seen[name] = k.Line
	return name, p, true
}

// dict decodes a mapping of names (upstreams:, a route's headers:) into a map with
// string keys; each entry's path is its parent's and the name, "upstreams.api".
func (d *decoder) dict(n, r *yaml.Node, v reflect.Value, path string) {
	if r.Kind != yaml.MappingNode {
		d.fail(n, path, "must be "+describe(v.Type())+", not "+kindName(r.Kind))
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(r.Content)/2)
	seen := map[string]int{}
	for i := 0; i+1 < len(r.Content); i += 2 {
		k, val := r.Content[i], r.Content[i+1]
		if isMerge(k) {
			d.fail(k, path, "a merge (<<) is not taken in a mapping of names; write the entries out")
			continue
		}
		name, p, ok := d.key(k, path, seen)
		if !ok {
			continue
		}
		if d.pos != nil {
			d.pos[p] = place(k, val)
		}
		e := reflect.New(v.Type().Elem()).Elem()
		d.value(val, e, p)
		m.SetMapIndex(reflect.ValueOf(name), e)
	}
	v.Set(m)
}

// place is where a problem with a key's value is shown: at the value when it is a
// scalar, else at the key.
func place(key, val *yaml.Node) position {
	if r := resolve(val); r.Kind == yaml.ScalarNode && !isNull(r) {
		return position{val.Line, val.Column}
	}
	return position{key.Line, key.Column}
}

func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 8; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func isMerge(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Value == "<<" && n.ShortTag() == "!!merge"
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return "a single value"
}

// describe names what a value of type t looks like in the file.
func describe(t reflect.Type) string {
	if t == durationType {
		return "a duration such as 10s"
	}
	if t == sizeType {
		return "a size such as 65536, 64KiB or 10MiB"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return describe(t.Elem())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64:
		return "a whole number"
	case reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "a list such as [a, b]"
	case reflect.Map:
		return "a mapping of names (name: value lines)"
	case reflect.Struct:
		return "a mapping (name: value lines)"
	}
	return t.String()
}

// yamlFields returns the YAML names of struct type t, in order, and each one's field
// index. The results are shared: do not modify them.
func yamlFields(t reflect.Type) (names []string, index map[string]int) {
	if f, ok := fieldCache.Load(t); ok {
		f := f.(*structFields)
		return f.names, f.index
	}
	f := &structFields{index: map[string]int{}}
	for i := range t.NumField() {
		if name := yamlName(t.Field(i)); name != "" {
			f.names = append(f.names, name)
			f.index[name] = i
		}
	}
	fieldCache.Store(t, f)
	return f.names, f.index
}

type structFields struct {
	names []string
	index map[string]int
}

// fieldCache maps a struct type to its *structFields.
var fieldCache sync.Map

// yamlName is the key of field f in the file, "" if it has none.
func yamlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	if name == "" {
		name = strings.ToLower(f.Name)
	}
	return name
}

// suggest returns the name closest to the misspelled s, or "" if none is close.
func suggest(s string, names []string) string {
	best, bestDist := "", max(1, len(s)/3)+1
	for _, n := range names {
		if d := editDistance(strings.ToLower(s), n); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance: insertions, deletions,
// substitutions and transpositions of neighbours each cost one.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b)) // not a typo; keep it cheap
	}
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
