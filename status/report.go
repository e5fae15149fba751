package status

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"h5ingest/instrument"
)

// Report is the page written after a scan: what was planned, what came of
// it, the throughput over time, and the files.
type Report struct {
	Command  string    // the command line
	Started  time.Time // when the command started
	Ended    time.Time
	Outcome  string // one line: complete, or what is wrong
	Monitors []*Monitor
}

// WriteHTML writes the report as one self-contained HTML page, its plots
// inline SVG.
func (r Report) WriteHTML(w io.Writer) error {
	type stage struct {
		Name           string
		Count          uint64
		Mean, P50, P99 string
	}
	type scan struct {
		Status
		Outcome           string
		PeakRate          float64
		Stored            string
		FramePlot, MBPlot template.HTML
		Stages            []stage
	}
	var scans []scan
	for _, m := range r.Monitors {
		st := m.Status()
		samples := m.Samples()
		var t, fps, mbps []float64
		peak := 0.0
		for i := 1; i < len(samples); i++ {
			a, b := samples[i-1], samples[i]
			dt := (b.At - a.At).Seconds()
			if dt < SampleInterval.Seconds()/2 {
				continue // the short last interval: too noisy to plot
			}
			f := float64(b.Progress.Written-a.Progress.Written) / dt
			t = append(t, b.At.Seconds())
			fps = append(fps, f)
			mbps = append(mbps, float64(b.Progress.RawBytes-a.Progress.RawBytes)/dt/1e6)
			peak = max(peak, f)
		}
		sc := scan{Status: st, PeakRate: peak, Stored: byteSize(st.StoredBytes),
			FramePlot: plotSVG("frames written per second", t, fps),
			MBPlot:    plotSVG("input MB/s (payload)", t, mbps)}
		if s := m.stages; s != nil {
			for _, h := range []struct {
				name string
				h    prometheus.Histogram
			}{{"wait for source, per frame", s.SourceWait}, {"decode, per batch", s.DecodeSeconds},
				{"compress, per frame", s.CompressSeconds}, {"write, per frame", s.WriteSeconds}} {
				snap := instrument.Snapshot(h.h)
				sc.Stages = append(sc.Stages, stage{Name: h.name, Count: snap.Count,
					Mean: ms(snap.Mean()), P50: ms(snap.Quantile(0.5)), P99: ms(snap.Quantile(0.99))})
			}
		}
		scans = append(scans, sc)
	}
	return reportPage.Execute(w, map[string]any{
		"R": r, "Scans": scans,
		"Duration": r.Ended.Sub(r.Started).Round(time.Millisecond).String(),
	})
}

// ms formats seconds as milliseconds.
func ms(s float64) string { return fmt.Sprintf("%.3f", s*1e3) }

// byteSize formats a byte count for people.
func byteSize(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%d bytes", n)
}

// plotSVG draws ys against xs (seconds) as a line plot with axes.
func plotSVG(title string, xs, ys []float64) template.HTML {
	const w, h, left, right, top, bottom = 720, 220, 60, 15, 25, 35
	pw, ph := float64(w-left-right), float64(h-top-bottom)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`, w, h, w, h)
	fmt.Fprintf(&b, `<text x="%d" y="15" font-size="13">%s</text>`, left, template.HTMLEscapeString(title))
	if len(xs) == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#888">no samples: the scan lasted under a second</text></svg>`, left, top+int(ph/2))
		return template.HTML(b.String())
	}
	xmax, ymax := xs[len(xs)-1], 0.0
	for _, y := range ys {
		ymax = max(ymax, y)
	}
	xstep, ystep := niceStep(xmax/6), niceStep(ymax/4)
	xmax = math.Max(math.Ceil(xmax/xstep)*xstep, xstep)
	ymax = math.Max(math.Ceil(ymax/ystep)*ystep, ystep)
	px := func(x float64) float64 { return left + x/xmax*pw }
	py := func(y float64) float64 { return top + ph - y/ymax*ph }
	for y := 0.0; y <= ymax+ystep/2; y += ystep {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`, left, w-right, py(y), py(y))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`, left-5, py(y)+4, tick(y))
	}
	for x := 0.0; x <= xmax+xstep/2; x += xstep {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#999"/>`, px(x), px(x), top+int(ph), top+int(ph)+4)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, px(x), top+int(ph)+16, tick(x))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">seconds since the start</text>`, left+pw/2, h-3)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`, left, top, pw, ph)
	b.WriteString(`<polyline fill="none" stroke="#2a6" stroke-width="1.5" points="`)
	for i := range xs {
		fmt.Fprintf(&b, "%.1f,%.1f ", px(xs[i]), py(ys[i]))
	}
	b.WriteString(`"/></svg>`)
	return template.HTML(b.String())
}

