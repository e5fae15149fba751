package stream

// A decoder of Stream V2 messages that follows the rules of DECTRIS's
// reference parser (stream_v2/examples/stream2.c and stream2.h in
// github.com/dectris/documentation), written here from those rules: a
// message the reference parser refuses, this one refuses with the same
// class of error. Every stream test runs every message it receives
// through it (checkScan).
//
// The rules, as the reference parser applies them:
//   - the message begins with the self-described CBOR tag 55799, the
//     bytes d9 d9 f7, else it is refused with a signature error;
//   - then one map, whose first key is "type", whose value is a text
//     string naming start, image or end;
//   - every key is a text string; a tag before a value is skipped
//     (except before countrate_correction_lookup_table);
//   - where it reads a double, a half, single or double float, nothing
//     else (an integer is refused); where it reads a uint64, an unsigned
//     integer; where it reads a text string, a text string; a boolean, a
//     boolean;
//   - Rational times are arrays of exactly two unsigned integers;
//     detector_translation three floats; channels text strings;
//   - the maps it walks by length (data, threshold_energy, flatfield,
//     pixel_mask) have a definite length;
//   - a MultiDimArray is tag 40 over [[dim0, dim1], typed array], where
//     the typed array is a tag (64 to 87) over a byte string or a tag
//     56500 compressed byte string, and dim0 x dim1 is its element count
//     (the compressed ones' from the 8-byte big-endian size that begins
//     their data);
//   - a tag 56500 item is ["bslz4" or "lz4", unsigned modifier, definite
//     byte string of at least 12 bytes]; another algorithm is not
//     implemented;
//   - user_data is any one data item.
//
// Beyond the parser, it checks what the Stream V2 README asks of the
// types it skips: arm_date and series_date are tag 0 over an RFC 3339
// date, and nothing follows the map.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"
)

// The reference parser's results (stream2.h's enum stream2_result).
var (
	errS2Signature      = errors.New("STREAM2_ERROR_SIGNATURE")
	errS2Decode         = errors.New("STREAM2_ERROR_DECODE")
	errS2Parse          = errors.New("STREAM2_ERROR_PARSE")
	errS2NotImplemented = errors.New("STREAM2_ERROR_NOT_IMPLEMENTED")
)

// s2Multidim is a decoded MultiDimArray.
type s2Multidim struct {
	Dim        [2]uint64
	Tag        uint64 // the typed array's tag
	Algorithm  string // "" uncompressed
	Modifier   uint64 // elem_size of bslz4
	OrigSize   uint64 // uncompressed bytes
	Data       []byte
	Compressed bool
}

// s2Msg is a decoded message: the fields the reference parser fills in,
// and which keys were present.
type s2Msg struct {
	Type           string
	SeriesID       uint64
	SeriesUniqueID string
	Keys           []string // in order, "type" first
	DateTags       []uint64 // the tags before arm_date or series_date

	// start
	ArmDate                                        string
	BeamCenterX, BeamCenterY, CountTime, FrameTime float64
	IncidentEnergy, IncidentWavelength             float64
	PixelSizeX, PixelSizeY, SensorThickness        float64
	Channels                                       []string
	DetectorDescription, SerialNumber, ImageDtype  string
	SensorMaterial                                 string
	DetectorTranslation                            [3]float64
	Goniometer                                     map[string][2]float64 // axis: start, increment
	ImageSizeX, ImageSizeY, NumberOfImages, SatVal uint64
	ThresholdEnergy                                map[string]float64
	Enabled                                        map[string]bool // the *_enabled flags
	UserData                                       []byte          // the raw item
	CountrateTable                                 *s2Multidim

	// image
	ImageID                       uint64
	RealTime, StartTime, StopTime [2]uint64
	SeriesDate                    string
	Data                          map[string]s2Multidim
}

// has says whether the message had key.
func (m *s2Msg) has(key string) bool {
	for _, k := range m.Keys {
		if k == key {
			return true
		}
	}
	return false
}

// s2Reader reads CBOR data items from b.
type s2Reader struct {
	b   []byte
	pos int
}

