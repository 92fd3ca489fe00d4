package edge

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/h3edge/h3edge/limiter"
)

// plans maps hashed API keys to plan names. Only hashes are kept: the raw keys of the
// file or the Redis hash are dropped once hashed.
type plans struct {
	byKey   map[limiter.Key]string
	file    string
	modTime time.Time
	size    int64
	hash    string // the Redis hash they came from (keys.redis_hash)
}

// redisPlansEvery is how often keys.redis_hash is read again: each read walks the whole
// hash, so not every 2 s like the files.
const redisPlansEvery = 10 * time.Second

// redisPlansTimeout bounds one read of keys.redis_hash.
const redisPlansTimeout = 5 * time.Second

// maxRedisPlans bounds keys.redis_hash: it is held whole in memory, twice while read.
const maxRedisPlans = 5_000_000

// hashScanner walks a Redis hash a page at a time: *redisstore.Store.
type hashScanner interface {
	ScanHash(ctx context.Context, key string, fn func(field, value string) error) error
}

// plansFromRedis reads keys.redis_hash, a Redis hash {api-key: plan}, walking it with
// HSCAN a page at a time so that a large hash never holds Redis up for long. As with
// keys.file, a key that could never be a client key refuses the whole read.
func plansFromRedis(ctx context.Context, c hashScanner, hash string, h hasher) (*plans, error) {
	p := &plans{byKey: map[limiter.Key]string{}, hash: hash}
	names := map[string]string{} // one string per plan name, not one per key
	err := c.ScanHash(ctx, hash, func(key, plan string) error {
		if key == "" || !validKey(key) {
			return errors.New("a key is empty, longer than 256 bytes or has control characters")
		}
		name, ok := names[plan]
		if !ok {
			name = plan
			names[name] = name
		}
		p.byKey[h.key('k', key)] = name
		if len(p.byKey) > maxRedisPlans {
			return fmt.Errorf("more than %d keys", maxRedisPlans)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("keys.redis_hash %s: %w", hash, err)
	}
	return p, nil
}

// loadPlans reads a keys file: a YAML mapping {api-key: plan}. Its problems come as a
// ValidationError placed in the file: the first maxProblems, and a count of the rest.
func loadPlans(file string, h hasher) (*plans, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("keys.file: %w", err)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("keys.file: %w", err)
	}
	defer f.Close()
	p := &plans{byKey: map[limiter.Key]string{}, file: file, modTime: fi.ModTime(), size: fi.Size()}
	names := map[string]string{} // one string per plan name, not one per key
	var errs problemList
	var dups map[limiter.Key][]FieldError // repeated keys, told with their first line below
	ndups, full := 0, false
	fail := func(line, col int, problem string) {
		errs.add(FieldError{File: file, Line: line, Col: col, Problem: problem})
	}
	err = scanKeys(f, func(e keyEntry) {
		switch {
		case e.problem != "":
			fail(e.line, e.col, e.problem)
			return
		case e.key == "" || !validKey(e.key):
			fail(e.line, e.col, "a key is empty, longer than 256 bytes or has control characters")
			return
		}
		k := h.key('k', e.key)
		if _, dup := p.byKey[k]; dup {
			switch {
			case e.merged: // what a merge (<<) brings in gives way to what is written out
			case ndups >= maxProblems: // after maxProblems others: not listed, only counted
				errs.more++
			default:
				if dups == nil {
					dups = map[limiter.Key][]FieldError{}
				}
				dups[k] = append(dups[k], FieldError{File: file, Line: e.line, Col: e.col})
				ndups++
			}
			return
		}
		if len(p.byKey) == maxKeysFile {
			if !full {
				fail(e.line, e.col, fmt.Sprintf("more than %d keys", maxKeysFile))
				full = true
			}
			return
		}
		name, ok := names[e.plan]
		if !ok {
			name = strings.Clone(e.plan)
			names[name] = name
		}
		p.byKey[k] = name
	})
	if err != nil {
		return nil, fmt.Errorf("keys.file %s: %w", file, err)
	}
	if len(dups) > 0 {
		// Keys are hashed and dropped as they are read: find the first line of each
		// repeated one by reading the file again, only now that there are some.
		first := map[limiter.Key]int{}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, fmt.Errorf("keys.file %s: %w", file, err)
		}
		scanKeys(f, func(e keyEntry) {
			if e.problem != "" || !validKey(e.key) {
				return
			}
			if k := h.key('k', e.key); dups[k] != nil && first[k] == 0 {
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
	return p, nil
}

// maxKeysFile bounds keys.file, as maxRedisPlans bounds keys.redis_hash.
const maxKeysFile = maxRedisPlans

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

// changed reports whether the file differs from what was loaded.
func (p *plans) changed() bool {
	fi, err := os.Stat(p.file)
	return err == nil && (!fi.ModTime().Equal(p.modTime) || fi.Size() != p.size)
}

// ReloadPlans re-reads keys.file or keys.redis_hash; on error the old plans stay.
func (s *Server) ReloadPlans() error {
	if hash := s.config().Keys.RedisHash; hash != "" {
		// Read outside reloadMu, so that a slow Redis holds up no configuration reload;
		// stored only if the configuration still names this hash.
		p, err := s.redisPlans(hash)
		if err != nil {
			return err
		}
		s.reloadMu.Lock()
		defer s.reloadMu.Unlock()
		if s.config().Keys.RedisHash == hash {
			s.plans.Store(p)
		}
		return nil
	}
	// The file is read outside reloadMu too (a million keys take about a second). A
	// configuration reload that started after this read and committed first wins; this
	// does not count as one (s.reloaded), since it does not read the configuration. A
	// reload that read the file before this and commits after it leaves older plans,
	// whose modification time the watcher then finds changed and reads again.
	gen := s.reloadGen.Add(1)
	keys := s.config().Keys
	p := &plans{}
	if keys.File != "" {
		var err error
		if p, err = loadPlans(keys.File, s.hasher); err != nil {
			s.log.Error("keys file reload failed; keeping the old plans", "error", err)
			return err
		}
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	switch now := s.config().Keys; {
	case gen < s.reloaded || now.File != keys.File || now.RedisHash != keys.RedisHash:
		// A reload committed meanwhile: its plans stand (a hash is read by the watcher).
		return nil
	case keys.File != "":
		s.log.Info("reloaded plans", "file", keys.File, "keys", len(p.byKey))
	}
	s.plans.Store(p)
	return nil
}

// redisPlans reads keys.redis_hash, logging what changed; on error it logs and returns
// the error, and the caller keeps the plans it has.
func (s *Server) redisPlans(hash string) (*plans, error) {
	if s.hashes == nil {
		return nil, fmt.Errorf("edge: keys.redis_hash needs redis")
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisPlansTimeout)
	defer cancel()
	p, err := plansFromRedis(ctx, s.hashes, hash, s.hasher)
	if err != nil {
		// Said once per outage; the retries that follow log at debug level.
		lvl := slog.LevelError
		if s.plansFailing.Swap(true) {
			lvl = slog.LevelDebug
		}
		s.log.Log(context.Background(), lvl, "reading the plans from Redis failed; keeping the old plans", "error", err)
		return nil, err
	}
	if s.plansFailing.Swap(false) {
		s.log.Info("plans read from Redis again", "hash", hash)
	}
	if old := s.plans.Load(); old == nil || old.hash != hash || !maps.Equal(old.byKey, p.byKey) {
		s.log.Info("plans loaded from redis", "hash", hash, "keys", len(p.byKey))
	}
	return p, nil
}

// watchFiles reloads keys.file and the certificate files when they change on disk,
// and keys.redis_hash every redisPlansEvery (every tick while the plans in force are
// not from it), until done is closed. It polls (every 2 s) rather than using inotify:
// no dependency, and it works on every filesystem, symlink swaps included.
func (s *Server) watchFiles(done <-chan struct{}) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	certsSeen := fileStamps(s.config().TLS.Certificates)
	every := cmp.Or(s.opts.redisPlansEvery, redisPlansEvery)
	nextRedis := time.Now().Add(every - time.Second)
	for {
		select {
		case <-done:
			return
		case now := <-tick.C:
			if p := s.plans.Load(); p.file != "" && p.changed() {
				s.ReloadPlans()
			}
			// Read the hash when due, and at every tick while the plans in force are not
			// from it (the read at start or at a reload failed).
			if hash := s.config().Keys.RedisHash; hash != "" && (!now.Before(nextRedis) || s.plans.Load().hash != hash) {
				nextRedis = now.Add(every - time.Second) // half a tick early: the tick that falls due
				s.ReloadPlans()
			}
			if now := fileStamps(s.config().TLS.Certificates); now != certsSeen {
				certsSeen = now
				// A failed reload keeps the old certificates and logs why.
				if err := s.Certs().Reload(); err == nil {
					s.log.Info("certificates reloaded after a change on disk", "spki_pin", s.Certs().Pin())
				}
			}
		}
	}
}

// fileStamps summarizes the modification times and sizes of the certificate files.
func fileStamps(pairs []CertPair) string {
	var b []byte
	for _, p := range pairs {
		for _, f := range []string{p.Cert, p.Key} {
			if fi, err := os.Stat(f); err == nil {
				b = fmt.Appendf(b, "%s:%d:%d;", f, fi.ModTime().UnixNano(), fi.Size())
			}
		}
	}
	return string(b)
}
