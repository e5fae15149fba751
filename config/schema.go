package config

import (
	"cmp"
	"embed"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"h5ingest/frame"
	"h5ingest/plan"
)

// Default returns the built-in defaults: one Pi-mega module, 24-bit LFSR
// bitplane frames, received over libfabric's tcp provider, written as
// bitshuffle-LZ4 NXtomo files.
func Default() Profile {
	return Profile{
		Name:        "default",
		Description: "one simulated Pi-mega module",
		Detector: Detector{
			Model:           "pimega-135d",
			Modules:         []Module{{ID: 0, X: 0, Y: 0}},
			ChipsX:          6,
			ChipsY:          6,
			ChipWidth:       256,
			ChipHeight:      256,
			ChipOrientation: []int{},
			PixelSize:       55e-6,
			Distance:        1.0,
			Energy:          10000,
			Encoding:        "bitplane",
			BitDepth:        24,
			Coding:          "lfsr",
			BeamCenter:      []float64{},
		},
		Source: Source{
			Transport:      "fabric",
			Provider:       "tcp",
			Address:        "127.0.0.1",
			Port:           7100,
			Mode:           "write",
			ConnectTimeout: time.Minute,
			IdleTimeout:    10 * time.Second,
			RingSlots:      32,
			RingMaxBytes:   4 << 30,
			MaxFrameGap:    10_000,
			DevicePort:     1,
			QPType:         "rc",
			MTU:            4096,
			Immediate:      "frame",
			FrameHeader:    "frame",
			WriteGuard:     2,
			FrontEnd:       []FrontEnd{},
		},
		Stream:  Stream{Every: 1, Queue: 8, MaxBytes: 1 << 30, Linger: 2 * time.Second},
		Backend: "auto",
		Output: Output{
			Directory:     ".",
			Template:      "{scan}.h5",
			Layout:        "nxtomo",
			Processors:    []Processor{},
			Compression:   "bslz4",
			Level:         0,
			FlushInterval: time.Second,
			Overwrite:     false,
		},
		Plan: PlanKeys{AngleStart: 0, AngleEnd: 180},
	}
}

// Key documents one profile key.
type Key struct {
	Name string // dotted path, e.g. "detector.pixel_size_m"
	Help string // what the key means, with its unit and allowed values
}

