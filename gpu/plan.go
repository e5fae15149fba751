package gpu

import (
	"fmt"

	"h5ingest/compress/bitshuffle"
	"h5ingest/frame"
)

// bandBytes is the image bytes a task aims to write: small enough that the
// band is still in cache for its image CRC, large enough that the task
// outweighs handing it to a worker.
const bandBytes = 192 << 10

// plan says how one frame is cut into tasks and decoded. A task is one band
// of rows of one chip row (cy): for every chip of that chip row it
// checksums and decodes the payload rows that land in the band's image
// rows, then checksums those image rows, which it has written in full.
//
// Band b covers image rows [b*bandRows, (b+1)*bandRows) of each chip row
// (the last band may be shorter). A chip at 0 degrees reads them from the
// same readout rows; a chip at 180 degrees from the mirrored ones. Each
// task leaves one payload CRC per chip and one image CRC; Decode combines
// them in payload and image order.
type plan struct {
	f         frame.Format
	rot       frame.Orientation
	chipBytes int // payload bytes per chip
	pix       int // image bytes per pixel
	bandRows  int
	bands     int
	crcs      int // index of the frame's first piece CRC in batch.crcs

	// bandShuffle says that every band of the image starts and ends on a
	// bitshuffle block (or at the image's end), so that a task transposes
	// its band's blocks as soon as it has taken their CRC, while they are
	// in the core's cache; else the blocks are transposed once the whole
	// batch is decoded.
	bandShuffle bool
	// compress says that the job asks for its chunk (Job.Compress) and
	// the bands hold whole blocks of its encoders: each task transposes
	// and compresses its band's blocks into its own part of the chunk
	// once it has taken their CRC.
	compress bool
	bandsAt  int // index of the frame's first band in batch.bands
}

// makePlan checks that job j can be decoded and plans it. workers is the
// number of workers the frame should keep busy.
func makePlan(j *Job, rot frame.Orientation, workers int) (plan, error) {
	h := &j.Header
	f := h.Format
	if err := f.Validate(); err != nil {
		return plan{}, fmt.Errorf("gpu: frame %d: %w", h.FrameNumber, err)
	}
	if n := f.PayloadSize(); len(j.Payload) != n || int(h.PayloadSize) != n {
		return plan{}, fmt.Errorf("gpu: frame %d: payload of %d bytes (header says %d), %v needs %d",
			h.FrameNumber, len(j.Payload), h.PayloadSize, f, n)
	}
	if n := f.ImageSize(); len(j.Image) < n {
		return plan{}, fmt.Errorf("gpu: frame %d: image buffer of %d bytes, %v needs %d",
			h.FrameNumber, len(j.Image), f, n)
	}
	if err := rot.Validate(f.Chips()); err != nil {
		return plan{}, fmt.Errorf("gpu: frame %d: %w", h.FrameNumber, err)
	}
	if j.ShuffleBlock != 0 {
		if err := bitshuffle.CheckBlockSize(j.ShuffleBlock); err != nil {
			return plan{}, fmt.Errorf("gpu: frame %d: %w", h.FrameNumber, err)
		}
	}
	p := plan{f: f, rot: rot, chipBytes: f.ChipPayloadSize(), pix: f.PixelSize()}
	rowBytes := f.Width() * p.pix
	bands := max(1, (f.ChipHeight*rowBytes+bandBytes-1)/bandBytes, (workers+f.ChipsY-1)/f.ChipsY)
	bands = min(bands, f.ChipHeight)
	p.bandRows = (f.ChipHeight + bands - 1) / bands
	p.bands = (f.ChipHeight + p.bandRows - 1) / p.bandRows
	if bs := j.ShuffleBlock * p.pix; bs > 0 {
		p.bandShuffle = p.bandRows*rowBytes%bs == 0 && f.ChipHeight*rowBytes%bs == 0
	} else if c := j.Compress; c != nil && c.NewEncoder != nil && c.BlockElems > 0 {
		bs := c.BlockElems * p.pix
		p.compress = p.bandRows*rowBytes%bs == 0 && f.ChipHeight*rowBytes%bs == 0
	}
	return p, nil
}

