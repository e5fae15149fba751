package cli

import (
	"strings"
	"testing"

	"h5ingest/scan"
	"h5ingest/stream"
)

// TestSummaryPrintsSeries: a processor's series on the live stream gets a
// line of its own under the scan's stream, named by the series, with what
// it sent, what it left out and why (not "in the file": a preview is not
// a frame of the file), and whether its end went out.
func TestSummaryPrintsSeries(t *testing.T) {
	var b strings.Builder
	printSummary(&b, scan.Summary{Path: "s.h5",
		Live: &scan.LiveResult{Stats: stream.Stats{Sent: 21}, Ended: true},
		Series: []scan.SeriesResult{
			{Name: "flatfield", LiveResult: scan.LiveResult{Stats: stream.Stats{Sent: 12}, Ended: true}},
			{Name: "other", LiveResult: scan.LiveResult{Stats: stream.Stats{Sent: 3, Dropped: 9, NoConsumer: 4, Slow: 5}}},
		}})
	got := b.String()
	for _, want := range []string{
		"  stream          21 images sent, 0 dropped (none left out), 0 thinned\n  stream end      delivered\n" +
			"  flatfield       12 images sent, 0 dropped (none left out), end delivered\n" +
			"  other           3 images sent, 9 dropped (4 no consumer connected, 5 the consumer was slower than the scan), end not delivered\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary\n%s\nwants\n%s", got, want)
		}
	}
}