// Keys lists every profile key, in documentation order.
var Keys = []Key{
	{"name", "short name of the profile"},
	{"description", "one line describing the profile for people"},
	{"detector.model", "detector model, for people and the file's metadata"},
	{"detector.modules", "modules of the array: a list of {id, x, y}, the pixel offset of each module's top left corner in the array image"},
	{"detector.chips_x", "chips per module row, 1 to 255"},
	{"detector.chips_y", "chips per module column, 1 to 255"},
	{"detector.chip_width", "pixels per chip row, 1 to 65535 (a multiple of 8 for bitplane frames)"},
	{"detector.chip_height", "pixels per chip column, 1 to 65535"},
	{"detector.chip_orientation", "rotation of each chip in the module image, 0 or 180 degrees, chip order (top chip row first, left to right); empty: all 0"},
	{"detector.pixel_size_m", "pixel pitch, metres"},
	{"detector.distance_m", "sample-detector distance, metres"},
	{"detector.energy_ev", "photon energy, eV"},
	{"detector.encoding", "payload encoding the detector sends: bitplane, packed12, packed24, u16le or u32le"},
	{"detector.bit_depth", "counter bits: 1, 6, 12 or 24 for bitplane; 12 packed12, 24 packed24, 16 u16le, 32 u32le"},
	{"detector.coding", "counter coding: binary or lfsr (bitplane only)"},
	{"detector.count_time_s", "exposure of each image, seconds, for the live stream (count_time, each image's real_time); 0: not known"},
	{"detector.frame_time_s", "time from the start of one image to the next, seconds, for the live stream (frame_time); 0: not known"},
	{"detector.beam_center_px", "where the direct beam would hit the detector, [x, y] in pixels, for the live stream (beam_center_x, _y); empty: not known"},
	{"detector.sensor_material", "the sensor's material, such as Si or CdTe, for the live stream; empty: not known"},
	{"detector.sensor_thickness_m", "the sensor's thickness, metres, for the live stream; 0: not known"},
	{"detector.threshold_energy_ev", "the counting threshold, eV, for the live stream (threshold_energy); 0: not known"},
	{"detector.serial_number", "the detector's serial number, for the live stream; empty: not known"},
	{"source.transport", "how frames arrive"},
	{"source.provider", "libfabric provider: verbs on RoCE or InfiniBand, tcp elsewhere"},
	{"source.address", "address the receiver listens on"},
	{"source.port", "port the receiver listens on, 1 to 65535: acquire takes every module of the array on it, serve module K on it plus K's index in detector.modules"},
	{"source.mode", "how the detector delivers frames: write (one-sided RDMA writes into the receiver's ring) or send (two-sided); acquire refuses a sender in the other mode"},
	{"source.connect_timeout", "how long to wait for the detector to connect, e.g. 60s"},
	{"source.idle_timeout", "silence mid-scan after which the scan ends, e.g. 10s"},
	{"source.ring_slots", "frame slots in the receiver's registered ring, 2 or more"},
	{"source.ring_max_bytes", "most bytes one module's receive ring may take (ring_slots times the frame size must fit), 1 MiB or more; bounds the receiver's memory"},
	{"source.max_frame_gap", "in a scan without a plan: how far beyond the highest frame number received a frame's number may lie; a frame further out (a corrupt number) is rejected as out of range, not written, so that it cannot grow the scan; 1 to 10000000"},
	{"source.device", "RDMA device the roce transport opens, as ibv_devinfo names it (mlx5_0, rxe0); empty: the first"},
	{"source.device_port", "the device's port, 1 or more"},
	{"source.gid_index", "entry of the port's GID table the queue pairs use: it chooses RoCE v1 or v2 (see docs/deploying.md), 0 or more"},
	{"source.qp_type", "queue pair type of the roce transport: rc (reliable) or uc (unreliable: a lost packet loses its frame)"},
	{"source.mtu", "path MTU of the roce transport's queue pairs, bytes: 256, 512, 1024, 2048 or 4096"},
	{"source.immediate", "what the front end's immediate data says: frame (the frame number; frame N goes to slot N mod ring_slots) or slot (the slot index)"},
	{"source.frame_header", "what the front end writes into a slot: frame (h5ingest's 64-byte frame header, then the payload) or none (the payload alone; the frame number comes from the immediate)"},
	{"source.write_guard", "writes a roce front end may have under way beyond the last completion seen: a frame is stored ok only if no frame at or beyond its number plus ring_slots minus write_guard had completed once it was read; 1 or more"},
	{"source.front_end", "the roce front end's end of each module's queue pair, where its firmware fixes it: a list of {module, gid, qpn, psn, mac}; empty: from the acquire's --front-end file, or serve's PUT /v1/rdma"},
	{"source.drop_when_full", "for a detector that cannot wait: drop (count, record missing) the frames that arrive while the pipeline is full, instead of holding the detector back: true or false"},
	{"backend", "decode backend"},
	{"output.directory", "directory the scan files go to"},
	{"output.template", "file name of a scan: {scan} is the scan id, {date} the date (YYYYMMDD), {module} the module id; ends in .h5"},
	{"output.layout", "file layout"},
	{"output.compression", "chunk compression"},
	{"output.level", "compression level, one the codec takes; 0: the codec's default"},
	{"output.flush_interval", "how often readers following the file see new frames, e.g. 1s"},
	{"output.overwrite", "replace an existing file of the same name: true or false"},
	{"output.processors", "processor stages every decoded image goes through, in order, before compression (a mask, a flat-field preview): each a name, or a map of its name and its options ({name: flatfield, bin: 4}); the file stores the images as the processors leave them; a list, empty for none"},
	{"output.backend_shuffle", "do the codec's bit transpose on the decode backend (the GPU with cuda), leaving the CPU only the compression; the files do not change: true or false"},
	{"output.file_mode", "permission bits of the scan's files (each module's and the master), in octal, the digits as written, quoted or not (440 is mode 0440): \"0640\" lets the files' group read them, \"0644\" everyone; empty: as the process's umask leaves them (a service's UMask=0027 leaves them unreadable to others); set by the operator, never by a request"},
	{"output.file_group", "owner group of the scan's files, a group name or id (the process must belong to it, unless it runs as root); empty: the process's group; set by the operator, never by a request"},
	{"plan.darks", "dark fields at the start of a scan"},
	{"plan.flats", "flat fields after the darks"},
	{"plan.projections", "projections after the flats; 0 with no darks or flats: every frame is a projection"},
	{"plan.angle_start", "rotation angle of the first projection, degrees"},
	{"plan.angle_end", "rotation angle the projections stop short of, degrees"},
	{"plan.sequence", `frames in order as kind:count, e.g. "flats:20,darks:10,projections:1800,flats:20"; replaces darks, flats and projections`},
	{"plan.positions", "CSV file of the sample's scan positions for ptychography, x,y[,z] in metres, one line per frame; CXI files record them as translations; empty: none"},
	{"status.address", "serve the status page and Prometheus metrics while a scan runs: [HOST]:PORT, or PORT alone for loopback; empty: off"},
	{"stream.address", "send the scan's images to online analysis as DECTRIS Stream V2 (CBOR on a ZeroMQ PUSH socket) bound to tcp://HOST:PORT (31001 is Stream V2's port); module i of several binds PORT+i; empty: off"},
	{"stream.every", "stream every Nth image of the scan, for previews: 1 or more (1: each)"},
	{"stream.max_rate", "stream at most this many images a second, for previews; 0: no limit"},
	{"stream.queue", "images that may wait to be put in image_id order and sent, 1 to 1024; an image that finds the queue full is left out of the stream (never the file) and counted"},
	{"stream.max_bytes", "most bytes the stream's queue may take: queue times the image's bytes must fit, 1 MiB or more; bounds the stream's memory"},
	{"stream.linger", "after the scan's last image, how long the stream waits for a connected consumer to take the images still queued and the end message, e.g. 2s; 1ms to 1m"},
	{"metadata.title", "the scan's title, the file's /entry/title; empty: the profile's description"},
	{"metadata.sample", "the sample's name, the file's /entry/sample/name"},
	{"metadata.experiment_identifier", "the proposal or experiment the scan belongs to, the file's /entry/experiment_identifier"},
}