// tasks returns the number of tasks of the frame.
func (p *plan) tasks() int { return p.f.ChipsY * p.bands }

// pieces returns the number of piece CRCs the frame's tasks leave: one per
// chip and band for the payload, then one per task for the image.
func (p *plan) pieces() int { return (p.f.Chips() + p.f.ChipsY) * p.bands }

// bandRange returns the image rows [y0, y1) of band b within a chip row.
func (p *plan) bandRange(b int) (y0, y1 int) {
	return b * p.bandRows, min((b+1)*p.bandRows, p.f.ChipHeight)
}

// readoutRange returns the readout rows of a chip that fill band b of its
// chip row.
func (p *plan) readoutRange(b int, rotated bool) (r0, r1 int) {
	y0, y1 := p.bandRange(b)
	if rotated {
		return p.f.ChipHeight - y1, p.f.ChipHeight - y0
	}
	return y0, y1
}

// payloadOffset returns the offset in a chip block where readout row r
// starts, for checksumming. Rows of packed12 chips of odd width start
// inside a byte triple, so pieces are cut at the proportional byte instead;
// any cut does, as long as the pieces tile the block in order.
func (p *plan) payloadOffset(r int) int {
	return int(int64(p.chipBytes) * int64(r) / int64(p.f.ChipHeight))
}

// rawPiece returns the index, relative to p.crcs, of the payload CRC of
// chip k for band b.
func (p *plan) rawPiece(k, b int) int { return k*p.bands + b }

// imagePiece returns the index, relative to p.crcs, of the image CRC of
// band b of chip row cy.
func (p *plan) imagePiece(cy, b int) int { return p.f.Chips()*p.bands + cy*p.bands + b }

// combine folds the frame's piece CRCs into its payload and image CRCs.
func (p *plan) combine(crcs []uint32) (raw, data uint32) {
	crcs = crcs[p.crcs : p.crcs+p.pieces()]
	var fold folder
	for k := range p.f.Chips() {
		rotated := p.rot.Rotated(k)
		for i := range p.bands {
			b := i
			if rotated { // readout order is band order mirrored
				b = p.bands - 1 - i
			}
			r0, r1 := p.readoutRange(b, rotated)
			fold.add(crcs[p.rawPiece(k, b)], p.payloadOffset(r1)-p.payloadOffset(r0))
		}
	}
	raw = fold.crc
	fold.crc = 0
	rowBytes := p.f.Width() * p.pix
	for cy := range p.f.ChipsY {
		for b := range p.bands {
			y0, y1 := p.bandRange(b)
			fold.add(crcs[p.imagePiece(cy, b)], (y1-y0)*rowBytes)
		}
	}
	return raw, fold.crc
}

// folder folds piece CRCs, left to right, into the CRC of their
// concatenation. It keeps the combiners of the last two piece lengths, as a
// frame's pieces come in at most a few lengths.
type folder struct {
	crc  uint32 // CRC-32C of the pieces so far; 0 for none
	n    [2]int
	op   [2]CRC32CCombiner
	next int
}

func (f *folder) add(crc uint32, n int) {
	i := 0
	switch {
	case f.op[0] != 0 && f.n[0] == n:
	case f.op[1] != 0 && f.n[1] == n:
		i = 1
	default:
		i = f.next
		f.next ^= 1
		f.n[i], f.op[i] = n, NewCRC32CCombiner(int64(n))
	}
	f.crc = f.op[i].Combine(f.crc, crc)
}

