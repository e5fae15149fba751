// Package gpu decodes raw detector frames into images and checksums them:
// every payload encoding, counter depth and counter coding of format
// version 1 (see package frame), chip orientation, and the CRC-32C of the
// payload as received and of the decoded image.
//
// # Backends
//
// The work is done by a Backend, chosen by name with New:
//
//   - "cpu": pure Go, always available. It splits every frame into bands of
//     chip rows and runs them on a fixed pool of worker goroutines: each
//     worker takes a frame of its own, band after band, while there are
//     frames enough, and the workers share a frame's bands where there
//     are not, so a single frame uses every core.
//   - "cuda": an NVIDIA GPU through the CUDA driver API, which package
//     gpu/cuda loads at run time (dlopen of libcuda.so.1), so the binary
//     builds and starts without CUDA. It runs the kernels of package
//     gpu/kernels, embedded as PTX that the driver compiles for the GPU at
//     hand. New fails with a clear error where there is no driver
//     ("libcuda.so.1 not found: ...") or no device ("no CUDA device").
//     A sticky driver error (cuda.ErrSticky) loses the GPU for the
//     process, as the driver documents: every cuda backend fails with
//     ErrDeviceLost from then on, and Lost and LostChan say so.
//   - "auto": "cuda" when the driver loads and a device answers, else
//     "cpu". It logs one line saying which it picked and why.
//
// Every backend must give the same results, bit for bit, for every frame:
//
//   - Image[:Header.Format.ImageSize()] holds the decoded image, row-major,
//     height x width, little-endian uint16 pixels when the bit depth is at
//     most 16, else uint32; counters are decoded to counts (LFSR codes by
//     table), and each chip placed as the orientation says.
//   - With Job.ShuffleBlock set, Image[:Header.Format.ImageSize()] holds
//     that image bit-transposed block by block exactly as the bitshuffle
//     filter transposes an HDF5 chunk before it compresses the blocks
//     (bitshuffle.AppendShuffle), so that a bitshuffle codec only has the
//     blocks left to compress (compress.Preshuffled).
//   - With Job.Compress set, a backend that compresses (Compressor: the
//     cpu backend) also leaves in Chunk exactly the bytes the codec's
//     Encode stores for the image, where every band of the image holds
//     whole blocks, and says so in Compressed; any other backend, or an
//     image whose bands cut blocks, leaves Compressed unset.
//   - RawCRC is the CRC-32C of Payload, DataCRC the CRC-32C of the image
//     bytes (before any transpose). A RawCRC that differs from
//     Header.PayloadCRC is a result for the caller to record, not an error.
//   - A frame the backend cannot decode (a format that does not validate, a
//     payload of the wrong size, an image buffer too small, an orientation
//     that does not fit the chip count) gets Job.Err; the other frames of
//     the batch are decoded all the same.
//   - The backend never allocates images: buffers belong to the caller, who
//     may allocate them in pinned memory for a device backend. A backend
//     keeps no reference to a Job, its payload or its image after Decode
//     returns.
//   - Decode blocks until the batch is done and is safe to call from several
//     goroutines at once, so several batches can be in flight (the CUDA
//     backend maps each in-flight call to a stream). In steady state it
//     allocates nothing per frame.
package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"

	"h5ingest/frame"
)

// Job is one frame to decode: its header and payload, the caller's image
// buffer, and the results.
type Job struct {
	Header  frame.Header // parsed and checked by the caller
	Payload []byte       // len(Payload) == Header.PayloadSize
	Image   []byte       // destination, len(Image) >= Header.Format.ImageSize()

	// ShuffleBlock, when not 0, asks for the image bit-transposed in blocks
	// of this many pixels, a multiple of 8, the way the bitshuffle filter
	// lays out a chunk before compressing it: compress.Preshuffled's
	// BlockElems.
	ShuffleBlock int

	// Compress, where set (and ShuffleBlock is not), asks a backend that
	// compresses (Compressor) for the image's stored chunk as well, in
	// Chunk, whose capacity must be at least the encoders' Bound of the
	// image's size; Image still holds the image as decoded. A backend
	// compresses where it can, else leaves Compressed unset and the
	// caller compresses the image itself.
	Compress *Compression
	// DiscardImage, with Compress, says that the caller needs only the
	// chunk: where the backend compresses (Compressed, or CompressErr
	// set), it may leave Image undefined and decode each band into
	// memory of its own that stays in the core's cache; where it leaves
	// the chunk to the caller, Image holds the image.
	DiscardImage bool
	Chunk        []byte

	// Results, set by Decode.
	RawCRC  uint32 // CRC-32C of Payload as received
	DataCRC uint32 // CRC-32C of Image[:Header.Format.ImageSize()]
	Err     error  // why this frame was not decoded; nil on success
	// Compressed says that Chunk holds the image's stored chunk (Err is
	// nil). A chunk that could not be made leaves it unset, with
	// CompressErr saying why.
	Compressed  bool
	CompressErr error
}