// KeyNamed returns the key named name.
func KeyNamed(name string) (Key, bool) {
	if k := findKey(name); k != nil {
		return *k, true
	}
	return Key{}, false
}

// findKey returns the key named name, or nil.
func findKey(name string) *Key {
	for i := range Keys {
		if Keys[i].Name == name {
			return &Keys[i]
		}
	}
	return nil
}

// modes are the values of source.mode.
var modes = []string{"write", "send"}

// Names are the names a profile may choose for the keys that name a
// stage: those of a registry (package registry), which says which stages
// the program has.
type Names struct {
	Transports []string // source.transport
	Backends   []string // backend
	Codecs     []string // output.compression
	Layouts    []string // output.layout
	Processors []string // output.processors
	// CheckProcessor checks entry index of output.processors against
	// the processor it names: its options decode into the processor's
	// option struct (Processor.Decode) and pass the processor's own
	// check. Nil: options are not checked.
	CheckProcessor func(index int, entry Processor) error

	// CodecInfo says what each codec of Codecs allows, by name; a codec
	// it leaves out takes no level, has no bit transpose and no Stream V2
	// encoding.
	CodecInfo map[string]CodecInfo
	// Transposers are the backends that do a codec's bit transpose
	// themselves (output.backend_shuffle).
	Transposers []string
}

// CodecInfo is what a profile may ask of a codec, as its registry entry
// says.
type CodecInfo struct {
	// MinLevel and MaxLevel bound output.level besides 0 (the codec's
	// default); both 0: the codec takes no level.
	MinLevel, MaxLevel int
	Transpose          bool // its first stage is a bit transpose a backend may do
	Stream             bool // DECTRIS Stream V2 carries its chunks
}