// head reads a data item's head: its major type, additional information
// and argument; indefinite for an indefinite length.
func (r *s2Reader) head() (major byte, info byte, arg uint64, err error) {
	if r.pos >= len(r.b) {
		return 0, 0, 0, fmt.Errorf("%w: unexpected end at %d", errS2Decode, r.pos)
	}
	c := r.b[r.pos]
	major, info = c>>5, c&0x1f
	r.pos++
	var n int
	switch {
	case info < 24:
		return major, info, uint64(info), nil
	case info == 24:
		n = 1
	case info == 25:
		n = 2
	case info == 26:
		n = 4
	case info == 27:
		n = 8
	case info == 31 && (major >= 2 && major <= 5 || major == 7):
		return major, info, 0, nil
	default:
		return 0, 0, 0, fmt.Errorf("%w: reserved additional information %d at %d", errS2Decode, info, r.pos-1)
	}
	if r.pos+n > len(r.b) {
		return 0, 0, 0, fmt.Errorf("%w: unexpected end at %d", errS2Decode, r.pos)
	}
	for _, x := range r.b[r.pos : r.pos+n] {
		arg = arg<<8 | uint64(x)
	}
	r.pos += n
	return major, info, arg, nil
}

// peek returns the next item's major type and additional information.
func (r *s2Reader) peek() (byte, byte, error) {
	if r.pos >= len(r.b) {
		return 0, 0, fmt.Errorf("%w: unexpected end at %d", errS2Decode, r.pos)
	}
	return r.b[r.pos] >> 5, r.b[r.pos] & 0x1f, nil
}

// skip reads past one whole data item.
func (r *s2Reader) skip() error {
	major, info, arg, err := r.head()
	if err != nil {
		return err
	}
	indefinite := info == 31
	switch major {
	case 0, 1:
	case 2, 3:
		if indefinite {
			for !r.isBreak() {
				if err := r.skip(); err != nil {
					return err
				}
			}
			r.pos++
			return nil
		}
		if uint64(len(r.b)-r.pos) < arg {
			return fmt.Errorf("%w: a string of %d bytes past the end", errS2Decode, arg)
		}
		r.pos += int(arg)
	case 4, 5:
		items := arg
		if major == 5 {
			items *= 2
		}
		for i := uint64(0); indefinite && !r.isBreak() || !indefinite && i < items; i++ {
			if err := r.skip(); err != nil {
				return err
			}
		}
		if indefinite {
			r.pos++
		}
	case 6:
		return r.skip()
	case 7:
		if indefinite {
			return fmt.Errorf("%w: a break outside a container", errS2Decode)
		}
	}
	return nil
}

func (r *s2Reader) isBreak() bool { return r.pos < len(r.b) && r.b[r.pos] == 0xff }

// skipTags reads past any tags before the next item, returning them.
func (r *s2Reader) skipTags() ([]uint64, error) {
	var tags []uint64
	for {
		major, _, err := r.peek()
		if err != nil || major != 6 {
			return tags, err
		}
		_, _, n, err := r.head()
		if err != nil {
			return tags, err
		}
		tags = append(tags, n)
	}
}

// text reads a text string, definite or in chunks.
func (r *s2Reader) text() (string, error) {
	major, info, arg, err := r.head()
	if err != nil {
		return "", err
	}
	if major != 3 {
		return "", fmt.Errorf("%w: major type %d where a text string is read", errS2Parse, major)
	}
	if info == 31 {
		var s string
		for !r.isBreak() {
			part, err := r.text()
			if err != nil {
				return "", err
			}
			s += part
		}
		r.pos++
		return s, nil
	}
	if uint64(len(r.b)-r.pos) < arg {
		return "", fmt.Errorf("%w: a text string past the end", errS2Decode)
	}
	s := string(r.b[r.pos : r.pos+int(arg)])
	r.pos += int(arg)
	return s, nil
}

// key reads a map key as the parser does: a text string, with a key of
// 64 bytes or more read as the empty key, unknown to every message.
func (r *s2Reader) key() (string, error) {
	k, err := r.text()
	if len(k) >= 64 {
		k = ""
	}
	return k, err
}