// run does task (cy, b) of the frame of job job of batch bt: it checksums
// and decodes the payload rows of every chip of chip row cy that land in
// band b, then checksums the band's image rows and, where the plan's bands
// hold whole blocks, transposes them where the job asks for the bit
// transpose, or transposes and compresses them where it asks for its
// chunk. The worker w gives its scratch and encoders; the piece CRCs and
// the band's part of the chunk go to bt.
func (p *plan) run(bt *batch, job, cy, b int, w *worker) {
	j := &bt.jobs[job]
	f := &p.f
	rowBytes := f.Width() * p.pix
	y0, y1 := p.bandRange(b)
	start, end := (cy*f.ChipHeight+y0)*rowBytes, (cy*f.ChipHeight+y1)*rowBytes
	band := j.Image[start:end]
	if p.compress && j.DiscardImage {
		w.band = grow(w.band, end-start)
		band = w.band
	}
	p.decodeBand(j, cy, b, w.counts, bt.crcs, band)
	if p.compress {
		bt.compressBand(job, p, cy*p.bands+b, start, end, band, w)
		return
	}
	if j.ShuffleBlock == 0 || !p.bandShuffle {
		return
	}
	bs := j.ShuffleBlock * p.pix
	last := end / bs
	if end == f.ImageSize() {
		last = shuffleBlocks(f, j.ShuffleBlock) // the partial block too
	}
	w.scratch = shuffleRun(j, p, start/bs, last, w.scratch)
}

// decodeBand decodes band b of chip row cy of job j's image into band,
// which holds the band's bytes of the image, and leaves its piece CRCs in
// crcs. counts is scratch of ChipWidth.
func (p *plan) decodeBand(j *Job, cy, b int, counts []uint32, crcs []uint32, band []byte) {
	f := &p.f
	w, width := f.ChipWidth, f.Width()
	y0, y1 := p.bandRange(b)
	base := (cy*f.ChipHeight + y0) * width * p.pix // where band starts in the image
	for cx := range f.ChipsX {
		k := cy*f.ChipsX + cx
		rotated := p.rot.Rotated(k)
		chip := j.Payload[k*p.chipBytes : (k+1)*p.chipBytes]
		r0, r1 := p.readoutRange(b, rotated)
		crcs[p.crcs+p.rawPiece(k, b)] = frame.Checksum(chip[p.payloadOffset(r0):p.payloadOffset(r1)])
		// The band's rows of a bitplane chip in one call, where a vector
		// decode takes them.
		if f.Encoding == frame.Bitplane &&
			bitplaneBand(band[cx*w*p.pix:], width*p.pix, chip, r0, r1, w, f.BitDepth, f.Coding == frame.LFSR, rotated) {
			continue
		}
		for y := y0; y < y1; y++ {
			r := y
			if rotated {
				r = f.ChipHeight - 1 - y
			}
			off := ((cy*f.ChipHeight+y)*width+cx*w)*p.pix - base
			p.decodeRow(band[off:off+w*p.pix], chip, r, rotated, counts)
		}
	}
	crcs[p.crcs+p.imagePiece(cy, b)] = frame.Checksum(band)
}

// decodeRow decodes readout row r of a chip into dst, one chip-wide piece
// of an image row.
func (p *plan) decodeRow(dst, chip []byte, r int, rotated bool, counts []uint32) {
	f := &p.f
	w := f.ChipWidth
	lfsr := f.Coding == frame.LFSR
	switch f.Encoding {
	case frame.Bitplane:
		rowBytes := f.BitDepth * w / 8
		row := chip[r*rowBytes : (r+1)*rowBytes]
		switch f.BitDepth {
		case 24:
			if !bitplane24Fast(dst, row, lfsr, rotated, counts) {
				bitplane24(dst, row, lfsr, rotated)
			}
		default: // 12, 6 and 1 planes
			if f.BitDepth == 1 {
				lfsr = false // a 1-bit code is its count
			}
			if !(f.BitDepth == 12 && bitplane12Fast(dst, row, lfsr, rotated, counts)) && !bitplaneRow(dst, row, f.BitDepth, lfsr, rotated) {
				bitplaneSmall(dst, row, f.BitDepth, lfsr, rotated)
			}
		}
		return
	case frame.Packed12:
		decodePacked12(dst, chip, r*w, rotated, counts)
	case frame.Packed24:
		decodePacked24(dst, chip[3*r*w:], rotated, counts)
	case frame.U16LE:
		decodeU16LE(dst, chip[2*r*w:], rotated, counts)
	case frame.U32LE:
		decodeU32LE(dst, chip[4*r*w:], rotated, counts)
	}
}
