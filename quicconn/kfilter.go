package quicconn

import (
	"cmp"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"slices"

	"golang.org/x/net/bpf"
)

// The kernel-level ban filter: a classic BPF socket filter (SO_ATTACH_FILTER) on the
// UDP socket that drops the datagrams of banned prefixes before they are queued, so the
// edge is never woken up for them (no recvmmsg copy, no netpoller wake-up). It is an
// accelerator only: the user-space filter (Config.Banned, run by ReadBatch and the
// ReadFrom methods) stays in place and drops whatever the kernel filter does not cover.
//
// Covered: IPv4 sources on IPv4 sockets and on dual-stack IPv6 sockets (the network
// header of IPv4 traffic is IPv4 there too; IPv4-mapped prefixes ::ffff:a.b.c.d/n with
// n ≥ 96 are treated as IPv4 prefixes), and IPv6 sources on IPv6 sockets. The program
// checks at most MaxKernelIPv4 IPv4 and MaxKernelIPv6 IPv6 prefixes, the broadest first
// (prefixes inside another one are left out as redundant); the rest is dropped in user
// space only. Linux only; elsewhere setting a filter is a no-op.
//
// Datagrams the kernel filter drops are not in Stats.DroppedBanned (user space never
// sees them); the kernel counts them in the socket's drop counter, Stats.DroppedKernel.
const (
	MaxKernelIPv4 = 256
	MaxKernelIPv6 = 64
)

// skfNetOff is SKF_NET_OFF: a socket filter sees the packet from the UDP header on, and
// loads at SKF_NET_OFF+k read byte k of the network (IP) header instead.
const skfNetOff = -0x100000

func netOff(k int) uint32 { return uint32(int32(skfNetOff + k)) }

const (
	retAccept = 0xffffffff // keep the whole datagram
	retDrop   = 0
)

// kernelPrefixes normalises prefixes for the filter: masked, IPv4-mapped ones as IPv4,
// invalid ones and those covered by another left out, the broadest first, at most
// MaxKernelIPv4 and MaxKernelIPv6 per family.
func kernelPrefixes(prefixes []netip.Prefix) (v4, v6 []netip.Prefix) {
	ps := make([]netip.Prefix, 0, len(prefixes))
	for _, p := range prefixes {
		if !p.IsValid() {
			continue
		}
		p = p.Masked()
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		} else if a.Zone() != "" {
			p = netip.PrefixFrom(a.WithZone(""), p.Bits())
		}
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := cmp.Compare(a.Bits(), b.Bits()); c != 0 {
			return c
		}
		return a.Addr().Compare(b.Addr())
	})
next:
	for _, p := range ps {
		kept, max := &v4, MaxKernelIPv4
		if p.Addr().Is6() {
			kept, max = &v6, MaxKernelIPv6
		}
		if len(*kept) == max {
			continue
		}
		for _, k := range *kept {
			if k.Bits() <= p.Bits() && k.Contains(p.Addr()) {
				continue next // covered (or a duplicate)
			}
		}
		*kept = append(*kept, p)
	}
	return v4, v6
}

// errFilterTooLong cannot happen within MaxKernelIPv4 and MaxKernelIPv6; it guards the
// kernel's limit of 4096 instructions.
var errFilterTooLong = errors.New("quicconn: kernel filter program too long")