func (r *s2Reader) uint64() (uint64, error) {
	major, _, arg, err := r.head()
	if err != nil {
		return 0, err
	}
	if major != 0 {
		return 0, fmt.Errorf("%w: major type %d where an unsigned integer is read", errS2Parse, major)
	}
	return arg, nil
}

// double reads a half, single or double float.
func (r *s2Reader) double() (float64, error) {
	major, info, arg, err := r.head()
	if err != nil {
		return 0, err
	}
	if major != 7 || info < 25 || info > 27 {
		return 0, fmt.Errorf("%w: major type %d, info %d where a float is read", errS2Parse, major, info)
	}
	switch info {
	case 25:
		return halfToFloat(uint16(arg)), nil
	case 26:
		return float64(math.Float32frombits(uint32(arg))), nil
	}
	return math.Float64frombits(arg), nil
}

// halfToFloat converts an IEEE 754 binary16 value.
func halfToFloat(h uint16) float64 {
	exp, mant := int(h>>10&0x1f), float64(h&0x3ff)
	var v float64
	switch exp {
	case 0:
		v = math.Ldexp(mant, -24)
	case 31:
		v = math.Inf(1)
		if mant != 0 {
			v = math.NaN()
		}
	default:
		v = math.Ldexp(mant+1024, exp-25)
	}
	if h&0x8000 != 0 {
		v = -v
	}
	return v
}

func (r *s2Reader) boolean() (bool, error) {
	major, info, _, err := r.head()
	if err != nil {
		return false, err
	}
	if major != 7 || info != 20 && info != 21 {
		return false, fmt.Errorf("%w: not a boolean", errS2Parse)
	}
	return info == 21, nil
}

// length reads the head of a definite array or map.
func (r *s2Reader) length(major byte) (uint64, error) {
	m, info, arg, err := r.head()
	if err != nil {
		return 0, err
	}
	if m != major {
		return 0, fmt.Errorf("%w: major type %d where %d is read", errS2Parse, m, major)
	}
	if info == 31 {
		return 0, fmt.Errorf("%w: a container of indefinite length where its length is read", errS2Parse)
	}
	return arg, nil
}

// rational reads [numerator, denominator].
func (r *s2Reader) rational() ([2]uint64, error) {
	var v [2]uint64
	n, err := r.length(4)
	if err != nil {
		return v, err
	}
	if n != 2 {
		return v, fmt.Errorf("%w: a rational of %d items", errS2Parse, n)
	}
	for i := range v {
		if v[i], err = r.uint64(); err != nil {
			return v, err
		}
	}
	return v, nil
}

// tag reads one tag's head.
func (r *s2Reader) tag() (uint64, error) {
	major, _, arg, err := r.head()
	if err != nil {
		return 0, err
	}
	if major != 6 {
		return 0, fmt.Errorf("%w: major type %d where a tag is read", errS2Parse, major)
	}
	return arg, nil
}

// byteString reads a definite byte string without copying.
func (r *s2Reader) byteString() ([]byte, error) {
	major, info, arg, err := r.head()
	if err != nil {
		return nil, err
	}
	if major != 2 || info == 31 {
		return nil, fmt.Errorf("%w: not a definite byte string", errS2Parse)
	}
	if uint64(len(r.b)-r.pos) < arg {
		return nil, fmt.Errorf("%w: a byte string past the end", errS2Decode)
	}
	b := r.b[r.pos : r.pos+int(arg)]
	r.pos += int(arg)
	return b, nil
}

