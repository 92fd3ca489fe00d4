package limiter

import "encoding/binary"

// index maps (policy, key) to a position in a shard's entries. Keys are hashes
// already, so it skips the general-purpose hashing of a Go map: open addressing with
// linear probing, at most half full, deletion by shifting back (no tombstones). Each
// slot packs the low 32 bits of the entry's hash above its position+1; 0 is empty.
// The hash's low bits also choose the slot, so a slot's home is found from the slot.
type index struct {
	slots []uint64
	n     int
}

// Keys of tests and callers may be counters, so their bits are spread anyway: fold
// the key to 64 bits and multiply by an odd constant (Fibonacci hashing). A key's shard
// comes from the top bits of keyHash, an entry's slot from the low bits of entryHash,
// which mixes in the policy.
func fold(k *Key) uint64 {
	return binary.LittleEndian.Uint64(k[:8]) ^ binary.LittleEndian.Uint64(k[8:])
}

func keyHash(folded uint64) uint64 { return folded * 0x9e3779b97f4a7c15 }

func entryHash(folded, policy uint64) uint64 { return (folded ^ policy) * 0x9e3779b97f4a7c15 }

// find returns the position of the entry for (policy, k) with hash h.
func (x *index) find(h uint64, policy uint64, k *Key, entries []entry) (int32, bool) {
	if len(x.slots) == 0 {
		return 0, false
	}
	mask := uint64(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := x.slots[i]
		if s == 0 {
			return 0, false
		}
		if uint32(s>>32) == uint32(h) {
			pos := int32(uint32(s)) - 1
			if e := &entries[pos]; e.key == *k && e.policy.id == policy {
				return pos, true
			}
		}
	}
}

// add records pos as the position of a new entry with hash h.
func (x *index) add(h uint64, pos int32) {
	if 2*(x.n+1) > len(x.slots) {
		x.grow()
	}
	x.put(h, pos)
	x.n++
}

func (x *index) put(h uint64, pos int32) {
	mask := uint64(len(x.slots) - 1)
	i := h & mask
	for x.slots[i] != 0 {
		i = (i + 1) & mask
	}
	x.slots[i] = uint64(uint32(h))<<32 | uint64(uint32(pos+1))
}

func (x *index) grow() {
	old := x.slots
	x.slots = make([]uint64, max(2*len(old), 16))
	for _, s := range old {
		if s != 0 {
			// The tag is the hash's low 32 bits: all put looks at.
			x.put(s>>32, int32(uint32(s))-1)
		}
	}
}

// remove forgets the entry at pos, whose hash is h.
func (x *index) remove(h uint64, pos int32) {
	mask := uint64(len(x.slots) - 1)
	want := uint64(uint32(pos + 1))
	i := h & mask
	for uint64(uint32(x.slots[i])) != want {
		i = (i + 1) & mask
	}
	// Shift later slots of the run back into the gap when their home allows it.
	for j := (i + 1) & mask; x.slots[j] != 0; j = (j + 1) & mask {
		home := x.slots[j] >> 32 & mask
		if (j-home)&mask >= (j-i)&mask {
			x.slots[i] = x.slots[j]
			i = j
		}
	}
	x.slots[i] = 0
	x.n--
}