// compileKernelFilter assembles the socket filter dropping datagrams whose source is in
// prefixes. It returns no program (detach) when prefixes is empty.
func compileKernelFilter(prefixes []netip.Prefix) ([]bpf.RawInstruction, error) {
	v4, v6 := kernelPrefixes(prefixes)
	if len(v4) == 0 && len(v6) == 0 {
		return nil, nil
	}
	var v4b, v6b []bpf.Instruction
	// IPv4: source address at offset 12 of the IPv4 header, kept in X; one masking per
	// distinct prefix length, then one comparison per prefix.
	v4b = append(v4b, bpf.LoadAbsolute{Off: netOff(12), Size: 4}, bpf.TAX{})
	for i, p := range v4 {
		if i == 0 || p.Bits() != v4[i-1].Bits() {
			v4b = append(v4b, bpf.TXA{})
			if p.Bits() < 32 {
				v4b = append(v4b, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: mask32(p.Bits())})
			}
		}
		a := p.Addr().As4()
		v4b = append(v4b,
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: binary.BigEndian.Uint32(a[:]), SkipTrue: 1},
			bpf.RetConstant{Val: retDrop})
	}
	v4b = append(v4b, bpf.RetConstant{Val: retAccept})
	// IPv6: source address at offset 8 of the IPv6 header, compared 32 bits at a time;
	// a mismatching word skips to the next prefix.
	for _, p := range v6 {
		a := p.Addr().As16()
		var blk []bpf.Instruction
		var jumps []int
		for w, bits := 0, p.Bits(); bits > 0; w, bits = w+1, bits-32 {
			blk = append(blk, bpf.LoadAbsolute{Off: netOff(8 + 4*w), Size: 4})
			if bits < 32 {
				blk = append(blk, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: mask32(bits)})
			}
			jumps = append(jumps, len(blk))
			blk = append(blk, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: binary.BigEndian.Uint32(a[4*w:])})
		}
		blk = append(blk, bpf.RetConstant{Val: retDrop})
		for _, j := range jumps {
			jf := blk[j].(bpf.JumpIf)
			jf.SkipTrue = uint8(len(blk) - 1 - j) // past this prefix's drop
			blk[j] = jf
		}
		v6b = append(v6b, blk...)
	}
	v6b = append(v6b, bpf.RetConstant{Val: retAccept})

	// Dispatch on the IP version nibble; unconditional jumps reach any distance.
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: netOff(0), Size: 1},
		bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 4, SkipFalse: 1},
		bpf.Jump{Skip: 3}, // to the IPv4 block
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 6, SkipFalse: 1},
		bpf.Jump{Skip: uint32(1 + len(v4b))}, // to the IPv6 block
		bpf.RetConstant{Val: retAccept},
	}
	prog = append(prog, v4b...)
	prog = append(prog, v6b...)
	if len(prog) > 4096 {
		return nil, errFilterTooLong
	}
	return bpf.Assemble(prog)
}

func mask32(bits int) uint32 { return ^uint32(0) << (32 - bits) }

// SetKernelBans drops datagrams from prefixes in the kernel, on every Socket WrapConn
// made (and makes later), replacing the previous list; an empty list removes the
// filter. Call it after every change of the bans: the kernel filter is replaced
// atomically. Sockets already closed are forgotten. It returns the errors of the
// sockets it could not set (the user-space filter still applies to them); on systems
// other than Linux it does nothing.
func (g *Guard) SetKernelBans(prefixes []netip.Prefix) error {
	prog, err := compileKernelFilter(prefixes)
	if err != nil {
		return err
	}
	g.kmu.Lock()
	defer g.kmu.Unlock()
	g.kprog = prog
	var errs []error
	live := g.ksocks[:0]
	for _, s := range g.ksocks {
		err := attachFilter(s.UDPConn, prog)
		if errors.Is(err, net.ErrClosed) {
			continue
		}
		live = append(live, s)
		errs = append(errs, err)
	}
	clear(g.ksocks[len(live):])
	g.ksocks = live
	return errors.Join(errs...)
}

// register lets SetKernelBans reach s, and gives s the filter in force.
func (g *Guard) register(s *Socket) {
	g.kmu.Lock()
	defer g.kmu.Unlock()
	g.ksocks = append(g.ksocks, s)
	if g.kprog != nil {
		attachFilter(s.UDPConn, g.kprog) // the user-space filter covers a failure
	}
}

// kernelDrops sums the kernel's drop counters of the Sockets WrapConn made.
func (g *Guard) kernelDrops() uint64 {
	g.kmu.Lock()
	defer g.kmu.Unlock()
	var n uint64
	for _, s := range g.ksocks {
		n += socketDrops(s.UDPConn)
	}
	return n
}

// SetKernelFilter drops datagrams from prefixes in the kernel, on this socket only,
// replacing its previous kernel filter; an empty list removes it. See SetKernelBans,
// which sets every Socket of a Guard and is what an edge calls.
func (s *Socket) SetKernelFilter(prefixes []netip.Prefix) error {
	prog, err := compileKernelFilter(prefixes)
	if err != nil {
		return err
	}
	return attachFilter(s.UDPConn, prog)
}