// bytes reads a byte string or a tag 56500 compressed one into m.
func (r *s2Reader) bytes(m *s2Multidim) error {
	major, _, err := r.peek()
	if err != nil {
		return err
	}
	if major != 6 {
		m.Data, err = r.byteString()
		m.OrigSize = uint64(len(m.Data))
		return err
	}
	if t, err := r.tag(); err != nil {
		return err
	} else if t != tagCompressed {
		return fmt.Errorf("%w: tag %d where bytes are read", errS2Parse, t)
	}
	n, err := r.length(4)
	if err != nil {
		return err
	}
	if n != 3 {
		return fmt.Errorf("%w: a compressed byte string of %d items", errS2Parse, n)
	}
	m.Compressed = true
	if m.Algorithm, err = r.text(); err != nil {
		return err
	}
	if m.Modifier, err = r.uint64(); err != nil {
		return err
	}
	if m.Data, err = r.byteString(); err != nil {
		return err
	}
	if m.Algorithm != "bslz4" && m.Algorithm != "lz4" {
		return fmt.Errorf("%w: compression %q", errS2NotImplemented, m.Algorithm)
	}
	if len(m.Data) < 12 {
		return fmt.Errorf("%w: %s data of %d bytes, under its 12-byte header", errS2Decode, m.Algorithm, len(m.Data))
	}
	m.OrigSize = binary.BigEndian.Uint64(m.Data)
	return nil
}

// typedArray reads a typed array into m and returns its element count.
func (r *s2Reader) typedArray(m *s2Multidim) (uint64, error) {
	var err error
	if m.Tag, err = r.tag(); err != nil {
		return 0, err
	}
	if err := r.bytes(m); err != nil {
		return 0, err
	}
	if m.Tag < 64 || m.Tag > 87 {
		return 0, fmt.Errorf("%w: typed array tag %d", errS2NotImplemented, m.Tag)
	}
	elem := uint64(1) << ((m.Tag>>4)&1 + m.Tag&3)
	if m.OrigSize%elem != 0 {
		return 0, fmt.Errorf("%w: %d bytes are not a whole number of %d-byte elements", errS2Parse, m.OrigSize, elem)
	}
	return m.OrigSize / elem, nil
}

// multidim reads tag 40 [[dim0, dim1], typed array].
func (r *s2Reader) multidim() (s2Multidim, error) {
	var m s2Multidim
	if t, err := r.tag(); err != nil {
		return m, err
	} else if t != tagMultiDim {
		return m, fmt.Errorf("%w: tag %d where tag 40 is read", errS2Parse, t)
	}
	if n, err := r.length(4); err != nil {
		return m, err
	} else if n != 2 {
		return m, fmt.Errorf("%w: a multi-dimensional array of %d items", errS2Parse, n)
	}
	dims, err := r.rational() // the same shape: two unsigned integers
	if err != nil {
		return m, err
	}
	m.Dim = dims
	count, err := r.typedArray(&m)
	if err != nil {
		return m, err
	}
	if m.Dim[0]*m.Dim[1] != count {
		return m, fmt.Errorf("%w: dimensions %v for %d elements", errS2Parse, m.Dim, count)
	}
	return m, nil
}

// textMap reads a definite map of text keys, calling value for each.
func (r *s2Reader) textMap(value func(key string) error) error {
	n, err := r.length(5)
	if err != nil {
		return err
	}
	for range n {
		k, err := r.text()
		if err != nil {
			return err
		}
		if err := value(k); err != nil {
			return err
		}
	}
	return nil
}

// walkMap walks a map, definite or not, whose keys are read as keys and
// whose values' tags are skipped, calling value for each.
func (r *s2Reader) walkMap(value func(key string) error) error {
	major, info, arg, err := r.head()
	if err != nil {
		return err
	}
	if major != 5 {
		return fmt.Errorf("%w: major type %d where a map is read", errS2Parse, major)
	}
	for i := uint64(0); info == 31 && !r.isBreak() || info != 31 && i < arg; i++ {
		k, err := r.key()
		if err != nil {
			return err
		}
		if _, err := r.skipTags(); err != nil {
			return err
		}
		if err := value(k); err != nil {
			return err
		}
	}
	if info == 31 {
		r.pos++
	}
	return nil
}

