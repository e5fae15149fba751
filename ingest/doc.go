// Package ingest moves frames from a source to an HDF5 file: it applies the
// receiver's rules for bad frames (Tracker) and runs the pipeline that joins
// the stages, source -> decode + checksum -> compress -> write, over bounded
// channels and fixed pools of buffers.
//
// Frames come from a Source: CaptureSource replays a .pmcap file read by
// package capture (the built-in simulator, package sim, writes such
// files), and package fabric's Stream receives them from a detector over
// RDMA; Demux splits a source of several modules by module. The frame
// format itself is package frame.
package ingest