// ChunkEncoder transposes and compresses the bitshuffle blocks of a chunk
// apart from each other, as compress.BlockEncoder does (the bitshuffle
// codecs are ones). An encoder is used by one goroutine at a time.
type ChunkEncoder interface {
	// Bound returns the largest stored size of a chunk of n bytes. For n a
	// whole number of blocks, Bound(n) less Bound(0) (the header) is the
	// most AppendBlocks appends for them.
	Bound(n int) int
	// AppendHeader appends the header of a chunk of n bytes.
	AppendHeader(dst []byte, n int) []byte
	// AppendBlocks appends the stored form of a run of a chunk's blocks:
	// whole blocks, or running to the chunk's end.
	AppendBlocks(dst, src []byte) ([]byte, error)
}

// Compression says how a backend that compresses (Compressor) makes the
// chunks of the jobs that point to it. It is shared by every job of a
// scan: a backend keeps an encoder per worker for it, made once.
type Compression struct {
	// BlockElems is the encoders' bitshuffle block size in pixels: a
	// band of an image is compressed apart where it holds whole blocks.
	BlockElems int
	// NewEncoder makes one encoder. It is called by a backend's worker the
	// first time it compresses for this Compression, and again only after
	// the worker has compressed for several others meanwhile.
	NewEncoder func() (ChunkEncoder, error)
}

// Compressor is implemented by backends that honour Job.Compress: the cpu
// backend, which compresses each band of an image on the core that decoded
// and transposed it, while the band is still in its cache, wherever the
// image's bands hold whole bitshuffle blocks (a Pi-mega frame at the
// default block size).
type Compressor interface {
	// CompressesChunks does nothing: it marks the backend as one.
	CompressesChunks()
}

// Backend decodes and checksums batches of frames.
type Backend interface {
	// Name returns the backend's name, as New knows it.
	Name() string

	// Decode decodes every job of batch into its image and sets its
	// results. Problems with one frame go to that job's Err (and leave its
	// CRCs zero and its image undefined); the error is for a failure of the
	// backend itself, such as a call after Close. Decode blocks until the
	// whole batch is done; it is safe to call from several goroutines at
	// once, on distinct batches.
	Decode(batch []Job) error

	// Close releases the backend's workers and memory. It waits for Decode
	// calls in progress; later calls to Decode fail.
	Close() error
}

// Options configure a backend.
type Options struct {
	// Orientation gives each chip's rotation, 0 or 180 degrees, in
	// chip-major order. Nil leaves every chip at 0. Its length must match
	// the chip count of every frame decoded with it.
	Orientation frame.Orientation

	// Workers is the number of CPU worker goroutines; 0 means GOMAXPROCS.
	Workers int

	// Device is the CUDA device ordinal the cuda backend uses.
	Device int

	// Streams is the number of CUDA streams (with their own device
	// buffers) the cuda backend starts with: how many rounds of frames can
	// be on the device at once. 0 means 4. Reserve adds streams where the
	// pipelines sharing the backend reserve more decode calls.
	Streams int

	// ComputeCache is the directory where the CUDA driver keeps the
	// kernels it JIT-compiled (CUDA_CACHE_PATH), made if missing, so that
	// a later process loads them without compiling; "" leaves the
	// driver's choice ($CUDA_CACHE_PATH, else ~/.nv/ComputeCache). It
	// takes effect at the first cuda or auto backend of the process
	// (or Preload), when the driver starts.
	ComputeCache string

	// Logger receives the one line "auto" logs about its choice. Nil means
	// slog.Default(). A zap logger plugs in through an slog handler.
	Logger *slog.Logger
}