// parseStream2 decodes msg by the reference parser's rules.
func parseStream2(msg []byte) (*s2Msg, error) {
	if len(msg) < 3 || msg[0] != 0xd9 || msg[1] != 0xd9 || msg[2] != 0xf7 {
		return nil, fmt.Errorf("%w: the message does not begin with d9 d9 f7", errS2Signature)
	}
	r := &s2Reader{b: msg, pos: 3}
	major, info, arg, err := r.head()
	if err != nil {
		return nil, err
	}
	if major != 5 {
		return nil, fmt.Errorf("%w: the message is major type %d, not a map", errS2Parse, major)
	}
	if info != 31 && arg == 0 || r.isBreak() {
		return nil, fmt.Errorf("%w: an empty map", errS2Parse)
	}
	m := &s2Msg{Enabled: map[string]bool{}}
	if k, err := r.key(); err != nil {
		return nil, err
	} else if k != "type" {
		return nil, fmt.Errorf("%w: the first key is %q, not type", errS2Parse, k)
	}
	if _, err := r.skipTags(); err != nil {
		return nil, err
	}
	if m.Type, err = r.key(); err != nil {
		return nil, err
	}
	m.Keys = append(m.Keys, "type")
	var field func(*s2Reader, *s2Msg, string) error
	switch m.Type {
	case "start":
		field = startField
	case "image":
		field = imageField
	case "end":
		field = commonField
	default:
		return nil, fmt.Errorf("%w: type %q", errS2Parse, m.Type)
	}
	for i := uint64(1); info == 31 && !r.isBreak() || info != 31 && i < arg; i++ {
		k, err := r.key()
		if err != nil {
			return nil, err
		}
		m.Keys = append(m.Keys, k)
		if k != "countrate_correction_lookup_table" || m.Type != "start" {
			tags, err := r.skipTags()
			if err != nil {
				return nil, err
			}
			if k == "arm_date" || k == "series_date" {
				m.DateTags = append(m.DateTags, tags...)
			}
		}
		if err := field(r, m, k); err != nil {
			return nil, fmt.Errorf("%s message, key %s: %w", m.Type, k, err)
		}
	}
	if info == 31 {
		r.pos++
	}
	if r.pos != len(msg) {
		return nil, fmt.Errorf("%w: %d bytes after the map", errS2Decode, len(msg)-r.pos)
	}
	return m, nil
}

// commonField reads the keys of every message; any other is skipped.
func commonField(r *s2Reader, m *s2Msg, k string) (err error) {
	switch k {
	case "series_id":
		m.SeriesID, err = r.uint64()
	case "series_unique_id":
		m.SeriesUniqueID, err = r.text()
	default:
		err = r.skip()
	}
	return err
}

func startField(r *s2Reader, m *s2Msg, k string) (err error) {
	doubles := map[string]*float64{
		"beam_center_x": &m.BeamCenterX, "beam_center_y": &m.BeamCenterY, "count_time": &m.CountTime,
		"frame_time": &m.FrameTime, "incident_energy": &m.IncidentEnergy, "incident_wavelength": &m.IncidentWavelength,
		"pixel_size_x": &m.PixelSizeX, "pixel_size_y": &m.PixelSizeY, "sensor_thickness": &m.SensorThickness,
	}
	texts := map[string]*string{
		"arm_date": &m.ArmDate, "detector_description": &m.DetectorDescription, "detector_serial_number": &m.SerialNumber,
		"image_dtype": &m.ImageDtype, "sensor_material": &m.SensorMaterial,
	}
	uints := map[string]*uint64{
		"image_size_x": &m.ImageSizeX, "image_size_y": &m.ImageSizeY, "number_of_images": &m.NumberOfImages, "saturation_value": &m.SatVal,
	}
	switch {
	case doubles[k] != nil:
		*doubles[k], err = r.double()
	case texts[k] != nil:
		*texts[k], err = r.text()
	case uints[k] != nil:
		*uints[k], err = r.uint64()
	case k == "countrate_correction_enabled" || k == "flatfield_enabled" || k == "pixel_mask_enabled" || k == "virtual_pixel_interpolation_enabled":
		m.Enabled[k], err = r.boolean()
	case k == "channels":
		var n uint64
		if n, err = r.length(4); err != nil {
			return err
		}
		for range n {
			c, err := r.text()
			if err != nil {
				return err
			}
			m.Channels = append(m.Channels, c)
		}
	case k == "countrate_correction_lookup_table":
		t := &s2Multidim{}
		m.CountrateTable = t
		_, err = r.typedArray(t)
	case k == "detector_translation":
		var n uint64
		if n, err = r.length(4); err != nil {
			return err
		}
		if n != 3 {
			return fmt.Errorf("%w: %d items, want 3", errS2Parse, n)
		}
		for i := range m.DetectorTranslation {
			if m.DetectorTranslation[i], err = r.double(); err != nil {
				return err
			}
		}
	case k == "flatfield" || k == "pixel_mask":
		err = r.textMap(func(string) error { _, err := r.multidim(); return err })
	case k == "goniometer":
		m.Goniometer = map[string][2]float64{}
		err = r.walkMap(func(axis string) error {
			var v [2]float64
			err := r.walkMap(func(f string) (err error) {
				switch f {
				case "start":
					v[0], err = r.double()
				case "increment":
					v[1], err = r.double()
				default:
					err = r.skip()
				}
				return err
			})
			m.Goniometer[axis] = v
			return err
		})
	case k == "threshold_energy":
		m.ThresholdEnergy = map[string]float64{}
		err = r.textMap(func(c string) (err error) {
			m.ThresholdEnergy[c], err = r.double()
			return err
		})
	case k == "user_data":
		from := r.pos
		err = r.skip()
		m.UserData = r.b[from:r.pos]
	default:
		err = commonField(r, m, k)
	}
	return err
}

