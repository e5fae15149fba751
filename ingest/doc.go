// Package ingest moves frames from a source to an HDF5 file: it applies the
// receiver's rules for bad frames (Tracker) and runs the pipeline that joins
// the stages, source -> decode + checksum -> compress -> write, over bounded
// channels and fixed pools of buffers.
//
// Sources live in sub-packages: capture (replay of a .pmcap file) and sim
// (the built-in simulator); the frame format itself is package frame.
package ingest
