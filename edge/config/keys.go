package config

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxKeyLen bounds a client key (API key, token): the edge refuses longer ones with 400,
// and a keys file may not hold one.
const MaxKeyLen = 256

// ValidKey reports whether v can be a client key: at most MaxKeyLen bytes, without
// control characters. A keys file's keys must be; the edge refuses other keys with 400.
func ValidKey(v string) bool {
	if len(v) > MaxKeyLen {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// maxKeys bounds keys.file, as the edge bounds keys.redis_hash: 5 000 000 keys.
const maxKeys = 5_000_000

// ReadKeys reads a keys file (keys.file) from f, named file in its problems: a YAML
// mapping {api-key: plan}. It returns each key's plan under hash(key), so that the raw
// keys are dropped as they are read (the edge hashes them as it does client keys). Its
// problems come as a ValidationError placed in the file: the first 50, and a count of
// the rest; an error reading f is wrapped, naming file.
func ReadKeys[K comparable](f io.ReadSeeker, file string, hash func(key string) K) (map[K]string, error) {
	keys := map[K]string{}
	names := map[string]string{} // one string per plan name, not one per key
	var errs problemList
	var dups map[K][]FieldError // repeated keys, told with their first line below
	ndups, full := 0, false
	fail := func(line, col int, problem string) {
		errs.add(FieldError{File: file, Line: line, Col: col, Problem: problem})
	}
	err := scanKeys(f, func(e keyEntry) {
		switch {
		case e.problem != "":
			fail(e.line, e.col, e.problem)
			return
		case e.key == "" || !ValidKey(e.key):
			fail(e.line, e.col, "a key is empty, longer than 256 bytes or has control characters")
			return
		}
		k := hash(e.key)
		if _, dup := keys[k]; dup {
			switch {
			case e.merged: // what a merge (<<) brings in gives way to what is written out
			case ndups >= maxProblems: // after maxProblems others: not listed, only counted
				errs.more++
			default:
				if dups == nil {
					dups = map[K][]FieldError{}
				}
				dups[k] = append(dups[k], FieldError{File: file, Line: e.line, Col: e.col})
				ndups++
			}
			return
		}
		if len(keys) == maxKeys {
			if !full {
				fail(e.line, e.col, fmt.Sprintf("more than %d keys", maxKeys))
				full = true
			}
			return
		}
		name, ok := names[e.plan]
		if !ok {
			name = strings.Clone(e.plan)
			names[name] = name
		}
		keys[k] = name
	})
	if err != nil {
		return nil, fmt.Errorf("keys.file %s: %w", file, err)
	}
	if len(dups) > 0 {
		// Keys are hashed and dropped as they are read: find the first line of each
		// repeated one by reading the file again, only now that there are some.
		first := map[K]int{}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, fmt.Errorf("keys.file %s: %w", file, err)
		}
		scanKeys(f, func(e keyEntry) {
			if e.problem != "" || !ValidKey(e.key) {
				return
			}
			if k := hash(e.key); dups[k] != nil && first[k] == 0 {
				first[k] = e.line
			}
		})
		for k, list := range dups {
			for _, fe := range list {
				fe.Problem = fmt.Sprintf("repeated key; it is already set on line %d", first[k])
				errs.add(fe)
			}
		}
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return keys, nil
}

// keyEntry is one entry of a keys file, or a problem at a place of it.
type keyEntry struct {
	key, plan string // valid only until the callback returns
	line, col int
	merged    bool   // brought in by a merge key (<<)
	problem   string // what is wrong at line:col, instead of an entry
}

// These bound the YAML that scanKeys hands to the YAML parser at once.
const (
	maxKeysPiece       = 1000     // entries
	maxKeysPieceBytes  = 1 << 20  // bytes, at an entry's start
	maxKeysPieceLength = 16 << 20 // bytes of one entry: past it, a problem
)

// scanKeys reads a keys file, a YAML mapping {api-key: plan}, and calls fn for each
// entry and each problem, in file order. It reads it a line at a time: the yaml.v3
// decoder checks a mapping's keys for repeats in quadratic time and holds the whole
// file's nodes, so a file of a million keys would take minutes and gigabytes. A line
// "key: plan" of plain words, the form the file almost always has, is read directly;
// any other YAML (quotes, flow style, comments within an entry, anchors) is parsed by
// yaml.v3 a piece at a time, a piece being whole top-level entries: a line that starts
// in column 0 always begins a top-level node of a block mapping, so the pieces mean
// what the file means, except that an alias cannot name an anchor of another piece
// (pieces are runs of consecutive entries that are not plain lines).
// The error is one reading the file; problems go to fn.
func scanKeys(r io.Reader, fn func(keyEntry)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		piece      []byte // top-level entries for the YAML parser
		pieceLine  int    // the line piece starts on
		pieceCount int    // entries in piece, document markers and directives aside
		emitted    bool   // entries went to fn before piece: it is not the whole file
		pending    []byte // an entry's first line, "key: plan" unless a continuation follows
		pendingAt  int    // its line; 0: none
		held       []byte // blank and comment lines after pending
		entries    int    // top-level lines seen, for the document markers
		line       int
	)
	flush := func(final bool) {
		if len(piece) > 0 {
			keysPiece(piece, pieceLine, final && !emitted, pieceCount, fn)
			emitted = emitted || pieceCount > 0
		}
		piece, pieceCount = piece[:0], 0
	}
	appendPiece := func(b []byte, at int) {
		if len(piece) == 0 {
			pieceLine = at
		}
		piece = append(piece, b...)
		if len(piece) > maxKeysPieceLength {
			fn(keyEntry{line: pieceLine, col: 1, problem: fmt.Sprintf("an entry longer than %d MiB; write one key per line", maxKeysPieceLength>>20)})
			piece = piece[:0]
		}
	}
	// settle decides the pending line: continued says whether a continuation follows.
	settle := func(continued bool) {
		if pendingAt == 0 {
			return
		}
		if k, v, ok := plainEntry(pending); ok && !continued {
			flush(false) // the pieces before come first
			fn(keyEntry{key: k, plan: v, line: pendingAt, col: 1})
			emitted = true
		} else {
			if pieceCount >= maxKeysPiece || len(piece) >= maxKeysPieceBytes {
				flush(false)
			}
			appendPiece(pending, pendingAt)
			appendPiece(held, pendingAt+1)
			if !isMarker(pending, "---") && pending[0] != '%' {
				pieceCount++
			}
		}
		pending, pendingAt, held = pending[:0], 0, held[:0]
	}
	for {
		b, err := br.ReadSlice('\n')
		cut := false
		if err == bufio.ErrBufferFull {
			// A line longer than the buffer: only YAML beyond "key: plan" has them.
			full := append([]byte(nil), b...)
			for err == bufio.ErrBufferFull {
				b, err = br.ReadSlice('\n')
				if cut = cut || len(full)+len(b) > maxKeysPieceLength; !cut {
					full = append(full, b...)
				}
			}
			b = full
		}
		if err != nil && err != io.EOF {
			return err
		}
		if len(b) == 0 {
			break
		}
		line++
		if cut {
			settle(false)
			fn(keyEntry{line: line, col: 1, problem: fmt.Sprintf("a line longer than %d MiB; write one key per line", maxKeysPieceLength>>20)})
			continue
		}
		blank := len(bytes.Trim(b, " \t\r\n")) == 0
		switch {
		case pendingAt != 0 && (blank || b[0] == '#'):
			held = append(held, b...) // a continuation may follow yet
		case blank || b[0] == ' ' || b[0] == '\t' || b[0] == '#':
			// A continuation of the entry before, or a blank or comment line.
			settle(!blank)
			appendPiece(b, line)
		case entries > 0 && (isMarker(b, "---") || isMarker(b, "...")):
			settle(false)
			flush(false)
			fn(keyEntry{line: line, col: 1, problem: "a second YAML document; the file must hold one mapping (remove this line and what follows)"})
			return nil
		default:
			settle(false)
			if !isMarker(b, "---") && b[0] != '%' {
				entries++
			}
			pending, pendingAt = append(pending, b...), line
		}
		if err != nil {
			break
		}
	}
	settle(false)
	flush(true)
	return nil
}

// isMarker reports whether line is the document marker m ("---" or "..."), alone or
// followed by a space.
func isMarker(line []byte, m string) bool {
	return bytes.HasPrefix(line, []byte(m)) && (len(line) == 3 || bytes.IndexByte([]byte(" \t\r\n"), line[3]) >= 0)
}

// plainEntry reads a line "key: plan" of plain words, perhaps with a comment after, and
// reports whether it is one: words that YAML reads as the strings they spell (not null,
// no quotes, escapes or indicators), so that yaml.v3 would give the same.
func plainEntry(line []byte) (key, plan string, ok bool) {
	line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
	i := plainWord(line)
	if i == 0 || i+1 >= len(line) || line[i] != ':' || line[i+1] != ' ' {
		return "", "", false
	}
	rest := bytes.TrimLeft(line[i+1:], " ")
	j := plainWord(rest)
	if j == 0 {
		return "", "", false
	}
	if tail := bytes.TrimLeft(rest[j:], " "); len(tail) > 0 && (tail[0] != '#' || len(tail) == len(rest[j:]) || !printable(tail)) {
		return "", "", false // more than a comment after the plan, or one to leave to yaml.v3
	}
	k, v := line[:i], rest[:j]
	if isNullWord(k) || isNullWord(v) {
		return "", "", false
	}
	return string(k), string(v), true
}

// plainWord returns the length of the word that b starts with: a letter, digit or '_',
// then letters, digits and "_.-~+/=@"; 0 if b does not start with one.
func plainWord(b []byte) int {
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_':
		case i > 0 && strings.IndexByte(".-~+/=@", c) >= 0:
		default:
			return i
		}
	}
	return len(b)
}