// Of returns the names key may take, and whether key names a stage.
func (n Names) Of(key string) ([]string, bool) {
	switch key {
	case "source.transport":
		return n.Transports, true
	case "backend":
		return n.Backends, true
	case "output.compression":
		return n.Codecs, true
	case "output.layout":
		return n.Layouts, true
	case "output.processors":
		return n.Processors, true
	}
	return nil, false
}

// KeyHelp returns what k means, with the names it may take where it
// names a stage, and what the stages allow where it depends on them (the
// codecs' levels, the codecs with a bit transpose, those Stream V2
// carries).
func (n Names) KeyHelp(k Key) string {
	names, ok := n.Of(k.Name)
	if !ok {
		return k.Help + n.Allowed(k.Name)
	}
	if len(names) == 0 {
		return k.Help + " (none registered)"
	}
	return k.Help + ": " + OneOf(names)
}

// Allowed returns, for help, what the stages allow for key where it
// depends on their properties: " (bszstd 1 to 22, deflate 1 to 9)" for
// output.level; "" for other keys.
func (n Names) Allowed(key string) string {
	var list string
	switch key {
	case "output.level":
		var levels []string
		for _, c := range n.Codecs {
			if i := n.CodecInfo[c]; i.MinLevel != 0 || i.MaxLevel != 0 {
				levels = append(levels, fmt.Sprintf("%s %d to %d", c, i.MinLevel, i.MaxLevel))
			}
		}
		list = cmp.Or(strings.Join(levels, ", "), "no codec takes one")
	case "output.backend_shuffle":
		list = "codecs with a bit transpose: " + cmp.Or(OneOf(codecsWith(n, func(c CodecInfo) bool { return c.Transpose })), "no codec has one")
	case "stream.address":
		list = "codecs Stream V2 carries: " + cmp.Or(OneOf(codecsWith(n, func(c CodecInfo) bool { return c.Stream })), "no codec")
	default:
		return ""
	}
	return " (" + list + ")"
}