func imageField(r *s2Reader, m *s2Msg, k string) (err error) {
	switch k {
	case "image_id":
		m.ImageID, err = r.uint64()
	case "real_time":
		m.RealTime, err = r.rational()
	case "start_time":
		m.StartTime, err = r.rational()
	case "stop_time":
		m.StopTime, err = r.rational()
	case "series_date":
		m.SeriesDate, err = r.text()
	case "user_data":
		err = r.skip()
	case "data":
		m.Data = map[string]s2Multidim{}
		err = r.textMap(func(c string) error {
			d, err := r.multidim()
			m.Data[c] = d
			return err
		})
	default:
		err = commonField(r, m, k)
	}
	return err
}

// checkScan decodes every message of a scan by the reference parser's
// rules and checks what Stream V2 asks of a series: a start, images in
// image_id order each of the start's size and type, an end, all of one
// series; tag 0 dates; times as rationals of the detector clock, the
// start's count time as each image's real time. It returns the decoded
// messages.
func checkScan(t *testing.T, msgs [][]byte) []*s2Msg {
	t.Helper()
	var out []*s2Msg
	for i, b := range msgs {
		m, err := parseStream2(b)
		if err != nil {
			t.Fatalf("message %d of %d: %v", i, len(msgs), err)
		}
		out = append(out, m)
	}
	if len(out) < 2 || out[0].Type != "start" || out[len(out)-1].Type != "end" {
		types := make([]string, len(out))
		for i, m := range out {
			types[i] = m.Type
		}
		t.Fatalf("messages %v, want start, images, end", types)
	}
	start := out[0]
	if _, err := time.Parse(time.RFC3339Nano, start.ArmDate); err != nil || len(start.DateTags) != 1 || start.DateTags[0] != tagDateTime {
		t.Errorf("arm_date %q with tags %v, want tag 0 over RFC 3339 (%v)", start.ArmDate, start.DateTags, err)
	}
	if len(start.Channels) != 1 || start.Channels[0] != channel {
		t.Errorf("channels %v", start.Channels)
	}
	last := -1
	for _, m := range out[1 : len(out)-1] {
		if m.Type != "image" {
			t.Fatalf("a %s message amid the images", m.Type)
		}
		if int(m.ImageID) <= last {
			t.Errorf("image %d after image %d: not in image_id order", m.ImageID, last)
		}
		last = int(m.ImageID)
		if m.SeriesID != start.SeriesID || m.SeriesUniqueID != start.SeriesUniqueID {
			t.Errorf("image %d of series %d %q, the start's %d %q", m.ImageID, m.SeriesID, m.SeriesUniqueID, start.SeriesID, start.SeriesUniqueID)
		}
		if m.SeriesDate != start.ArmDate || len(m.DateTags) != 1 || m.DateTags[0] != tagDateTime {
			t.Errorf("image %d: series_date %q tags %v, want the arm date %q in tag 0", m.ImageID, m.SeriesDate, m.DateTags, start.ArmDate)
		}
		d, ok := m.Data[channel]
		if len(m.Data) != 1 || !ok || d.Dim != [2]uint64{start.ImageSizeY, start.ImageSizeX} {
			t.Errorf("image %d: data %v, want one %s of %d x %d", m.ImageID, m.Data, channel, start.ImageSizeY, start.ImageSizeX)
		}
		if want := map[string]uint64{"uint8": tagUint8, "uint16": tagUint16LE, "uint32": tagUint32LE, "float32": tagFloat32LE}[start.ImageDtype]; d.Tag != want {
			t.Errorf("image %d: typed array tag %d, the start's image_dtype %q", m.ImageID, d.Tag, start.ImageDtype)
		}
		if !m.has("start_time") || m.StartTime[1] != clockRate {
			t.Errorf("image %d: start_time %v", m.ImageID, m.StartTime)
		}
		if start.CountTime > 0 {
			exp := uint64(math.Round(start.CountTime * float64(clockRate)))
			if m.RealTime != [2]uint64{exp, clockRate} || m.StopTime != [2]uint64{m.StartTime[0] + exp, clockRate} {
				t.Errorf("image %d: real_time %v, start %v, stop %v, with a count time of %g s", m.ImageID, m.RealTime, m.StartTime, m.StopTime, start.CountTime)
			}
		}
	}
	end := out[len(out)-1]
	if end.SeriesID != start.SeriesID || end.SeriesUniqueID != start.SeriesUniqueID {
		t.Errorf("end of series %d %q, the start's %d %q", end.SeriesID, end.SeriesUniqueID, start.SeriesID, start.SeriesUniqueID)
	}
	return out
}

