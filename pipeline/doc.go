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
// itself is package frame.
//
// Of package pipeline, the processor stage's interfaces and the types they
// pass (Processor, Stage, Scan, Dataset, FrameWriter, StreamSeries,
// FrameStream) are part of h5ingest's facility API; see docs/extending.md.
package pipeline