// printable reports whether b is printable ASCII and tabs, which YAML takes as it is.
func printable(b []byte) bool {
	for _, c := range b {
		if (c < 0x20 || c > 0x7e) && c != '\t' {
			return false
		}
	}
	return true
}

func isNullWord(b []byte) bool {
	s := string(b)
	return s == "null" || s == "Null" || s == "NULL"
}

// keysPiece parses piece, whole top-level entries of a keys file starting on line
// first, with yaml.v3, and calls fn for each entry and problem. Unless the piece is
// the whole file, it must be what a part of a block mapping at column 1 is: a block
// mapping there, or comments only if it has no entries.
func keysPiece(piece []byte, first int, whole bool, entries int, fn func(keyEntry)) {
	at := func(n *yaml.Node) (int, int) { return first + n.Line - 1, n.Column }
	var doc yaml.Node
	if err := yaml.Unmarshal(piece, &doc); err != nil {
		ve := syntaxError("", piece, err).(ValidationError)
		fn(keyEntry{line: first + ve[0].Line - 1, col: ve[0].Col,
			problem: strings.Replace(ve[0].Problem, "invalid YAML", "must be a mapping of API key to plan name; invalid YAML", 1)})
		return
	}
	if len(doc.Content) == 0 || isNull(resolve(doc.Content[0])) {
		if entries > 0 && !whole {
			fn(keyEntry{line: first, col: 1, problem: "must be a mapping of API key to plan name; this line is not an entry of it"})
		}
		return
	}
	root := resolve(doc.Content[0])
	line, col := at(doc.Content[0])
	switch {
	case root.Kind != yaml.MappingNode:
		fn(keyEntry{line: line, col: col, problem: "must be a mapping of API key to plan name, not " + kindName(root.Kind)})
		return
	case !whole && (root.Style&yaml.FlowStyle != 0 || root.Column != 1):
		fn(keyEntry{line: line, col: col, problem: "must be a mapping of API key to plan name; this line is not an entry of it"})
		return
	}
	budget := countNodes(root) + maxNodes // as in Parse: what merges repeat is bounded
	keysMapping(root, false, at, fn, &budget)
}

