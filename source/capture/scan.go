package capture

import (
	"time"

	"h5ingest/frame"
)

// Fields h5ingest records in a capture's metadata beside profile, created
// and software, so that a replay writes the file the scan would have
// written, and a person can tell what the capture holds.
const (
	// KeyVersion is the h5ingest version that wrote the capture (a string).
	KeyVersion = "version"
	// KeyPlan is the scan plan, as package plan encodes it in JSON:
	// {"steps": [{"key": 2, "count": 10}, ...], "angle_start": 0,
	// "angle_end": 180, "positions": [[x, y, z], ...]}. Absent where the
	// scan had no plan.
	KeyPlan = "plan"
	// KeyProfileValues is the merged profile the scan ran with (defaults,
	// profile file, environment and flags), nested by its keys as a
	// profile file holds them.
	KeyProfileValues = "profile_values"
	// KeyGeometry is the detector the frames came from (a Geometry).
	KeyGeometry = "geometry"
	// KeyScanTimes is when the scan of each module began and ended, as
	// the scan's files record them (a list of ScanTime), so that a replay
	// writes the live scan's start_time and end_time. acquire --record
	// writes a module's start when it makes the module's file, and its
	// end when it closes it: a capture whose acquire was killed has
	// starts and no ends. Absent from other captures.
	KeyScanTimes = "scan_times"
)

// ScanTime is when the scan of one module began and ended, as its file
// records them; a zero time was not recorded.
type ScanTime struct {
	Module int       `json:"module"`
	Start  time.Time `json:"start_time,omitzero"`
	End    time.Time `json:"end_time,omitzero"`
}

// WidestScanTime is a ScanTime whose JSON is as long as any recorded one
// (times are recorded in UTC): a placeholder that reserves the room of
// times known only later (see Writer.RewriteMetadata).
func WidestScanTime(module int) ScanTime {
	t := time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
	return ScanTime{Module: module, Start: t, End: t}
}

// FormatInfo is a frame format as capture metadata spells it.
type FormatInfo struct {
	ChipsX     int    `json:"chips_x"`
	ChipsY     int    `json:"chips_y"`
	ChipWidth  int    `json:"chip_width"`
	ChipHeight int    `json:"chip_height"`
	Encoding   string `json:"encoding"`
	BitDepth   int    `json:"bit_depth"`
	Coding     string `json:"coding"`
}

// NewFormatInfo returns f as capture metadata spells it.
func NewFormatInfo(f frame.Format) FormatInfo {
	return FormatInfo{
		ChipsX: f.ChipsX, ChipsY: f.ChipsY, ChipWidth: f.ChipWidth, ChipHeight: f.ChipHeight,
		Encoding: f.Encoding.String(), BitDepth: f.BitDepth, Coding: f.Coding.String(),
	}
}

// Format returns the frame format f describes.
func (f FormatInfo) Format() (frame.Format, error) {
	enc, err := frame.ParseEncoding(f.Encoding)
	if err != nil {
		return frame.Format{}, err
	}
	coding, err := frame.ParseCoding(f.Coding)
	if err != nil {
		return frame.Format{}, err
	}
	ff := frame.Format{
		Geometry: frame.Geometry{ChipsX: f.ChipsX, ChipsY: f.ChipsY, ChipWidth: f.ChipWidth, ChipHeight: f.ChipHeight},
		Encoding: enc, BitDepth: f.BitDepth, Coding: coding,
	}
	return ff, ff.Validate()
}

// Geometry is the detector a capture's frames came from, recorded under
// KeyGeometry.
type Geometry struct {
	Format      FormatInfo `json:"format"`                     // of every module's frames
	Modules     []Module   `json:"modules"`                    // the modules of the array
	Orientation []int      `json:"chip_orientation,omitempty"` // per chip, 0 or 180 degrees; empty: all 0
	PixelSize   float64    `json:"pixel_size_m"`
	Distance    float64    `json:"distance_m"`
	Energy      float64    `json:"energy_ev"`
}

// Module is one module of a detector array: its id and the pixel offset
// of its top left corner in the array's image.
type Module struct {
	ID int `json:"id"`
	X  int `json:"x"`
	Y  int `json:"y"`
}
