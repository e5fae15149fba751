package pipeline

import "h5ingest/frame"

// Scan is what a processor stage is told of its scan when the scan
// starts, before the first frame.
type Scan struct {
	Format frame.Format // every image's format
	Frames int          // planned frames; 0 when the scan's length is not known
	// ImageKeys are the plan's image key of each frame, by frame index:
	// 0 a projection, 1 a flat field, 2 a dark field (package plan); nil
	// for a scan without a plan.
	ImageKeys []int8
	// AddDataset, where the scan writes a file of its own, declares a
	// dataset of that file for the stage's results and returns its
	// writer. The dataset is made with the file, so it may be called only
	// while the stage starts (registry.Processor.Start); nil where the
	// scan has no file to add to.
	AddDataset func(Dataset) (FrameWriter, error)
	// AddStream, where the scan has a live stream, declares a series of
	// the stage's images sent beside the scan's own, on a socket of its
	// own, and returns its writer. Like AddDataset it may be called only
	// while the stage starts; nil where the scan has no live stream.
	AddStream func(StreamSeries) (FrameStream, error)
}

// StreamSeries is a series of images a processor stage sends on the live
// stream, in the DECTRIS Stream V2 format: Height x Width float32 pixels
// an image, each image's image_id the index of the frame it was made
// from.
type StreamSeries struct {
	// Name names the series: the end of its scan id, and the log's.
	Name          string
	Height, Width int
	// Images is how many images the stage sends (number_of_images); 0
	// when it does not know.
	Images int
	// Scale is how many of the frame's pixels, across and down, one of
	// its pixels covers (a binning); 1 for the frame's own pixels.
	Scale int
	// FlatField says the images are flat-field corrected (Stream V2's
	// flatfield_enabled).
	FlatField bool
	// Address is the ZeroMQ endpoint the series binds; "" lets the scan
	// choose, beside its own stream's.
	Address string
}

// FrameStream sends the images of a StreamSeries.
type FrameStream interface {
	// WriteFrame sends data, Height*Width little-endian float32 pixels,
	// as the image of frame n. It never waits: an image no consumer can
	// take now is left out of the stream and counted. It is safe for
	// concurrent use, does not keep data, allocates nothing, and may be
	// called from the scan's first Process until the stage's Close
	// returns.
	WriteFrame(n int, data []byte) error
	// Skip says that frame n has no image, so that the images after it,
	// sent in image_id order, need not wait for it. It is safe for
	// concurrent use.
	Skip(n int)
}

// Dataset is a dataset a processor stage writes beside the scan's images:
// one Height x Width image of float32 pixels per planned frame, at Path in
// the file (groups made as needed), each frame a chunk of its own, stored
// uncompressed; a frame never written reads as NaN.
type Dataset struct {
	Path          string
	Height, Width int
}

// FrameWriter writes the frames of a Dataset.
type FrameWriter interface {
	// WriteFrame stores data, Height*Width little-endian float32 pixels,
	// as frame n. It is safe for concurrent use by every worker's
	// processor: calls are serialised with the scan's own writes to the
	// file, so a call may wait for one chunk to be written. It does not
	// keep data and allocates nothing. It may be called from the scan's
	// first Process until the stage's Close returns.
	WriteFrame(n int, data []byte) error
}

// Stage is a processor stage for one scan: started when the scan starts
// (registry.Processor.Start), told of the scan (Scan), it makes the
// Processor of each compression worker and is closed when the scan ends.
//
// A stage is the state its workers share: where its processors share it
// (averages built from some frames and applied to others), every worker
// uses it at the same time, so it must be safe for concurrent use, and a
// lock on the path of every frame must be held briefly.
type Stage interface {
	// Processor returns the processor of one compression worker. The
	// pipeline calls it once per worker, from Run, before the first frame
	// (Config.NewProcessor); each processor is then called by its own
	// worker only and may keep scratch memory of its own.
	Processor() (Processor, error)
	// Close ends the stage once every Process call has returned, whether
	// the scan ended or was abandoned, and reports what the stage could
	// not do that no frame's error said (a result not written, a
	// reference never made). It is called once.
	Close() error
}
