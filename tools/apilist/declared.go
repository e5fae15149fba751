package main

// declared is h5ingest's facility API: the packages, and of each the
// names, that a facility's own module may rely on, as docs/extending.md
// ("The facility API") says. Names nil: every exported name of the
// package. A type brings its exported fields and methods with it.
var declared = []pkg{
	// The stage interfaces and the types they pass.
	{Path: "h5ingest/frame"},
	{Path: "h5ingest/compress"},
	{Path: "h5ingest/pipeline", Names: []string{"Processor", "Stage", "Scan", "Dataset", "FrameWriter", "StreamSeries", "FrameStream"}},
	{Path: "h5ingest/writer", Names: []string{"Layout", "Builder", "Node", "Options", "PerFrame",
		"ColumnImageKey", "ColumnRotationAngle", "ColumnMonitor", "ColumnTranslation", "NXtomo", "CXI"}},
	// Registering stages, and the command that chooses them.
	{Path: "h5ingest/registry"},
	{Path: "h5ingest/stock"},
	{Path: "h5ingest/cli"},
	// The conformance suites a facility's stages run.
	{Path: "h5ingest/compress/compresstest"},
	{Path: "h5ingest/pipeline/pipelinetest", Names: []string{"Processor"}},
	{Path: "h5ingest/writer/writertest"},
}

// pkg is a package of the facility API.
type pkg struct {
	Path  string   // import path
	Names []string // the names declared; nil: every exported name
}
