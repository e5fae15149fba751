package gpu

import (
	"math/rand/v2"
	"testing"

	"h5ingest/frame"
)

func TestCRC32CCombineWorkedExample(t *testing.T) {
	a, b := frame.Checksum([]byte("12345")), frame.Checksum([]byte("6789"))
	if a != 0x18D12335 || b != 0xC27E5DB2 {
		t.Fatalf("CRC(12345) = %08x, CRC(6789) = %08x; want 18d12335, c27e5db2", a, b)
	}
	if got := CRC32CCombine(a, b, 4); got != 0xE3069283 {
		t.Errorf("CRC32CCombine(%08x, %08x, 4) = %08x, want e3069283", a, b, got)
	}
}

func TestCRC32CCombineRandomSplits(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 1<<17)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for range 300 {
		n := rng.IntN(len(buf) + 1)
		msg := buf[:n]
		split := rng.IntN(n + 1)
		a, b := msg[:split], msg[split:]
		want := frame.Checksum(msg)
		if got := CRC32CCombine(frame.Checksum(a), frame.Checksum(b), int64(len(b))); got != want {
			t.Fatalf("split %d+%d: combine = %08x, want %08x", len(a), len(b), got, want)
		}
	}
}

func TestCRC32CCombineEmpty(t *testing.T) {
	crc := frame.Checksum([]byte("123456789"))
	if got := CRC32CCombine(crc, frame.Checksum(nil), 0); got != crc {
		t.Errorf("combine with empty piece = %08x, want %08x", got, crc)
	}
	if got := CRC32CCombine(frame.Checksum(nil), crc, 9); got != crc {
		t.Errorf("combine after empty piece = %08x, want %08x", got, crc)
	}
}

// TestCRC32CCombinerFold folds equal blocks, the last one partial, as the
// CUDA kernels do.
func TestCRC32CCombinerFold(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const block = 8192
	buf := make([]byte, 12*block+1234)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	op := NewCRC32CCombiner(block)
	crc := frame.Checksum(buf[:block])
	for off := block; off < len(buf); off += block {
		end := min(off+block, len(buf))
		piece := frame.Checksum(buf[off:end])
		if end-off == block {
			crc = op.Combine(crc, piece)
		} else {
			crc = CRC32CCombine(crc, piece, int64(end-off))
		}
	}
	if want := frame.Checksum(buf); crc != want {
		t.Errorf("folded CRC %08x, want %08x", crc, want)
	}
}

func TestMulModPIdentity(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 1000 {
		a := rng.Uint32()
		if got := mulModP(1<<31, a); got != a {
			t.Fatalf("1 · %08x = %08x", a, got)
		}
		if b := rng.Uint32(); mulModP(a, b) != mulModP(b, a) {
			t.Fatalf("product of %08x and %08x not commutative", a, b)
		}
	}
	if xPow2n[3] != 0x00800000 {
		t.Errorf("x^8 = %08x, want 00800000", xPow2n[3])
	}
}