// HostAllocator is implemented by backends whose device copies host memory
// fastest, and asynchronously, when it is page-locked: the cuda backend. A
// pipeline finds it by type assertion, allocates its image buffers with it
// and registers the memory its source delivers payloads in, once, undoing
// both before it closes the backend. Any buffer works with any backend;
// page-locked ones are only faster.
type HostAllocator interface {
	// AllocHost returns n bytes of page-locked memory, outside the Go heap.
	AllocHost(n int) ([]byte, error)
	// FreeHost frees memory from AllocHost; the slice must not be used after.
	FreeHost(b []byte) error
	// RegisterHost page-locks b, memory of the caller's outside the Go heap
	// (mapped or allocated in C: the driver keeps its address, which cgo
	// forbids for Go memory), so that it is copied as fast as AllocHost
	// memory, until UnregisterHost.
	RegisterHost(b []byte) error
	// UnregisterHost undoes RegisterHost; call it before b is unmapped.
	UnregisterHost(b []byte) error
}

// Reserver is implemented by backends that hold device buffers for each
// Decode call in flight: the cuda backend. A pipeline calls Reserve when
// its scan is set up, before the first frame, so that the buffers are
// allocated once then and never grown while frames arrive, and releases
// the reservation when the scan ends. Several pipelines may share a
// backend: their reservations add up.
type Reserver interface {
	// Reserve makes room for calls more Decode calls at once, each of up
	// to batch frames of format f (and their transposed images when
	// shuffle). The returned function gives the calls back; the buffers
	// stay until Close.
	Reserve(f frame.Format, batch, calls int, shuffle bool) (release func(), err error)
}

// ErrClosed is returned by Decode after Close.
var ErrClosed = errors.New("gpu: backend closed")

// Names lists the backend names that New accepts.
func Names() []string { return []string{"auto", "cpu", "cuda"} }

// New returns the backend called name, configured by opts. It is the one
// place backends are registered.
func New(name string, opts Options) (Backend, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	switch name {
	case "cpu":
		return newCPU(opts), nil
	case "cuda":
		b, err := newCUDA(opts)
		if err != nil {
			return nil, fmt.Errorf("gpu: cuda backend: %w", err)
		}
		return b, nil
	case "auto":
		log := opts.Logger
		if log == nil {
			log = slog.Default()
		}
		b, err := newCUDA(opts)
		if err != nil {
			log.Log(context.Background(), fallbackLevel(err), "decode backend", "backend", "cpu", "reason", "cuda unavailable: "+err.Error())
			return newCPU(opts), nil
		}
		log.Info("decode backend", "backend", "cuda", "reason", "CUDA device found", "device", b.device)
		return b, nil
	}
	return nil, fmt.Errorf("gpu: unknown backend %q (want one of %s)", name, strings.Join(Names(), ", "))
}

// absentError is the error of a cuda backend where there is no GPU to
// use: no driver, no device, or a binary built without cgo.
type absentError struct{ error }

func (e absentError) Unwrap() error { return e.error }

// fallbackLevel is the level of auto's line when it falls back to the CPU
// for err: information where there is no GPU, a warning where there is
// one that failed (lost, or computing wrong).
func fallbackLevel(err error) slog.Level {
	var a absentError
	if errors.As(err, &a) {
		return slog.LevelInfo
	}
	return slog.LevelWarn
}

func (o *Options) validate() error {
	if o.Workers < 0 {
		return fmt.Errorf("gpu: %d workers: want 0 (GOMAXPROCS) or more", o.Workers)
	}
	if o.Device < 0 {
		return fmt.Errorf("gpu: CUDA device %d: want 0 or more", o.Device)
	}
	if o.Streams < 0 {
		return fmt.Errorf("gpu: %d streams: want 0 (4) or more", o.Streams)
	}
	if err := o.Orientation.Validate(len(o.Orientation)); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	return nil
}

func (o *Options) streams() int {
	if o.Streams > 0 {
		return o.Streams
	}
	return 4
}

func (o *Options) workers() int {
	if o.Workers > 0 {
		return o.Workers
	}
	return runtime.GOMAXPROCS(0)
}
