package admin

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/h3edge/h3edge/limiter"
)

// Top tracks the heaviest client keys (as their hashes) and source prefixes now, for
// /api/v1/top and the dashboard, in two sketches of fixed size whatever the number of
// clients (sketch.go). Make it with NewTop. It is safe for concurrent use, and its
// Observe methods allocate nothing.
type Top struct {
	keys    *sketch[limiter.Key]
	sources *sketch[netip.Prefix]
}

// HalfLife is how fast old traffic fades from Top's counts: Age halves them this
// often, so Top shows who is heavy now rather than since start.
const HalfLife = 30 * time.Second

// Sampling rates of the sketches, chosen from BenchmarkTopObserve: a sketch update
// costs about as much as the rest of the edge's instrumentation together, and sources
// also need the client address parsed. One in eight still finds every source sending
// more than a fraction of a percent of the requests.
const (
	keySample    = 1
	sourceSample = 8
)

// NewTop returns empty sketches of client keys and source prefixes.
func NewTop() *Top {
	return &Top{
		keys:    newSketch(sketchCapacity, keySample, keyHash),
		sources: newSketch(sketchCapacity, sourceSample, prefixHash),
	}
}

// ObserveKey counts one request of the client key k (a key's hash, never the key).
func (t *Top) ObserveKey(k limiter.Key) {
	if t.keys.sampled() {
		t.keys.observe(k)
	}
}

// SourceSampled reports whether the next request's source is to be observed: sources
// are sampled, and the caller parses the client address only when it is.
func (t *Top) SourceSampled() bool { return t.sources.sampled() }

// ObserveSource counts one sampled request from source prefix p.
func (t *Top) ObserveSource(p netip.Prefix) { t.sources.observe(p) }

// Age halves the counts every HalfLife until done is closed.
func (t *Top) Age(done <-chan struct{}) {
	tick := time.NewTicker(HalfLife)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			t.keys.decay()
			t.sources.decay()
		case <-done:
			return
		}
	}
}

// keyHash reads a hash from a client key, which is itself a uniform hash.
func keyHash(k limiter.Key) uint64 { return binary.LittleEndian.Uint64(k[8:]) }

// prefixHash mixes an address prefix into 64 bits (the finalizer of MurmurHash3).
func prefixHash(p netip.Prefix) uint64 {
	a := p.Addr().As16()
	h := binary.LittleEndian.Uint64(a[:8])*0x9e3779b97f4a7c15 ^ binary.LittleEndian.Uint64(a[8:]) ^ uint64(p.Bits())<<56
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// topKeyRow is a heavy client key: its hash, never the key.
type topKeyRow struct {
	// Key is the client key's hash (keyed SHA-256, truncated to 16 bytes), in hex.
	Key string `json:"key"`
	// PK is its first 8 bytes as the RateLimit field's pk parameter carries them.
	PK string `json:"pk"`
	// Count estimates the key's requests (recent ones weigh more, see HalfLife); it
	// overestimates by at most Error.
	Count uint64 `json:"count"`
	Error uint64 `json:"error"`
}

// topSourceRow is a heavy source prefix.
type topSourceRow struct {
	Prefix string `json:"prefix"`
	Count  uint64 `json:"count"`
	Error  uint64 `json:"error"`
}

// topBody is the body of /api/v1/top.
type topBody struct {
	// HalfLife is how fast counts fade: traffic that old counts half.
	HalfLife string `json:"half_life"`
	// SourceSample is the sampling of sources: one request in it is looked at.
	SourceSample int            `json:"source_sample"`
	Keys         []topKeyRow    `json:"keys"`
	Sources      []topSourceRow `json:"sources"`
}

// rows reads the n heaviest keys and sources; a nil Top has none.
func (t *Top) rows(n int) topBody {
	b := topBody{HalfLife: HalfLife.String(), SourceSample: sourceSample, Keys: []topKeyRow{}, Sources: []topSourceRow{}}
	if t == nil {
		return b
	}
	b.SourceSample = int(t.sources.sampleMask) + 1
	for _, h := range t.keys.top(n) {
		b.Keys = append(b.Keys, topKeyRow{Key: hex.EncodeToString(h.Key[:]),
			PK: ":" + base64.StdEncoding.EncodeToString(h.Key[:8]) + ":", Count: h.Count, Error: h.Err})
	}
	for _, h := range t.sources.top(n) {
		b.Sources = append(b.Sources, topSourceRow{Prefix: h.Key.String(), Count: h.Count, Error: h.Err})
	}
	return b
}

// top answers the n heaviest client keys and source prefixes (n from 1 to 1024,
// default 20).
func (h *Handler) top(w http.ResponseWriter, r *http.Request) {
	n := 20
	if v := r.URL.Query().Get("n"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > sketchCapacity {
			writeProblem(w, http.StatusBadRequest, fmt.Sprintf("n: want 1 to %d (got %q)", sketchCapacity, v), nil)
			return
		}
	}
	WriteJSON(w, http.StatusOK, h.Top.rows(n))
}
