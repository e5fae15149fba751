package verbs

import "testing"

// BenchmarkReceiveVerbs measures what the real verbs cost the receiver a
// frame, without the device's own work: one Poll that finds a write's
// completion and one PostRecv to replace its receive, each a cgo call
// into libibverbs' inline functions and a provider's ops (here the test
// context's, which do almost nothing), plus a third cgo call that queues
// the completion.
func BenchmarkReceiveVerbs(b *testing.B) {
	o := newOpsFake(0x1234, RC, Port{Device: "fake0", Num: 1})
	defer o.free()
	wc := make([]Completion, 16)
	c := Completion{WRID: 1, Opcode: OpRecvRDMAImm, ByteLen: 1 << 20, QPNum: 0x1234}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		o.add(c, uint32(i), true)
		n, err := o.cq.Poll(wc)
		if n != 1 || err != nil {
			b.Fatal(n, err)
		}
		if err := o.qp.PostRecv(wc[0].WRID); err != nil {
			b.Fatal(err)
		}
	}
}
