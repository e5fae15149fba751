package stream

import (
	"fmt"
	"maps"
	"time"

	"github.com/fxamacker/cbor/v2"
)

// channel is the one channel of a Pi-mega image: its single threshold.
const channel = "threshold_1"

// rotationAxis is the goniometer axis a rotation plan turns: omega, the
// axis of a tomography stage in DECTRIS's and NeXus's naming.
const rotationAxis = "omega"

// clockRate is the detector clock's ticks a second: its timestamps are
// nanoseconds, the denominator of every image's times.
const clockRate = uint64(time.Second)

// typedArrayTag returns the RFC 8746 typed array tag of little-endian
// pixels of size bytes: unsigned integers, or IEEE 754 floats where float
// is set (float32 only).
func typedArrayTag(size int, float bool) (uint64, bool) {
	switch {
	case float && size == 4:
		return tagFloat32LE, true
	case float:
		return 0, false
	case size == 1:
		return tagUint8, true
	case size == 2:
		return tagUint16LE, true
	case size == 4:
		return tagUint32LE, true
	}
	return 0, false
}

// dtypeName is Stream V2's image_dtype of size-byte pixels: uint8, uint16
// or uint32, as DECTRIS lists them, or float32, the name NumPy gives the
// typed array of tag 85.
func dtypeName(size int, float bool) string {
	if float {
		return fmt.Sprintf("float%d", 8*size)
	}
	return fmt.Sprintf("uint%d", 8*size)
}

// startMessage encodes the start of the series: every field the profile
// and the plan know. A field whose value is not known (0 or empty in the
// Series) is left out rather than sent as a guess.
func startMessage(s *Series, id string, number uint64) ([]byte, error) {
	m := map[string]any{
		"type":                 "start",
		"series_id":            number,
		"series_unique_id":     id,
		"arm_date":             cbor.Tag{Number: tagDateTime, Content: s.Armed.UTC().Format(time.RFC3339Nano)},
		"channels":             []string{channel},
		"image_size_x":         uint64(s.Width),
		"image_size_y":         uint64(s.Height),
		"image_dtype":          dtypeName(s.ElemSize, s.Float),
		"number_of_images":     uint64(s.Images),
		"detector_description": s.Description,
		// h5ingest writes the images as the detector counted them: it
		// applies none of the corrections Stream V2 names, but in a
		// series of a flat-field processor's previews.
		"countrate_correction_enabled":        false,
		"flatfield_enabled":                   s.Flatfield,
		"pixel_mask_enabled":                  false,
		"virtual_pixel_interpolation_enabled": false,
	}
	floats := []struct {
		key string
		v   float64
	}{
		{"pixel_size_x", s.PixelSize}, {"pixel_size_y", s.PixelSize},
		{"incident_energy", s.Energy}, {"count_time", s.CountTime}, {"frame_time", s.FrameTime},
		{"sensor_thickness", s.SensorThickness},
	}
	for _, f := range floats {
		if f.v > 0 {
			m[f.key] = f.v
		}
	}
	if s.Energy > 0 {
		m["incident_wavelength"] = planckTimesC / s.Energy
	}
	if s.Saturation > 0 {
		m["saturation_value"] = s.Saturation
	}
	if s.BeamCenter != nil {
		m["beam_center_x"], m["beam_center_y"] = s.BeamCenter[0], s.BeamCenter[1]
	}
	if s.Distance > 0 {
		m["detector_translation"] = []float64{0, 0, s.Distance}
	}
	if s.Rotation != nil {
		m["goniometer"] = map[string]any{rotationAxis: map[string]float64{"start": s.Rotation.Start, "increment": s.Rotation.Increment}}
	}
	if s.Threshold > 0 {
		m["threshold_energy"] = map[string]float64{channel: s.Threshold}
	}
	for key, v := range map[string]string{"sensor_material": s.SensorMaterial, "detector_serial_number": s.SerialNumber} {
		if v != "" {
			m[key] = v
		}
	}
	if s.UserData != nil {
		m["user_data"] = s.UserData
	}
	return encodeTypeFirst(m)
}

// planckTimesC converts a photon energy in eV to its wavelength in
// ångström: λ = hc / E, hc = 12398.419843320026 eV Å (CODATA 2018, exact
// since the SI redefinition).
const planckTimesC = 12398.419843320026

// endMessage encodes the end of the series, with the stream's counts in
// its user_data.
func endMessage(id string, number uint64, st Stats) ([]byte, error) {
	ud := map[string]any{
		"images_sent": st.Sent, "images_dropped": st.Dropped, "images_thinned": st.Thinned,
		"images_no_consumer": st.NoConsumer, "images_out_of_order": st.OutOfOrder, "image_ids_skipped": st.Gaps,
	}
	return encodeTypeFirst(map[string]any{
		"type":             "end",
		"series_id":        number,
		"series_unique_id": id,
		"user_data":        ud,
	})
}

// canonical encodes the start and end messages' fields in CBOR's
// canonical order, each float in its shortest exact form (which DECTRIS's
// parser reads as a double, as it does a half or single float).
var canonical = func() cbor.EncMode {
	em, err := cbor.CanonicalEncOptions().EncMode()
	if err != nil {
		panic(err) // the library's own options
	}
	return em
}()