// niceStep returns 1, 2 or 5 times a power of ten, at least v.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func tick(v float64) string { return fmt.Sprintf("%g", math.Round(v*1000)/1000) }

var reportPage = template.Must(template.New("report").Funcs(template.FuncMap{
	"f1": func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"f2": func(v float64) string { return fmt.Sprintf("%.2f", v) },
	"f3": func(v float64) string { return fmt.Sprintf("%.3f", v) },
	"ts": func(t time.Time) string { return t.Format("2006-01-02 15:04:05 MST") },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>h5ingest scan report{{range .Scans}} {{.Scan.ID}}{{end}}</title>
<style>
body { font: 14px/1.4 sans-serif; margin: 1.5em 2em; color: #222; max-width: 780px; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 1.5em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: .5em 0; }
th { text-align: left; font-weight: normal; color: #555; padding: 1px 1.5em 1px 0; vertical-align: top; }
td { padding: 1px 1em 1px 0; font-variant-numeric: tabular-nums; }
td.n { text-align: right; }
.bad { color: #c00; font-weight: bold; }
code { font-size: 12px; overflow-wrap: anywhere; }
</style></head><body>
<h1>h5ingest scan report</h1>
<table>
<tr><th>outcome</th><td>{{.R.Outcome}}</td></tr>
<tr><th>started</th><td>{{ts .R.Started}}</td></tr>
<tr><th>ended</th><td>{{ts .R.Ended}} ({{.Duration}})</td></tr>
<tr><th>command</th><td><code>{{.R.Command}}</code></td></tr>
</table>
{{range .Scans}}
<h2>Scan {{.Scan.ID}}, module {{.Scan.Module}}</h2>
<table>
<tr><th>file</th><td><code>{{.Scan.Output}}</code></td></tr>
<tr><th>plan</th><td>{{if .Scan.Plan}}{{.Scan.Plan}}{{else}}none (unknown length){{end}}</td></tr>
<tr><th>frame format</th><td>{{.Scan.Format}}</td></tr>
<tr><th>backend, compression</th><td>{{.Scan.Backend}}, {{.Scan.Compression}}</td></tr>
</table>
<table>
<tr><th>frames in the scan</th><td class="n">{{.Frames}}</td><th>written</th><td class="n">{{.Written}}</td></tr>
<tr><th>ok</th><td class="n">{{.OK}}</td><th>received</th><td class="n">{{.Received}}</td></tr>
<tr><th>missing</th><td class="n{{if .Missing}} bad{{end}}">{{.Missing}}</td><th>duplicates dropped</th><td class="n{{if .Duplicate}} bad{{end}}">{{.Duplicate}}</td></tr>
<tr><th>crc mismatch</th><td class="n{{if .CRCMismatch}} bad{{end}}">{{.CRCMismatch}}</td><th>out of range rejected</th><td class="n{{if .OutOfRange}} bad{{end}}">{{.OutOfRange}}</td></tr>
<tr><th>rejected</th><td class="n{{if .Rejected}} bad{{end}}">{{.Rejected}}</td><th>not a frame</th><td class="n{{if .NotFrame}} bad{{end}}">{{.NotFrame}}</td></tr>
<tr><th>dropped, pipeline full</th><td class="n{{if .Overflow}} bad{{end}}">{{.Overflow}}</td><th>discarded, cancelled first</th><td class="n{{if .Discarded}} bad{{end}}">{{.Discarded}}</td></tr>
<tr><th>time</th><td class="n">{{f2 .Elapsed}} s</td><th>sender held back</th><td class="n">{{f3 .HeldBack}} s</td></tr>
<tr><th>mean rate</th><td class="n">{{f1 .MeanFrameRate}} frames/s</td><th>peak rate</th><td class="n">{{f1 .PeakRate}} frames/s</td></tr>
<tr><th>compression ratio</th><td class="n">{{f2 .Ratio}}</td><th>stored</th><td class="n">{{.Stored}}</td></tr>
</table>
{{.FramePlot}}
{{.MBPlot}}
{{if .Stages}}<table>
<tr><th>stage</th><th>calls</th><th>mean ms</th><th>median ms</th><th>99% ms</th></tr>
{{range .Stages}}<tr><td>{{.Name}}</td><td class="n">{{.Count}}</td><td class="n">{{.Mean}}</td><td class="n">{{.P50}}</td><td class="n">{{.P99}}</td></tr>
{{end}}</table>
<p style="color:#666;font-size:12px">Median and 99% are bucket upper bounds (buckets double from 0.01 ms).</p>{{end}}
{{end}}
</body></html>
`))
