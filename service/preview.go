package service

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net/http"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"h5ingest/preview"
)

// Imager is a Scan that shows its latest image (optional).
type Imager interface {
	// LatestImage returns the scan's latest image, with a key that changes
	// whenever the image does; key 0 when it has none yet. When the key
	// is have, the image is the one the caller has already and its Data
	// is left nil. It is safe to call from any goroutine, during Run and
	// after.
	LatestImage(have uint64) (img preview.Frame, number uint64, key uint64, err error)
}

// previewEvery bounds how often a preview is rendered, however many
// clients ask: at most two a second, and less often where one rendering
// takes longer than previewShare of the time (a full Pi-mega frame takes
// about 0.4 s of a core), so that previews never take more than a quarter
// of a core from the scan. A request in between gets the last picture
// rendered, when it is of the same scan and size.
const (
	previewEvery = 500 * time.Millisecond
	previewShare = 4
)

// previewCache holds the last picture rendered, of one scan at one size.
type previewCache struct {
	turn chan struct{} // holds a token while a request renders

	scanID string
	side   int
	key    uint64 // of the image rendered
	number uint64 // its frame number
	png    []byte
	next   time.Time // when the next rendering, of any scan, may start
}

func newPreviewCache() *previewCache {
	c := &previewCache{turn: make(chan struct{}, 1)}
	c.turn <- struct{}{}
	return c
}

type previewInput struct {
	ID      string `path:"id" maxLength:"128" pattern:"^[A-Za-z0-9_-][A-Za-z0-9._-]*$"`
	MaxSide int    `query:"max_side" default:"0" minimum:"0" maximum:"65536" doc:"Shrink the picture so its longer side is at most this many pixels, by averaging blocks; 0: full size."`
}

type previewOutput struct {
	ContentType  string `header:"Content-Type"`
	CacheControl string `header:"Cache-Control"`
	FrameNumber  string `header:"X-Frame-Number" doc:"The frame number of the image shown."`
	Body         []byte
}

// registerPreview registers a scan's latest image as a picture.
func (s *Service) registerPreview() {
	cache := newPreviewCache()
	huma.Register(s.api, huma.Operation{
		OperationID: "get-preview", Method: http.MethodGet, Path: "/v1/scans/{id}/preview.png",
		Summary:     "A scan's latest image as a PNG picture",
		Description: "As h5ingest inspect --png renders a frame: counts on a log scale with a colour bar. While the scan runs, the latest image decoded (kept a few times a second while someone looks); once it has ended, the last frame written to its file. Rendered at most twice a second, and less often where one rendering takes long (a full-size frame of a large detector), so that previews take at most a quarter of a core: a request in between gets the last picture. 404 when the scan has no image yet.",
		Errors:      []int{http.StatusNotFound, http.StatusInternalServerError, http.StatusServiceUnavailable},
		Responses: map[string]*huma.Response{
			"200": {Description: "The picture", Content: map[string]*huma.MediaType{
				"image/png": {Schema: &huma.Schema{Type: huma.TypeString, Format: "binary"}},
			}},
		},
	}, func(ctx context.Context, in *previewInput) (*previewOutput, error) {
		j, err := s.find(in.ID)
		if err != nil {
			return nil, err
		}
		im, ok := j.scan.(Imager)
		if !ok {
			return nil, huma.Error404NotFound(fmt.Sprintf("scan %s shows no image", in.ID))
		}
		b, number, err := cache.get(ctx, in.ID, im, in.MaxSide)
		if err != nil {
			return nil, err
		}
		return &previewOutput{ContentType: "image/png", CacheControl: "no-store", FrameNumber: strconv.FormatUint(number, 10), Body: b}, nil
	})
}

// get returns the picture of the scan's latest image at side: the last
// one rendered when it is of this scan, side and image, or when the next
// rendering is not due yet; otherwise a new one, once it is due.
func (c *previewCache) get(ctx context.Context, id string, im Imager, side int) ([]byte, uint64, error) {
	select {
	case <-c.turn:
	case <-ctx.Done():
		return nil, 0, huma.Error503ServiceUnavailable("the client went away while waiting for the preview")
	}
	defer func() { c.turn <- struct{}{} }()
	same := c.scanID == id && c.side == side && c.png != nil
	if same && time.Now().Before(c.next) {
		return c.png, c.number, nil
	}
	if wait := time.Until(c.next); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, 0, huma.Error503ServiceUnavailable("the client went away while waiting for the preview")
		}
	}
	have := uint64(0)
	if same {
		have = c.key
	}
	img, number, key, err := im.LatestImage(have)
	switch {
	case err != nil:
		return nil, 0, huma.Error500InternalServerError(fmt.Sprintf("scan %s's latest image", id), err)
	case key == 0:
		return nil, 0, huma.Error404NotFound(fmt.Sprintf("scan %s has no image yet", id))
	case same && key == have:
		return c.png, c.number, nil
	}
	start := time.Now()
	pic, err := preview.Render(img, preview.Options{MaxSide: side, ColorBar: true})
	if err != nil {
		return nil, 0, huma.Error500InternalServerError(fmt.Sprintf("scan %s's frame %d", id, number), err)
	}
	var b bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&b, pic); err != nil {
		return nil, 0, huma.Error500InternalServerError(fmt.Sprintf("scan %s's frame %d", id, number), err)
	}
	c.scanID, c.side, c.key, c.number, c.png = id, side, key, number, b.Bytes()
	c.next = start.Add(max(previewEvery, previewShare*time.Since(start)))
	return c.png, number, nil
}