// TestParserRefuses shows that the decoder refuses what the reference
// parser refuses, each with its class of error: the checks the stream's
// tests rely on can fail.
func TestParserRefuses(t *testing.T) {
	enc := func(m map[string]any) []byte {
		b, err := encodeTypeFirst(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	image := func(f func(b []byte) []byte) []byte {
		b := appendHead(appendSelfDescribed(nil), majorMap, 3)
		b = appendText(appendText(b, "type"), "image")
		b = appendUint(appendText(b, "image_id"), 1)
		return f(appendText(b, "data"))
	}
	multidim := func(b []byte, h, w uint64, tag uint64) []byte {
		b = appendHead(appendText(appendHead(b, majorMap, 1), channel), majorTag, tagMultiDim)
		b = appendHead(b, majorArray, 2)
		b = appendUint(appendUint(appendHead(b, majorArray, 2), h), w)
		return appendHead(b, majorTag, tag)
	}
	bslz4 := func(b []byte, size uint64, body int) []byte {
		b = appendUint(appendText(appendHead(appendHead(b, majorTag, tagCompressed), majorArray, 3), "bslz4"), 4)
		data := make([]byte, body)
		if body >= 8 {
			binary.BigEndian.PutUint64(data, size)
		}
		return append(appendHead(b, majorBytes, uint64(len(data))), data...)
	}
	good := enc(map[string]any{"type": "end", "series_id": uint64(1), "series_unique_id": "x"})
	for _, tc := range []struct {
		name string
		msg  []byte
		want error
	}{
		{"no 55799 tag", good[3:], errS2Signature},
		{"not a map", append(appendSelfDescribed(nil), 0x80), errS2Parse},
		{"first key not type", append(appendText(appendHead(appendSelfDescribed(nil), majorMap, 1), "series_id"), 1), errS2Parse},
		{"unknown type", enc(map[string]any{"type": "stop"}), errS2Parse},
		{"series_id negative", enc(map[string]any{"type": "end", "series_id": -1}), errS2Parse},
		{"series_id a float", enc(map[string]any{"type": "end", "series_id": 1.5}), errS2Parse},
		{"count_time an integer", enc(map[string]any{"type": "start", "count_time": uint64(1)}), errS2Parse},
		{"beam centre a string", enc(map[string]any{"type": "start", "beam_center_x": "1"}), errS2Parse},
		{"translation of two", enc(map[string]any{"type": "start", "detector_translation": []float64{0, 1}}), errS2Parse},
		{"flag not a boolean", enc(map[string]any{"type": "start", "flatfield_enabled": 0}), errS2Parse},
		{"start_time of three", enc(map[string]any{"type": "image", "start_time": []uint64{1, 2, 3}}), errS2Parse},
		{"start_time a float", enc(map[string]any{"type": "image", "start_time": []float64{1, 2}}), errS2Parse},
		{"dims do not match", image(func(b []byte) []byte {
			b = multidim(b, 2, 3, tagUint32LE)
			return append(appendHead(b, majorBytes, 20), make([]byte, 20)...)
		}), errS2Parse},
		{"not whole elements", image(func(b []byte) []byte {
			b = multidim(b, 1, 1, tagUint32LE)
			return append(appendHead(b, majorBytes, 5), make([]byte, 5)...)
		}), errS2Parse},
		{"float32 not whole elements", image(func(b []byte) []byte {
			b = multidim(b, 1, 2, tagFloat32LE)
			return append(appendHead(b, majorBytes, 6), make([]byte, 6)...)
		}), errS2Parse},
		{"float32 dims do not match", image(func(b []byte) []byte {
			b = multidim(b, 1, 2, tagFloat32LE)
			return append(appendHead(b, majorBytes, 4), make([]byte, 4)...)
		}), errS2Parse},
		{"typed array tag beyond 87", image(func(b []byte) []byte {
			b = multidim(b, 1, 1, 88)
			return append(appendHead(b, majorBytes, 4), make([]byte, 4)...)
		}), errS2NotImplemented},
		{"compressed dims do not match", image(func(b []byte) []byte { return bslz4(multidim(b, 2, 2, tagUint32LE), 12, 12) }), errS2Parse},
		{"bslz4 under 12 bytes", image(func(b []byte) []byte { return bslz4(multidim(b, 1, 1, tagUint32LE), 4, 11) }), errS2Decode},
		{"unknown compression", image(func(b []byte) []byte {
			b = appendText(appendHead(appendHead(multidim(b, 1, 1, tagUint32LE), majorTag, tagCompressed), majorArray, 3), "zstd")
			return append(appendHead(appendUint(b, 0), majorBytes, 12), make([]byte, 12)...)
		}), errS2NotImplemented},
		{"no tag 40", image(func(b []byte) []byte {
			b = appendHead(appendText(appendHead(b, majorMap, 1), channel), majorTag, tagUint32LE)
			return append(appendHead(b, majorBytes, 4), 0, 0, 0, 0)
		}), errS2Parse},
		{"trailing bytes", append(good, 0), errS2Decode},
		{"cut short", good[:len(good)-1], errS2Decode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := parseStream2(tc.msg); !errors.Is(err, tc.want) {
				t.Errorf("%v, want %v", err, tc.want)
			}
		})
	}
	if m, err := parseStream2(good); err != nil || m.Type != "end" || m.SeriesID != 1 || m.SeriesUniqueID != "x" {
		t.Errorf("a good end message: %+v, %v", m, err)
	}
	// A float32 image of 1 x 2 pixels, tag 85: the reference parser takes
	// it, 4 bytes an element.
	f32 := image(func(b []byte) []byte {
		b = multidim(b, 1, 2, tagFloat32LE)
		return append(appendHead(b, majorBytes, 8), 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40)
	})
	if m, err := parseStream2(f32); err != nil || m.Data[channel].Tag != tagFloat32LE || m.Data[channel].Dim != [2]uint64{1, 2} {
		t.Errorf("a float32 image: %+v, %v", m, err)
	}
}
