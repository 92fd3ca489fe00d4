package penalty

import "github.com/h3edge/h3edge/limiter"

const (
	banShards = 1024 // a change copies one shard's table: 1/1024 of the bans
	banShift  = 64 - 10
)

// banTable is one shard of the bans in force: open addressing with linear probing, at
// most half full. Each slot has a fingerprint of its key's hash in tags, so that a miss
// usually reads one cache line of tags and no slot. Published tables are never written
// again.
type banTable struct {
	tags  []uint32 // 0: empty slot; power-of-two length
	slots []banSlot
	n     int
}

type banSlot struct {
	src   limiter.Source
	until int64
	bits  uint8
}

func (s *banSlot) key() boxKey { return boxKey{s.src, s.bits} }

// tagOf is a key's fingerprint: hash bits that choose neither the shard nor, in
// tables under a million slots, the slot. Never 0.
func tagOf(h uint64) uint32 { return uint32(h>>20) | 1 }

// find returns k's slot, or the empty slot where it would go.
func (t *banTable) find(k boxKey, h uint64) (uint64, bool) {
	mask := uint64(len(t.tags) - 1)
	tag := tagOf(h)
	for i := h & mask; ; i = (i + 1) & mask {
		switch t.tags[i] {
		case 0:
			return i, false
		case tag:
			if s := &t.slots[i]; s.src == k.src && s.bits == k.bits {
				return i, true
			}
		}
	}
}

// clone returns a private copy of t (nil: empty) sized for what it holds.
func (t *banTable) clone() *banTable {
	size := 8
	if t != nil {
		for size < 2*(t.n+1) {
			size *= 2
		}
	}
	c := &banTable{tags: make([]uint32, size), slots: make([]banSlot, size)}
	if t != nil {
		c.insert(t)
	}
	return c
}

// insert puts every ban of from into t.
func (t *banTable) insert(from *banTable) {
	for i, tag := range from.tags {
		if tag != 0 {
			s := &from.slots[i]
			t.put(s.key(), s.until)
		}
	}
}

// put records k's end, adding k if it is new.
func (t *banTable) put(k boxKey, until int64) {
	h := k.hash()
	i, ok := t.find(k, h)
	if ok {
		t.slots[i].until = until
		return
	}
	if 2*(t.n+1) > len(t.tags) {
		old := *t
		*t = banTable{tags: make([]uint32, 2*len(old.tags)), slots: make([]banSlot, 2*len(old.slots))}
		t.insert(&old)
		i, _ = t.find(k, h)
	}
	t.tags[i] = tagOf(h)
	t.slots[i] = banSlot{src: k.src, until: until, bits: k.bits}
	t.n++
}

// del removes k, shifting later slots of its run back into the gap.
func (t *banTable) del(k boxKey) {
	i, ok := t.find(k, k.hash())
	if !ok {
		return
	}
	mask := uint64(len(t.tags) - 1)
	for j := (i + 1) & mask; t.tags[j] != 0; j = (j + 1) & mask {
		home := t.slots[j].key().hash() & mask
		if (j-home)&mask >= (j-i)&mask {
			t.tags[i], t.slots[i] = t.tags[j], t.slots[j]
			i = j
		}
	}
	t.tags[i], t.slots[i] = 0, banSlot{}
	t.n--
}
