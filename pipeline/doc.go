// Package pipeline moves frames from a source to a sink: it applies the
// receiver's rules for bad frames (Tracker) and runs the stages, source ->
// decode + checksum -> process -> compress -> write, over bounded channels
// and fixed pools of buffers.
//
// Each source package carries its own Source: package capture replays a
// .pmcap file (the built-in simulator, package sim, writes such files),
// and package fabric's Stream receives frames from a detector over RDMA;
// Demux splits a source of several modules by module. The decode stage is
// a gpu.Backend, the compress stage a compress.Codec, and the frame format
// itself is package frame. Where the backend compresses as it decodes
// (gpu.Compressor, the cpu backend) and the codec compresses its blocks
// apart (compress.BlockEncoder: bslz4, bszstd), each band of an image is
// compressed on the core that decoded it, while it is in that core's
// cache, and the compress stage only passes the chunk on
// (Config.DecodeThenCompress).
//
// Of package pipeline, the processor stage's interfaces and the types they
// pass (Processor, Stage, Scan, Dataset, FrameWriter, StreamSeries,
// FrameStream) are part of h5ingest's facility API; see docs/extending.md.
package pipeline