// encodeTypeFirst encodes m as a self-described CBOR map whose first key
// is "type", as Stream V2 asks of every message; the other keys follow in
// CBOR's canonical order.
func encodeTypeFirst(m map[string]any) ([]byte, error) {
	m = maps.Clone(m)
	typ := m["type"].(string)
	delete(m, "type")
	rest, err := canonical.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("stream: encode %s message: %w", typ, err)
	}
	// rest is a map head then its pairs: write a head one larger, the
	// type, then the pairs.
	var n uint64
	body := rest[1:]
	switch info := rest[0] & 0x1f; {
	case info < 24:
		n = uint64(info)
	case info == 24:
		n, body = uint64(rest[1]), rest[2:]
	default:
		return nil, fmt.Errorf("stream: %s message of %d fields", typ, len(m))
	}
	b := appendHead(appendSelfDescribed(nil), majorMap, n+1)
	b = appendText(appendText(b, "type"), typ)
	return append(b, body...), nil
}

// headFixed bounds the bytes of an image message before its chunk, less
// its series_unique_id and series_date.
const headFixed = 256

// sizeHead sets the room each image's buffer keeps before its chunk for
// the head of its message, and the largest chunk.
func (s *Stream) sizeHead(maxChunk int) {
	s.headRoom = headFixed + len(s.uniqueID) + len(s.armDate)
	s.maxChunk = maxChunk
	s.head = make([]byte, 0, s.headRoom)
}

// imageMessage returns the image message of img, built in img's buffer
// around its chunk: the head is encoded apart and copied in just before
// the chunk, and the tail appended after it, so that the chunk is not
// copied again.
func (s *Stream) imageMessage(img *image) []byte {
	s.head = s.imageHead(s.head[:0], img)
	at := s.headRoom - len(s.head)
	if at < 0 { // cannot happen: headRoom bounds the head
		msg := append(s.head, img.buf[s.headRoom:s.headRoom+img.size]...)
		return s.imageTail(msg, img)
	}
	copy(img.buf[at:], s.head)
	return s.imageTail(img.buf[:s.headRoom+img.size], img)[at:]
}

// imageHead appends the fields of img's message before its chunk's
// bytes, and the head of their byte string, to b.
func (s *Stream) imageHead(b []byte, img *image) []byte {
	se := &s.series
	fields := uint64(8) // type, series_id, series_unique_id, image_id, series_date, start_time, data, user_data
	exposure := s.exposure
	if exposure > 0 {
		fields += 2 // stop_time, real_time
	}
	b = appendHead(appendSelfDescribed(b), majorMap, fields)
	b = appendText(appendText(b, "type"), "image")
	b = appendUint(appendText(b, "series_id"), s.number)
	b = appendText(appendText(b, "series_unique_id"), s.uniqueID)
	b = appendUint(appendText(b, "image_id"), uint64(img.n))
	b = appendText(appendHead(appendText(b, "series_date"), majorTag, tagDateTime), s.armDate)
	// The detector clock, counted from series_date.
	b = appendRational(appendText(b, "start_time"), img.start, clockRate)
	if exposure > 0 {
		b = appendRational(appendText(b, "stop_time"), img.start+exposure, clockRate)
		b = appendRational(appendText(b, "real_time"), exposure, clockRate)
	}
	// data: {channel: tag 40 [[height, width], typed array of the pixels]}
	b = appendHead(appendText(b, "data"), majorMap, 1)
	b = appendHead(appendText(b, channel), majorTag, tagMultiDim)
	b = appendHead(b, majorArray, 2)
	b = appendUint(appendUint(appendHead(b, majorArray, 2), uint64(se.Height)), uint64(se.Width))
	tag, _ := typedArrayTag(se.ElemSize, se.Float)
	b = appendHead(b, majorTag, tag)
	switch se.Compression {
	case "bslz4":
		b = appendUint(appendText(appendHead(appendHead(b, majorTag, tagCompressed), majorArray, 3), "bslz4"), uint64(se.ElemSize))
	case "lz4":
		b = appendUint(appendText(appendHead(appendHead(b, majorTag, tagCompressed), majorArray, 3), "lz4"), 0)
	}
	return appendHead(b, majorBytes, uint64(img.size))
}

// imageTail appends the fields of img's message after its chunk to b:
// its user_data, what the file's records (where the image is a chunk of
// the file) and plan say of the frame.
func (s *Stream) imageTail(b []byte, img *image) []byte {
	se := &s.series
	r := img.record
	n := uint64(0)
	if img.recorded {
		n += 3
	}
	plan := img.n < len(se.ImageKeys) && img.n < len(se.Angles)
	if plan {
		n += 2
	}
	b = appendHead(appendText(b, "user_data"), majorMap, n)
	if img.recorded {
		b = appendUint(appendText(b, "status"), uint64(r.Status))
		b = appendUint(appendText(b, "raw_crc32c"), uint64(r.RawCRC))
		b = appendUint(appendText(b, "data_crc32c"), uint64(r.DataCRC))
	}
	if plan {
		b = appendUint(appendText(b, "image_key"), uint64(se.ImageKeys[img.n]))
		b = appendFloat(appendText(b, "rotation_angle"), se.Angles[img.n])
	}
	return b
}