// OneOf returns names as a person reads a choice: "a, b or c".
func OneOf(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Validate reports the first value that is out of range, as an error naming
// the key and what is allowed; names are the stages that keys may name.
func (p *Profile) Validate(names Names) error {
	for _, check := range []func() error{p.validateDetector, p.validateSource, p.validateOutput, p.validatePlan, p.validateStatus, p.validateStream} {
		if err := check(); err != nil {
			return err
		}
	}
	for _, c := range []struct {
		key   string
		value string
	}{{"source.transport", p.Source.Transport}, {"backend", p.Backend}, {"output.layout", p.Output.Layout}, {"output.compression", p.Output.Compression}} {
		allowed, _ := names.Of(c.key)
		if err := oneOf(c.key, c.value, allowed); err != nil {
			return err
		}
	}
	for _, proc := range p.Output.Processors {
		if err := oneOf("output.processors", proc.Name, names.Processors); err != nil {
			return err
		}
	}
	if err := p.validateProcessors(names); err != nil {
		return err
	}
	for _, check := range []func(Names) error{p.validateLevel, p.validateShuffle, p.validateStreamCodec} {
		if err := check(names); err != nil {
			return err
		}
	}
	return nil
}

func bad(key, format string, args ...any) error {
	return &keyError{key: key, msg: fmt.Sprintf(format, args...)}
}

func oneOf(key, v string, allowed []string) error {
	if !slices.Contains(allowed, v) {
		return bad(key, "%q, want one of %s", v, strings.Join(allowed, ", "))
	}
	return nil
}

func (p *Profile) validateDetector() error {
	d := &p.Detector
	f, err := d.Format()
	if err != nil {
		return err
	}
	for i, deg := range d.ChipOrientation {
		if deg != 0 && deg != 180 {
			return bad(fmt.Sprintf("detector.chip_orientation[%d]", i), "%d degrees, want 0 or 180", deg)
		}
	}
	if n := len(d.ChipOrientation); n != 0 && n != f.Chips() {
		return bad("detector.chip_orientation", "%d chips listed, the module has %d (chips_x x chips_y)", n, f.Chips())
	}
	if len(d.Modules) == 0 {
		return bad("detector.modules", "no modules, want at least one {id, x, y}")
	}
	seen := map[int]bool{}
	for i, m := range d.Modules {
		key := fmt.Sprintf("detector.modules[%d]", i)
		switch {
		case m.ID < 0 || m.ID > 65535:
			return bad(key, "id %d, want 0 to 65535", m.ID)
		case seen[m.ID]:
			return bad(key, "id %d listed twice", m.ID)
		case m.X < 0 || m.Y < 0:
			return bad(key, "offset (%d, %d), want pixels from the array's top left corner, 0 or more", m.X, m.Y)
		}
		seen[m.ID] = true
		for j, o := range d.Modules[:i] {
			if m.X < o.X+f.Width() && o.X < m.X+f.Width() && m.Y < o.Y+f.Height() && o.Y < m.Y+f.Height() {
				return bad(key, "at (%d, %d) overlaps detector.modules[%d] at (%d, %d): a module is %d x %d pixels",
					m.X, m.Y, j, o.X, o.Y, f.Width(), f.Height())
			}
		}
	}
	switch {
	case !(d.PixelSize > 0 && d.PixelSize < 1e-2):
		return bad("detector.pixel_size_m", "%g, want a pitch in metres above 0 and below 0.01", d.PixelSize)
	case !(d.Distance >= 0 && d.Distance < 1000):
		return bad("detector.distance_m", "%g, want metres from 0 to 1000", d.Distance)
	case !(d.Energy > 0 && d.Energy < 1e7):
		return bad("detector.energy_ev", "%g, want eV above 0 and below 1e7", d.Energy)
	}
	return d.validateStreamed()
}

// validateStreamed checks the keys the live stream's start message
// carries: each 0 or empty (not known), or a value in range.
func (d *Detector) validateStreamed() error {
	switch {
	case !(d.CountTime >= 0 && d.CountTime <= 3600):
		return bad("detector.count_time_s", "%g, want seconds from 0 (not known) to 3600", d.CountTime)
	case !(d.FrameTime >= 0 && d.FrameTime <= 3600):
		return bad("detector.frame_time_s", "%g, want seconds from 0 (not known) to 3600", d.FrameTime)
	case d.CountTime > 0 && d.FrameTime > 0 && d.CountTime > d.FrameTime:
		return bad("detector.count_time_s", "%g s, longer than detector.frame_time_s (%g s): an exposure fits in its frame", d.CountTime, d.FrameTime)
	case len(d.BeamCenter) != 0 && len(d.BeamCenter) != 2:
		return bad("detector.beam_center_px", "%d values, want [x, y] or none", len(d.BeamCenter))
	case !(d.SensorThickness >= 0 && d.SensorThickness < 0.1):
		return bad("detector.sensor_thickness_m", "%g, want metres from 0 (not known) to below 0.1", d.SensorThickness)
	case !(d.Threshold >= 0 && d.Threshold < 1e7):
		return bad("detector.threshold_energy_ev", "%g, want eV from 0 (not known) to below 1e7", d.Threshold)
	}
	for i, v := range d.BeamCenter {
		if math.IsNaN(v) || math.Abs(v) > 1e6 {
			return bad(fmt.Sprintf("detector.beam_center_px[%d]", i), "%g, want pixels within a million of the image", v)
		}
	}
	return nil
}

// Format returns the frame format the detector is set to send.
func (d *Detector) Format() (frame.Format, error) {
	enc, err := frame.ParseEncoding(d.Encoding)
	if err != nil {
		return frame.Format{}, bad("detector.encoding", "%v", err)
	}
	coding, err := frame.ParseCoding(d.Coding)
	if err != nil {
		return frame.Format{}, bad("detector.coding", "%v", err)
	}
	f := frame.Format{
		Geometry: frame.Geometry{ChipsX: d.ChipsX, ChipsY: d.ChipsY, ChipWidth: d.ChipWidth, ChipHeight: d.ChipHeight},
		Encoding: enc, BitDepth: d.BitDepth, Coding: coding,
	}
	if err := f.Geometry.Validate(); err != nil {
		return frame.Format{}, bad("detector.chips_x", "%v (with chips_y, chip_width, chip_height)", err)
	}
	if err := f.Validate(); err != nil {
		if errors.Is(err, frame.ErrPayloadTooLarge) {
			return frame.Format{}, bad("detector.chips_x", "%v (with chips_y, chip_width, chip_height and bit_depth)", err)
		}
		return frame.Format{}, bad("detector.bit_depth", "%v (with encoding, coding and chip_width)", err)
	}
	return f, nil
}

// Orientation returns the chips' orientation, nil where every chip is at 0.
func (d *Detector) Orientation() frame.Orientation {
	if len(d.ChipOrientation) == 0 {
		return nil
	}
	return frame.Orientation(d.ChipOrientation)
}

// ModuleIDs returns the ids of the detector's modules, in profile order.
func (d *Detector) ModuleIDs() []int {
	ids := make([]int, len(d.Modules))
	for i, m := range d.Modules {
		ids[i] = m.ID
	}
	return ids
}

func (p *Profile) validateSource() error {
	s := &p.Source
	if err := oneOf("source.mode", s.Mode, modes); err != nil {
		return err
	}
	switch {
	case s.Provider == "":
		return bad("source.provider", "empty, want a libfabric provider such as verbs or tcp")
	case s.Address == "":
		return bad("source.address", "empty, want an address to listen on")
	case s.Port < 1 || s.Port > 65535:
		return bad("source.port", "%d, want 1 to 65535", s.Port)
	case s.ConnectTimeout <= 0:
		return bad("source.connect_timeout", "%v, want a duration above 0 such as 60s", s.ConnectTimeout)
	case s.IdleTimeout <= 0:
		return bad("source.idle_timeout", "%v, want a duration above 0 such as 10s", s.IdleTimeout)
	case s.RingSlots < 2 || s.RingSlots > 4096:
		return bad("source.ring_slots", "%d, want 2 to 4096", s.RingSlots)
	case s.RingMaxBytes < 1<<20:
		return bad("source.ring_max_bytes", "%d, want 1048576 (1 MiB) or more", s.RingMaxBytes)
	case s.MaxFrameGap < 1 || s.MaxFrameGap > plan.MaxFrames:
		return bad("source.max_frame_gap", "%d, want 1 to %d frames", s.MaxFrameGap, plan.MaxFrames)
	case s.DevicePort < 1 || s.DevicePort > 255:
		return bad("source.device_port", "%d, want 1 to 255", s.DevicePort)
	case s.GIDIndex < 0 || s.GIDIndex > 65535:
		return bad("source.gid_index", "%d, want 0 to 65535", s.GIDIndex)
	case s.WriteGuard < 1 || s.WriteGuard > 4096:
		return bad("source.write_guard", "%d, want 1 to 4096", s.WriteGuard)
	}
	return nil
}

func (p *Profile) validateOutput() error {
	o := &p.Output
	switch {
	case o.Directory == "":
		return bad("output.directory", "empty, want a directory (. for the current one)")
	case !strings.HasSuffix(o.Template, ".h5") || strings.Contains(o.Template, "/"):
		return bad("output.template", "%q, want a file name ending in .h5, without /", o.Template)
	case o.FlushInterval <= 0:
		return bad("output.flush_interval", "%v, want a duration above 0 such as 1s", o.FlushInterval)
	}
	_, _, err := o.Access()
	return err
}

// validateLevel checks output.level against the levels the codec takes.
func (p *Profile) validateLevel(names Names) error {
	o := p.Output
	if o.Level == 0 {
		return nil
	}
	c := names.CodecInfo[o.Compression]
	if c.MinLevel == 0 && c.MaxLevel == 0 {
		return bad("output.level", "%d with %s, which takes no level: want 0", o.Level, o.Compression)
	}
	if o.Level < c.MinLevel || o.Level > c.MaxLevel {
		return bad("output.level", "%d with %s, want 0 (default) or %d to %d", o.Level, o.Compression, c.MinLevel, c.MaxLevel)
	}
	return nil
}

// validateShuffle checks that output.backend_shuffle asks for a bit
// transpose the codec has and the backend does.
func (p *Profile) validateShuffle(names Names) error {
	o := p.Output
	switch {
	case !o.BackendShuffle:
	case !names.CodecInfo[o.Compression].Transpose:
		return bad("output.backend_shuffle", "true with compression %s, which has no bit transpose: want %s, or false",
			o.Compression, OneOf(codecsWith(names, func(c CodecInfo) bool { return c.Transpose })))
	case !slices.Contains(names.Transposers, p.Backend):
		return bad("output.backend_shuffle", "true with backend %s, which cannot do the bit transpose: want %s, or false",
			p.Backend, OneOf(names.Transposers))
	}
	return nil
}

// validateStreamCodec checks that the live stream can carry the chunks of
// the profile's codec.
func (p *Profile) validateStreamCodec(names Names) error {
	if p.Stream.Address == "" || names.CodecInfo[p.Output.Compression].Stream {
		return nil
	}
	return bad("stream.address", "set with output.compression %s, which Stream V2 cannot carry: want %s",
		p.Output.Compression, OneOf(codecsWith(names, func(c CodecInfo) bool { return c.Stream })))
}

// codecsWith returns the codecs of names, in order, whose info passes ok.
func codecsWith(names Names, ok func(CodecInfo) bool) []string {
	var out []string
	for _, n := range names.Codecs {
		if ok(names.CodecInfo[n]) {
			out = append(out, n)
		}
	}
	return out
}

func (p *Profile) validateStatus() error {
	a := p.Status.Address
	if a == "" {
		return nil
	}
	port := a
	if strings.Contains(a, ":") {
		var err error
		if _, port, err = net.SplitHostPort(a); err != nil {
			return bad("status.address", "%q, want [HOST]:PORT or PORT", a)
		}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return bad("status.address", "%q, want [HOST]:PORT or PORT with a port of 0 to 65535", a)
	}
	return nil
}

func (p *Profile) validateStream() error {
	s := p.Stream
	switch {
	case s.Every < 1:
		return bad("stream.every", "%d, want 1 or more", s.Every)
	case s.MaxRate < 0:
		return bad("stream.max_rate", "%g, want 0 (no limit) or more", s.MaxRate)
	case s.Queue < 1 || s.Queue > 1024:
		return bad("stream.queue", "%d, want 1 to 1024", s.Queue)
	case s.MaxBytes < 1<<20:
		return bad("stream.max_bytes", "%d, want 1048576 (1 MiB) or more", s.MaxBytes)
	case s.Linger < time.Millisecond || s.Linger > time.Minute:
		return bad("stream.linger", "%v, want 1ms to 1m", s.Linger)
	case s.Address == "":
		return nil
	}
	if f, err := p.Detector.Format(); err == nil {
		if total := int64(s.Queue) * int64(f.ImageSize()); total > int64(s.MaxBytes) {
			return bad("stream.queue", "%d images of %d bytes take %d bytes, more than stream.max_bytes (%d): lower stream.queue or raise stream.max_bytes",
				s.Queue, f.ImageSize(), total, s.MaxBytes)
		}
	}
	hostPort, ok := strings.CutPrefix(s.Address, "tcp://")
	if !ok {
		return bad("stream.address", "%q, want tcp://HOST:PORT", s.Address)
	}
	if _, port, err := net.SplitHostPort(hostPort); err != nil {
		return bad("stream.address", "%q, want tcp://HOST:PORT", s.Address)
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535-len(p.Detector.Modules) {
		return bad("stream.address", "%q, want a port of 1 to %d", s.Address, 65535-len(p.Detector.Modules))
	}
	return nil
}

func (p *Profile) validatePlan() error {
	_, err := p.Plan.Plan()
	return err
}

// Plan returns the scan plan the keys give: the sequence where one is set,
// else darks, flats and projections in that order.
func (k PlanKeys) Plan() (plan.Plan, error) {
	for _, c := range []struct {
		key string
		n   int
	}{{"plan.darks", k.Darks}, {"plan.flats", k.Flats}, {"plan.projections", k.Projections}} {
		if c.n < 0 {
			return plan.Plan{}, bad(c.key, "%d, want 0 or more frames", c.n)
		}
	}
	p := plan.Tomo(k.Darks, k.Flats, k.Projections, k.AngleStart, k.AngleEnd)
	if k.Sequence == "" {
		if (k.Darks > 0 || k.Flats > 0) && k.Projections == 0 {
			return plan.Plan{}, bad("plan.projections", "0 with darks or flats, want the projections too")
		}
	} else {
		steps, err := plan.ParseSequence(k.Sequence)
		if err != nil {
			return plan.Plan{}, bad("plan.sequence", "%v", err)
		}
		p.Steps = steps
	}
	if err := p.Validate(); err != nil {
		switch {
		case errors.Is(err, plan.ErrTooLong) && k.Sequence != "":
			return plan.Plan{}, bad("plan.sequence", "%v", err)
		case errors.Is(err, plan.ErrTooLong):
			return plan.Plan{}, bad("plan.projections", "%v (with plan.darks and plan.flats)", err)
		}
		return plan.Plan{}, bad("plan.angle_start", "%v (with plan.angle_end)", err)
	}
	if k.Positions != "" {
		pos, err := readPositions(k.Positions)
		if err != nil {
			return plan.Plan{}, bad("plan.positions", "%v", err)
		}
		switch n := p.Frames(); {
		case n == 0:
			// A ptychography scan: one frame per position.
			p.Steps = []plan.Step{{Key: plan.Projection, Count: len(pos)}}
		case n != len(pos):
			return plan.Plan{}, bad("plan.positions", "%d positions in %s for a plan of %d frames", len(pos), k.Positions, n)
		}
		p.Positions = pos
	}
	return p, nil
}

// readPositions reads the positions file at path.
func readPositions(path string) ([][3]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	pos, err := plan.ReadPositions(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return pos, nil
}

// ErrScanID is wrapped by the error for a scan id that could name a file
// outside the output directory.
var ErrScanID = errors.New("a scan id is part of a file name: it may not hold a /, a NUL byte or .., nor be . alone")

// CheckScanID reports a scan id that, put into a file name, could take the
// file out of the output directory.
func CheckScanID(id string) error {
	if strings.ContainsAny(id, "/\x00") || id == "." || strings.Contains(id, "..") {
		return fmt.Errorf("scan id %q: %w", id, ErrScanID)
	}
	return nil
}

// FileName returns the output file of a scan from the template, in the
// output directory. It refuses a scan id that could take the file out of
// the directory (CheckScanID), and a template whose substituted name does.
func (o *Output) FileName(scan string, module int, now time.Time) (string, error) {
	if err := CheckScanID(scan); err != nil {
		return "", err
	}
	r := strings.NewReplacer("{scan}", scan, "{date}", now.Format("20060102"), "{module}", fmt.Sprint(module))
	name := r.Replace(o.Template)
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return "", fmt.Errorf("output.template %q with scan id %q names %q, not a file in output.directory", o.Template, scan, name)
	}
	return path.Join(o.Directory, name), nil
}

//go:embed profiles/*.yaml
var builtins embed.FS

// BuiltinNames returns the names of the profiles built into the binary.
func BuiltinNames() []string {
	entries, _ := builtins.ReadDir("profiles")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	return names
}

// BuiltinText returns the YAML text of the built-in profile name.
func BuiltinText(name string) ([]byte, bool) {
	if strings.ContainsAny(name, "/.") {
		return nil, false
	}
	text, err := builtins.ReadFile("profiles/" + name + ".yaml")
	return text, err == nil
}