// keysMapping calls fn for each entry of m, those written out first, then those that
// merge keys (<<) bring in.
func keysMapping(m *yaml.Node, merged bool, at func(*yaml.Node) (int, int), fn func(keyEntry), budget *int) {
	if *budget -= len(m.Content); *budget < 0 {
		if *budget+len(m.Content) >= 0 { // once
			line, col := at(m)
			fn(keyEntry{line: line, col: col, problem: "too many values (is an alias repeated?)"})
		}
		return
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if isMerge(k) {
			continue
		}
		line, col := at(k)
		key, ok := scalarString(k)
		if !ok {
			fn(keyEntry{line: line, col: col, problem: "a key must be a single value, not " + kindName(resolve(k).Kind)})
			continue
		}
		plan, ok := scalarString(v)
		if !ok {
			vl, vc := at(v)
			fn(keyEntry{line: vl, col: vc, problem: "a plan must be a name, not " + kindName(resolve(v).Kind)})
			continue
		}
		fn(keyEntry{key: key, plan: plan, line: line, col: col, merged: merged})
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if !isMerge(m.Content[i]) {
			continue
		}
		src := resolve(m.Content[i+1])
		srcs := []*yaml.Node{src}
		if src.Kind == yaml.SequenceNode {
			srcs = src.Content
		}
		for _, s := range srcs {
			if s := resolve(s); s.Kind == yaml.MappingNode {
				keysMapping(s, true, at, fn, budget)
			} else {
				line, col := at(m.Content[i])
				fn(keyEntry{line: line, col: col, problem: "a merge (<<) takes a mapping or a list of mappings"})
			}
		}
	}
}

// scalarString decodes a scalar as yaml.v3 decodes it into a string: null is "".
func scalarString(n *yaml.Node) (string, bool) {
	r := resolve(n)
	if r.Kind != yaml.ScalarNode {
		return "", false
	}
	var s string
	if err := r.Decode(&s); err != nil {
		return "", false
	}
	return s, true
}
